"""Generate over a real socket: turnout's client against the simulated worker."""

from __future__ import annotations

import asyncio
import math

from turnout.sim import SimWorker
from turnout.wire import WorkerClient

from ._helpers import decode, fold, request, token_id

IM_END = token_id("<|im_end|>")


async def test_echo_streams_delta_tokens_then_complete(client: WorkerClient) -> None:
    out = await fold(client.generate(request("What is the weather in Paris?")))
    assert out.text(skip_special=True) == "What is the weather in Paris?"
    assert out.tokens[0][-1] == IM_END  # ends with EOS, which is not ignored
    assert out.order[-1] == "complete"
    assert out.order.count("complete") == 1
    done = out.completes[0]
    assert done.finish_reason == "stop"
    assert done.WhichOneof("matched_stop") == "matched_token_id"
    assert done.matched_token_id == IM_END
    assert done.completion_tokens == len(out.tokens[0])
    # Chunks carry deltas and running totals.
    totals = [c.completion_tokens for c in out.chunks[0]]
    assert totals == sorted(totals)
    assert totals[-1] == len(out.tokens[0])
    assert all(c.prompt_tokens == done.prompt_tokens > 0 for c in out.chunks[0])
    # Stream mode: the complete repeats the last chunk's ids (as SGLang's servicer does).
    assert list(done.output_ids) == list(out.chunks[0][-1].token_ids)


async def test_tokens_per_chunk_and_stream_interval(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.tokens_per_chunk = 4
    out = await fold(client.generate(request("one two three four five six seven eight")))
    sizes = [len(c.token_ids) for c in out.chunks[0]]
    assert max(sizes) == 4
    assert all(s == 4 for s in sizes[:-1])
    out = await fold(client.generate(request("one two three four five", stream_interval=2)))
    assert max(len(c.token_ids) for c in out.chunks[0]) == 2


async def test_n_choices_are_distinct_and_indexed(client: WorkerClient) -> None:
    out = await fold(client.generate(request("Tell me", n=3)))
    assert sorted(out.completes) == [0, 1, 2]
    texts = {out.text(i, skip_special=True) for i in range(3)}
    assert len(texts) == 3
    assert out.text(0, skip_special=True) == "Tell me"
    for i in range(3):
        assert out.completes[i].index == i
        assert out.completes[i].finish_reason == "stop"
        assert all(c.index == i for c in out.chunks[i])


async def test_max_new_tokens_ends_with_length(client: WorkerClient) -> None:
    out = await fold(client.generate(request("a long answer please, many words", max_new_tokens=3)))
    assert len(out.tokens[0]) == 3
    assert out.completes[0].finish_reason == "length"
    assert out.completes[0].WhichOneof("matched_stop") is None
    out = await fold(client.generate(request("hi", max_new_tokens=0)))
    assert out.tokens[0] == []
    assert out.completes[0].finish_reason == "length"


async def test_ignore_eos_runs_to_the_limit(client: WorkerClient) -> None:
    out = await fold(client.generate(request("short", ignore_eos=True, max_new_tokens=40)))
    assert len(out.tokens[0]) == 40
    assert IM_END not in out.tokens[0]
    assert out.completes[0].finish_reason == "length"


async def test_min_new_tokens_delays_eos(client: WorkerClient) -> None:
    out = await fold(client.generate(request("short", min_new_tokens=25, max_new_tokens=64)))
    assert len(out.tokens[0]) == 25
    assert out.tokens[0][-1] == IM_END
    assert out.completes[0].finish_reason == "stop"


async def test_stop_token_ids_stop_early(client: WorkerClient) -> None:
    ids = (await fold(client.generate(request("alpha beta gamma")))).tokens[0]
    stop_at = ids[1]
    out = await fold(client.generate(request("alpha beta gamma", stop_token_ids=[stop_at])))
    assert out.tokens[0] == ids[:2]
    assert out.completes[0].finish_reason == "stop"
    assert out.completes[0].matched_token_id == stop_at


async def test_logprobs_are_well_formed(client: WorkerClient) -> None:
    req = request("Hello world", top_logprobs_num=3, prompt_logprobs_start=0)
    out = await fold(client.generate(req))
    assert req.logprob_start_len == 0
    for chunk in out.chunks[0]:
        lp = chunk.output_logprobs
        assert list(lp.token_ids) == list(chunk.token_ids)
        assert len(lp.token_logprobs) == len(chunk.token_ids)
        assert len(lp.top_logprobs) == len(chunk.token_ids)
        for value, top in zip(lp.token_logprobs, lp.top_logprobs, strict=True):
            assert value <= 0
            assert len(top.values) == len(top.token_ids) == 3
            assert list(top.values) == sorted(top.values, reverse=True)
            assert len(set(top.token_ids)) == 3
            assert sum(math.exp(v) for v in top.values) <= 1.0
    first = out.chunks[0][0]
    prompt = list(req.tokenized.input_ids)
    assert list(first.input_logprobs.token_ids) == prompt
    assert not first.input_logprobs.token_logprobs[0].HasField("value")
    assert all(e.HasField("value") for e in first.input_logprobs.token_logprobs[1:])
    assert not out.chunks[0][1].HasField("input_logprobs")


async def test_no_logprobs_unless_asked(client: WorkerClient) -> None:
    out = await fold(client.generate(request("Hello")))
    assert not any(c.HasField("output_logprobs") for c in out.chunks[0])
    assert not any(c.HasField("input_logprobs") for c in out.chunks[0])


async def test_non_stream_sends_one_complete_per_choice(client: WorkerClient) -> None:
    out = await fold(client.generate(request("Hello you", stream=False, n=2, return_logprob=True)))
    assert out.order == ["complete", "complete"]
    for i in (0, 1):
        done = out.completes[i]
        assert decode(list(done.output_ids), skip_special=True).startswith("Hello you")
        assert list(done.output_logprobs.token_ids) == list(done.output_ids)
        assert done.completion_tokens == len(done.output_ids)


async def test_cached_tokens_grow_with_a_shared_prefix(client: WorkerClient) -> None:
    system = " ".join(["rules"] * 60)
    first = await fold(client.generate(request(system + " first question")))
    again = await fold(client.generate(request(system + " second question", request_id="r2")))
    assert first.completes[0].cached_tokens == 0
    assert again.completes[0].cached_tokens >= 32
    assert again.completes[0].cached_tokens % 16 == 0
    assert again.completes[0].cached_tokens < again.completes[0].prompt_tokens


async def test_reasoning_tokens_counted(sim: SimWorker, client: WorkerClient) -> None:
    out = await fold(client.generate(request("<think>\nweigh it\n</think>\n\nyes")))
    think_end = token_id("</think>")
    assert out.completes[0].reasoning_tokens == out.tokens[0].index(think_end) + 1


async def test_ttft_and_per_token_delay_pace_the_stream(
    sim: SimWorker, client: WorkerClient
) -> None:
    sim.knobs.update({"ttft_ms": 150, "delay_ms": 10, "tokens_per_chunk": 2})
    loop = asyncio.get_running_loop()
    start = loop.time()
    stream = client.generate(request("one two three four five six seven eight nine ten"))
    first = await anext(stream)
    ttft = loop.time() - start
    rest = [r async for r in stream]
    total = loop.time() - start
    tokens = len(first.chunk.token_ids) + sum(len(r.chunk.token_ids) for r in rest)
    assert ttft >= 0.15
    # Every chunk but the first waits tokens_per_chunk x delay after its predecessor.
    assert total - ttft >= 0.010 * (tokens - 2) * 0.9
