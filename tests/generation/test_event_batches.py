"""``SessionEvents`` reads the worker in batches: however messages are grouped, the answer is the
same as reading them one by one; runs of one choice are pushed as one step."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from turnout.errors import ApiError
from turnout.generation.chat_render import ChatRenderer
from turnout.generation.choice import ChoiceProcessor
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, Usage
from turnout.generation.pipeline import SessionEvents
from turnout.wire import pb

from .outputs import EOS, TOKENIZER, output_ids, outputs, processor


class ScriptedSession:
    """A worker session handing out pre-grouped batches of real ``GenerateResponse``s."""

    def __init__(self, batches: list[list[pb.GenerateResponse]]) -> None:
        self._batches = list(batches)
        self.closed = False
        self.reads = 0

    async def next_batch(self) -> list[pb.GenerateResponse]:
        self.reads += 1
        return self._batches.pop(0) if self._batches else []

    async def aclose(self) -> None:
        self.closed = True


async def stream_events(
    session: ScriptedSession, processors: list[ChoiceProcessor]
) -> AsyncGenerator[list[Event], None]:
    """The session's non-empty event batches, read as the flow reads them; closed at the end."""
    source = SessionEvents(session, processors)
    try:
        while not source.ended:
            events = source.take(await session.next_batch())
            if events:
                yield events
    finally:
        await source.aclose()


def messages(outputs: list[list[int]], sizes: list[int]) -> list[pb.GenerateResponse]:
    """Chunks of every choice, interleaved, ``sizes`` tokens at a time, then the completes."""
    pieces: list[list[pb.GenerateResponse]] = []
    for index, ids in enumerate(outputs):
        cycle = itertools.cycle(sizes or [1])
        chunks: list[pb.GenerateResponse] = []
        pos = 0
        while pos < len(ids):
            size = next(cycle)
            part = ids[pos : pos + size]
            logprobs = pb.OutputLogProbs(token_logprobs=[-0.5] * len(part), token_ids=list(part))
            chunks.append(
                pb.GenerateResponse(
                    chunk=pb.GenerateStreamChunk(
                        token_ids=part, index=index, prompt_tokens=7, output_logprobs=logprobs
                    )
                )
            )
            pos += size
        pieces.append(chunks)
    interleaved = [m for group in itertools.zip_longest(*pieces) for m in group if m is not None]
    completes = [
        pb.GenerateResponse(
            complete=pb.GenerateComplete(
                output_ids=ids, finish_reason="stop", index=index, completion_tokens=len(ids)
            )
        )
        for index, ids in enumerate(outputs)
    ]
    return interleaved + completes


def grouped(items: list[pb.GenerateResponse], cuts: list[int]) -> list[list[pb.GenerateResponse]]:
    bounds = sorted({c % (len(items) + 1) for c in cuts} | {0, len(items)})
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


async def fold(
    batches: list[list[pb.GenerateResponse]], n: int, stops: list[str]
) -> tuple[dict[str, object], list[list[Event]]]:
    session = ScriptedSession(batches)
    folder = ChatRenderer("id", "m", 0, n)
    seen: list[list[Event]] = []
    async for batch in stream_events(session, [processor(i, stops) for i in range(n)]):
        seen.append(batch)
        folder.fold(batch)
    assert session.closed
    return folder.answer(), seen


@settings(max_examples=60, deadline=None)
@given(
    st.lists(outputs(), min_size=1, max_size=2),
    st.lists(st.integers(1, 4), max_size=4),
    st.lists(st.integers(0, 200), max_size=10),
    st.sampled_from([[], ["STOP"]]),
)
async def test_any_grouping_of_messages_gives_the_one_by_one_answer(
    texts: list[str], sizes: list[int], cuts: list[int], stops: list[str]
) -> None:
    items = messages([output_ids(t) for t in texts], sizes)
    one_by_one, _ = await fold([[m] for m in items], len(texts), stops)
    batched, _ = await fold(grouped(items, cuts), len(texts), stops)
    assert batched == one_by_one


@settings(max_examples=60, deadline=None)
@given(
    st.lists(outputs(), min_size=1, max_size=2),
    st.lists(st.integers(1, 16), min_size=1, max_size=4),
    st.sampled_from([["STOP"], ["STOP", "\n"], ["é🎉"]]),
)
@example(texts=["helloSTOP"], sizes=[2], stops=["STOP"])  # the stop's last token, then EOS
@example(texts=["STOP"], sizes=[1, 2], stops=["STOP"])
@example(texts=["hello\n"], sizes=[2], stops=["STOP", "\n"])
@example(texts=["hello\n"], sizes=[3], stops=["STOP", "\n"])
@example(texts=["hello\n"], sizes=[16], stops=["STOP", "\n"])
async def test_tokens_per_message_do_not_change_text_usage_or_logprobs(
    texts: list[str], sizes: list[int], stops: list[str]
) -> None:
    """A worker sending several tokens per message (one-shot answers watched for stops) gives
    the answer of one token per message (streaming): the stop ends tokens and logprobs too."""
    outputs_ = [output_ids(t) for t in texts]
    one_by_one, _ = await fold([messages(outputs_, [1])], len(texts), stops)
    several, _ = await fold([messages(outputs_, sizes)], len(texts), stops)
    assert several == one_by_one


async def test_a_run_of_one_choice_is_one_delta_with_every_logprob() -> None:
    ids = TOKENIZER.encode("hello world, hello router", add_special_tokens=False)
    items = messages([[*ids, EOS]], [1])
    _, seen = await fold([items], 1, [])
    assert len(seen) == 1  # one batch in, one batch of events out
    deltas = [e for e in seen[0] if isinstance(e, ChoiceDelta)]
    assert len(deltas) == 1
    assert deltas[0].content == "hello world, hello router"
    assert [lp.token_id for lp in deltas[0].logprobs or []] == ids  # EOS ends it: no logprob
    assert isinstance(seen[0][-2], ChoiceEnd)
    usage = seen[0][-1]
    assert isinstance(usage, Usage)
    assert (usage.prompt_tokens, usage.completion_tokens) == (7, len(ids) + 1)


async def test_a_stop_inside_a_batch_ends_the_stream_there() -> None:
    ids = TOKENIZER.encode("alpha beta STOP gamma delta", add_special_tokens=False)
    items = messages([[*ids, EOS]], [1])
    session = ScriptedSession([items[:3], items[3:], [items[-1]]])
    events = [e async for batch in stream_events(session, [processor(0, ["STOP"])]) for e in batch]
    text = "".join(e.content for e in events if isinstance(e, ChoiceDelta))
    assert text == "alpha beta "
    ends = [e for e in events if isinstance(e, ChoiceEnd)]
    assert [(e.finish_reason, e.matched_stop) for e in ends] == [("stop", "STOP")]
    assert isinstance(events[-1], Usage)
    assert session.closed
    assert session.reads == 2  # the batch after the stop was never asked for


async def test_a_stream_that_ends_early_is_a_502() -> None:
    ids = TOKENIZER.encode("cut short", add_special_tokens=False)
    items = messages([ids], [1])[:-1]  # no complete
    session = ScriptedSession([items])
    with pytest.raises(ApiError) as info:
        async for _ in stream_events(session, [processor(0, [])]):
            pass
    assert info.value.status == 502
    assert session.closed


@pytest.mark.parametrize("indexes", [(3, 3), (0, 3), (3, 0), (0, 0, 3, 0)])
async def test_a_choice_index_beyond_n_is_a_502(indexes: tuple[int, ...]) -> None:
    """Wherever the bad index is in a run of chunks (a run is merged into one message)."""
    chunks = [
        pb.GenerateResponse(chunk=pb.GenerateStreamChunk(token_ids=[5], index=i)) for i in indexes
    ]
    session = ScriptedSession([chunks])
    with pytest.raises(ApiError) as info:
        async for _ in stream_events(session, [processor(0, [])]):
            pass
    assert info.value.status == 502
    assert "index 3" in info.value.message
    assert session.closed
