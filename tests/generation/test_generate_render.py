"""SGLang's ``/generate`` answers, field by field: one-shot (single, ``n > 1``, batches) and
streamed, with logprobs and every finish reason."""

from __future__ import annotations

from typing import Any

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.generate_render import GenerateRenderer


def delta(index: int, text: str, ids: list[int], **fields: Any) -> ChoiceDelta:
    return ChoiceDelta(index, text, token_ids=ids, completion_tokens=len(ids), **fields)


def end(index: int, reason: str, tokens: int, matched: str | int | None = None) -> ChoiceEnd:
    return ChoiceEnd(index, reason, matched, tokens, 0)


def without_latency(result: Any) -> Any:
    """The result with each ``meta_info.e2e_latency`` checked (a duration) and dropped."""
    if isinstance(result, list):
        return [without_latency(item) for item in result]
    meta = dict(result["meta_info"])
    latency = meta.pop("e2e_latency")
    assert isinstance(latency, float)
    assert latency >= 0
    return {**result, "meta_info": meta}


def folded(renderer: GenerateRenderer, *batches: list[Event]) -> Any:
    for batch in batches:
        renderer.fold(batch)
    return without_latency(renderer.answer())


def test_a_single_prompt_answers_one_object() -> None:
    renderer = GenerateRenderer("rid-1", 1, 1)
    answer = folded(
        renderer,
        [delta(0, "Hello", [9, 8])],
        [delta(0, " world", [7]), end(0, "length", 3), Usage(5, 3, cached_tokens=2)],
    )
    assert answer == {
        "text": "Hello world",
        "output_ids": [9, 8, 7],
        "meta_info": {
            "id": "rid-1",
            "finish_reason": {"type": "length", "length": 3},
            "prompt_tokens": 5,
            "completion_tokens": 3,
            "cached_tokens": 2,
            "matched_stop": None,
            "reasoning_tokens": 0,
        },
        "index": 0,
    }


def test_stops_name_what_matched() -> None:
    by_string = folded(
        GenerateRenderer("r", 1, 1), [delta(0, "a", [1]), end(0, "stop", 1, "STOP"), Usage(2, 1)]
    )
    assert by_string["meta_info"]["finish_reason"] == {"type": "stop", "matched": "STOP"}
    assert by_string["meta_info"]["matched_stop"] == "STOP"
    by_token = folded(GenerateRenderer("r", 1, 1), [end(0, "stop", 0, 151645), Usage(2, 0)])
    assert by_token["meta_info"]["finish_reason"] == {"type": "stop", "matched": 151645}
    assert by_token["text"] == ""
    assert by_token["output_ids"] == []
    plain = folded(GenerateRenderer("r", 1, 1), [end(0, "stop", 0), Usage(2, 0)])
    assert plain["meta_info"]["finish_reason"] == {"type": "stop"}


def test_n_choices_and_batches_answer_lists_with_ids_per_choice() -> None:
    # Two prompts, two choices each: choice k * n + i answers prompt k.
    renderer = GenerateRenderer("rid", 2, 2, batch=True)
    answer = folded(
        renderer,
        [delta(0, "a", [1]), delta(1, "b", [2]), end(0, "length", 1), end(1, "length", 1)],
        [Usage(3, 2)],
        [delta(3, "d", [4]), delta(2, "c", [3]), end(2, "stop", 1), end(3, "length", 1)],
        [Usage(4, 2, cached_tokens=1, prompt_index=1)],
    )
    assert [r["text"] for r in answer] == ["a", "b", "c", "d"]
    assert [r["index"] for r in answer] == [0, 1, 2, 3]
    assert [r["meta_info"]["id"] for r in answer] == ["rid-0", "rid-1", "rid-2", "rid-3"]
    assert [r["meta_info"]["prompt_tokens"] for r in answer] == [3, 3, 4, 4]
    assert [r["meta_info"]["cached_tokens"] for r in answer] == [0, 0, 1, 1]
    single_batch = folded(GenerateRenderer("x", 1, 1, batch=True), [end(0, "stop", 0), Usage(1, 0)])
    assert isinstance(single_batch, list)
    assert single_batch[0]["meta_info"]["id"] == "x"
    several = folded(GenerateRenderer("x", 2, 1), [end(0, "stop", 0), end(1, "stop", 0)])
    assert [r["meta_info"]["id"] for r in several] == ["x-0", "x-1"]
    assert [r["meta_info"]["prompt_tokens"] for r in several] == [0, 0]  # no usage came


def test_logprobs_are_sglang_triples_with_text_when_asked() -> None:
    top = [TokenLogprob(5, "five", -0.1), TokenLogprob(6, "six", -2.0)]
    logprobs = [TokenLogprob(5, "five", -0.1, top), TokenLogprob(7, "seven", -0.5, top[:1])]
    events: list[Event] = [
        delta(0, "five seven", [5, 7], logprobs=logprobs),
        end(0, "length", 2),
        Usage(1, 2),
    ]
    meta = folded(GenerateRenderer("r", 1, 1, logprobs=True), events)["meta_info"]
    assert meta["output_token_logprobs"] == [[-0.1, 5, None], [-0.5, 7, None]]
    assert "output_top_logprobs" not in meta
    with_text = GenerateRenderer("r", 1, 1, logprobs=True, top_logprobs=True, text_in_logprobs=True)
    meta = folded(with_text, events)["meta_info"]
    assert meta["output_token_logprobs"] == [[-0.1, 5, "five"], [-0.5, 7, "seven"]]
    assert meta["output_top_logprobs"] == [
        [[-0.1, 5, "five"], [-2.0, 6, "six"]],
        [[-0.1, 5, "five"]],
    ]
    assert list(meta)[-2:] == ["output_token_logprobs", "output_top_logprobs"]


def test_a_stream_sends_the_output_so_far_and_the_final_chunk_after_usage() -> None:
    renderer = GenerateRenderer("rid", 1, 1, prompt_tokens=[4])
    assert renderer.opening(0) == []
    first = [without_latency(c) for c in renderer.stream([delta(0, "He", [1], reasoning_tokens=1)])]
    assert first == [
        {
            "text": "He",
            "output_ids": [1],
            "meta_info": {  # every chunk has the prompt's tokens and the reasoning so far
                "id": "rid",
                "finish_reason": None,
                "prompt_tokens": 4,
                "completion_tokens": 1,
                "cached_tokens": 0,
                "reasoning_tokens": 1,
            },
            "index": 0,
        }
    ]
    # The end comes in one batch, its usage in the next: the final chunk waits for it.
    ending = renderer.stream([delta(0, "llo", [2, 3]), end(0, "length", 3)])
    assert [without_latency(c)["meta_info"]["finish_reason"] for c in ending] == [None]
    (final,) = [without_latency(c) for c in renderer.stream([Usage(4, 3, cached_tokens=1)])]
    assert final == {
        "text": "Hello",
        "output_ids": [1, 2, 3],
        "meta_info": {
            "id": "rid",
            "finish_reason": {"type": "length", "length": 3},
            "prompt_tokens": 4,
            "completion_tokens": 3,
            "cached_tokens": 1,
            "matched_stop": None,
            "reasoning_tokens": 0,
        },
        "index": 0,
    }
    assert renderer.closing() == []


def test_a_streamed_batch_with_the_end_sends_one_final_chunk_per_choice() -> None:
    renderer = GenerateRenderer("rid", 2, 1)
    chunks = renderer.stream(
        [delta(1, "b", [2]), delta(0, "a", [1]), end(0, "stop", 1), end(1, "stop", 1), Usage(1, 2)]
    )
    assert [(c["index"], c["meta_info"]["finish_reason"]) for c in chunks] == [
        (0, {"type": "stop"}),
        (1, {"type": "stop"}),
    ]
