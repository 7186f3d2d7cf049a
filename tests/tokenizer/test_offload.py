"""Tokenizer work off the event loop: a bounded pool, long texts encoded there, limits."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from turnout.demo_model import path as demo_path
from turnout.tokenizer import ModelTokenizer, TooManyTokens
from turnout.tokenizer.model_tokenizer import OFF_LOOP_CHARS
from turnout.tokenizer.offload import Offloader


async def test_at_most_n_calls_run_at_once_and_callers_can_leave_the_queue() -> None:
    pool = Offloader(2)
    running, peak = 0, 0
    lock = threading.Lock()
    release = threading.Event()

    def work(value: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(10)
        with lock:
            running -= 1
        return value

    calls = [asyncio.create_task(pool.run(work, i)) for i in range(5)]
    await asyncio.sleep(0.2)
    assert running == 2
    calls[4].cancel()  # still waiting for a slot: leaves without running
    release.set()
    assert await asyncio.gather(*calls[:4]) == [0, 1, 2, 3]
    assert peak == 2
    with pytest.raises(asyncio.CancelledError):
        await calls[4]


async def test_a_cancelled_caller_frees_its_slot_only_when_the_thread_is_done() -> None:
    pool = Offloader(1)
    release = threading.Event()
    first = asyncio.create_task(pool.run(release.wait, 10))
    await asyncio.sleep(0.1)
    first.cancel()
    second = asyncio.create_task(pool.run(time.monotonic))
    await asyncio.sleep(0.2)
    assert not second.done()  # the thread still works for the cancelled caller
    release.set()
    assert await asyncio.wait_for(second, 10) > 0


async def test_errors_come_back_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await Offloader(1).run(fail)


@pytest.fixture(scope="module")
def tokenizer() -> ModelTokenizer:
    return ModelTokenizer.from_dir(demo_path())


@pytest.mark.parametrize("size", [10, OFF_LOOP_CHARS - 1, OFF_LOOP_CHARS, 3 * OFF_LOOP_CHARS])
@pytest.mark.parametrize("special", [False, True])
async def test_off_loop_encoding_gives_the_same_ids(
    tokenizer: ModelTokenizer, size: int, special: bool
) -> None:
    text = ("<|im_start|>user\nSome words, numbers 12345 and é 😀.<|im_end|>\n" * size)[:size]
    expected = tokenizer.backend.encode(text, add_special_tokens=special).ids
    assert await tokenizer.encode_off_loop(text, special) == expected
    assert await tokenizer.encode_off_loop(text, special, max_tokens=len(expected)) == expected


@pytest.mark.parametrize("size", [100, 3 * OFF_LOOP_CHARS])
async def test_a_text_over_the_limit_raises_with_its_exact_count(
    tokenizer: ModelTokenizer, size: int
) -> None:
    text = ("a,b;c " * size)[:size]  # short tokens: passes the length bound
    count = len(tokenizer.encode(text, add_special_tokens=False))
    with pytest.raises(TooManyTokens) as caught:
        await tokenizer.encode_off_loop(text, False, max_tokens=count - 1)
    assert (caught.value.tokens, caught.value.at_least) == (count, False)


async def test_a_text_too_long_for_any_tokenization_is_refused_before_encoding(
    tokenizer: ModelTokenizer,
) -> None:
    assert tokenizer.chars_per_token == 13
    text = "x" * 10_000_000
    with pytest.raises(TooManyTokens) as caught:
        await tokenizer.encode_off_loop(text, False, max_tokens=8191)
    assert caught.value.at_least  # a lower bound: the text was not encoded
    assert caught.value.tokens == -(-len(text) // 13)
