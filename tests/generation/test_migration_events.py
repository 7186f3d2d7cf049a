"""An answer read from two worker sessions (the second continuing the first after a failover)
gives the events and usage of one session: prompt tokens as the first worker counted them,
completion and reasoning tokens of the whole answer."""

from __future__ import annotations

from array import array
from types import SimpleNamespace
from typing import Any

from tests.generation.outputs import EOS, TOKENIZER, processor
from tests.generation.test_event_batches import ScriptedSession
from turnout.generation.events import ChoiceDelta, Event, Usage
from turnout.generation.pipeline import SessionEvents
from turnout.wire import pb

REASONING = TOKENIZER.encode("<think>let me think it over</think>", add_special_tokens=False)
ANSWER = [*TOKENIZER.encode("the answer is here", add_special_tokens=False), EOS]
IDS = [*REASONING, *ANSWER]


def chunk(ids: list[int], prompt: int, reasoning: int) -> pb.GenerateResponse:
    return pb.GenerateResponse(
        chunk=pb.GenerateStreamChunk(
            token_ids=ids, prompt_tokens=prompt, cached_tokens=2, reasoning_tokens=reasoning
        )
    )


def complete(generated: int, prompt: int, reasoning: int) -> pb.GenerateResponse:
    return pb.GenerateResponse(
        complete=pb.GenerateComplete(
            finish_reason="stop",
            prompt_tokens=prompt,
            cached_tokens=2,
            completion_tokens=generated,
            reasoning_tokens=reasoning,
        )
    )


def session(ids: list[int], prompt: int, reasoning_done: int) -> ScriptedSession:
    """One token a message; the worker counts reasoning tokens of its own part."""
    batches = []
    for k in range(len(ids)):
        batches.append([chunk(ids[k : k + 1], prompt, min(k + 1, reasoning_done))])
    batches.append([complete(len(ids), prompt, reasoning_done)])
    return ScriptedSession(batches)


async def read(source: SessionEvents, sessions: list[tuple[ScriptedSession, int]]) -> list[Any]:
    """Every event; ``sessions``: each session and the tokens after which it fails."""
    events: list[Event] = []
    moved = 0
    for k, (current, fails_after) in enumerate(sessions):
        if k:
            source.continue_on(current, array("q", [moved]), [0])
        while not source.ended:
            generated = source.migration.generated
            if generated is not None and len(generated[0]) == fails_after:
                break
            events += source.take(await current.next_batch())
        moved = fails_after
    await source.aclose()
    return events


def summary(events: list[Any]) -> tuple[str, str, Usage]:
    deltas = [e for e in events if isinstance(e, ChoiceDelta)]
    (usage,) = [e for e in events if isinstance(e, Usage)]
    content = "".join(d.content for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    return content, reasoning, usage


def source() -> SessionEvents:
    placeholder = ScriptedSession([])
    migration: Any = SimpleNamespace(generated=[array("I")])
    return SessionEvents(placeholder, [processor()], migration=migration)


async def test_a_move_after_the_reasoning_keeps_one_answers_usage() -> None:
    whole = summary(await read(source(), [(session(IDS, 7, len(REASONING)), -1)]))
    for at in (3, len(REASONING), len(REASONING) + 2):
        first = session(IDS, 7, len(REASONING))
        # The second worker's prompt is the first's and what it generated; it counts only the
        # reasoning tokens of its part.
        rest = IDS[at:]
        second = session(rest, 7 + at, max(len(REASONING) - at, 0))
        moved = summary(await read(source(), [(first, at), (second, -1)]))
        assert moved == whole, at
    assert whole[2].prompt_tokens == 7
    assert whole[2].completion_tokens == len(IDS)
    assert whole[2].reasoning_tokens == len(REASONING)
