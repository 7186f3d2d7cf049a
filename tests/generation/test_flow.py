"""The flow's own duties, with scripted worker sessions: one worker request per prompt, every
session closed however the request ends, and the all-or-none dispatch."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.errors import ApiError
from turnout.generation import completions
from turnout.generation.context import RequestContext
from turnout.generation.flow import Folded, Streamed, run_endpoint
from turnout.generation.models import ModelRuntime
from turnout.generation.requests import CompletionRequest
from turnout.routing.types import RoutingRequest
from turnout.wire import pb

from .outputs import EOS, TOKENIZER

RUNTIME = ModelRuntime("m", TOKENIZER, stop_token_ids=frozenset(TOKENIZER.eos_token_ids))


class Meter:
    """Records what the pipeline tells it."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.finished: list[tuple[int, int]] = []

    def arrived(self, streamed: int, at: float) -> None:
        self.batches.append(streamed)

    def finish(self, prompt_tokens: int, generated: int) -> None:
        self.finished.append((prompt_tokens, generated))


class Session:
    """A worker session answering ``text`` in one chunk per token, then complete."""

    def __init__(self, text: str) -> None:
        ids = [*TOKENIZER.encode(text, add_special_tokens=False), EOS]
        chunks = [
            [pb.GenerateResponse(chunk=pb.GenerateStreamChunk(token_ids=[t], prompt_tokens=3))]
            for t in ids
        ]
        done = pb.GenerateComplete(finish_reason="stop", completion_tokens=len(ids))
        self._batches = [*chunks, [pb.GenerateResponse(complete=done)]]
        self.closed = False
        self.meter: Meter | None = None

    async def next_batch(self) -> list[pb.GenerateResponse]:
        return self._batches.pop(0) if self._batches and not self.closed else []

    async def aclose(self) -> None:
        self.closed = True


class Models:
    def resolve_model(self, requested: str | None, lora_path: Any = None) -> tuple[str, None]:
        return "m", None

    async def runtime(self, model_id: str) -> ModelRuntime:
        return RUNTIME


class Backend:
    """Opens scripted sessions; ``refuse_at``: the open that fails (no worker)."""

    def __init__(self, refuse_at: int | None = None) -> None:
        self.models: Any = Models()
        self.refuse_at = refuse_at
        self.requests: list[pb.GenerateRequest] = []
        self.sessions: list[Session] = []
        self.tracing: Any = None  # tracing off: no stage spans

    async def open_stream(
        self, model: str, routing: RoutingRequest, request: pb.GenerateRequest
    ) -> Session:
        if len(self.requests) == self.refuse_at:
            raise ApiError(503, "no worker")
        self.requests.append(request)
        session = Session(routing.text or "")
        session.meter = Meter()  # as the app's opener does
        self.sessions.append(session)
        return session


def request(stream: bool, prompts: int = 3) -> CompletionRequest:
    return CompletionRequest(
        prompt=[f"prompt {k}" for k in range(prompts)], max_tokens=8, stream=stream
    )


def context() -> RequestContext:
    return RequestContext("cmpl-1", {}, None, worker_request_id="w-1")


async def test_one_worker_request_per_prompt_and_choices_numbered_across_prompts() -> None:
    backend = Backend()
    answer = await run_endpoint(completions.ENDPOINT, request(False), context(), backend)
    assert isinstance(answer, Folded)
    assert [r.request_id for r in backend.requests] == ["w-1-0", "w-1-1", "w-1-2"]
    assert [c["text"] for c in answer.body["choices"]] == ["prompt 0", "prompt 1", "prompt 2"]
    assert [c["index"] for c in answer.body["choices"]] == [0, 1, 2]
    assert all(session.closed for session in backend.sessions)
    single = Backend()
    await run_endpoint(completions.ENDPOINT, request(False, prompts=1), context(), single)
    assert [r.request_id for r in single.requests] == ["w-1"]


async def test_a_client_leaving_a_stream_closes_every_session_at_once() -> None:
    backend = Backend()
    answer = await run_endpoint(completions.ENDPOINT, request(True), context(), backend)
    assert isinstance(answer, Streamed)
    payloads = answer.payloads
    first = await anext(payloads)
    assert first[0]["choices"][0]["index"] == 0
    assert not any(session.closed for session in backend.sessions)
    await payloads.aclose()
    # Not left to the garbage collector: the prompts not reached are closed too.
    assert all(session.closed for session in backend.sessions)


async def test_a_prompt_that_finds_no_worker_closes_the_sessions_already_open() -> None:
    backend = Backend(refuse_at=2)
    with pytest.raises(ApiError):
        await run_endpoint(completions.ENDPOINT, request(False), context(), backend)
    assert len(backend.sessions) == 2
    assert all(session.closed for session in backend.sessions)


async def test_the_meter_is_fed_by_the_one_walk_over_the_responses() -> None:
    """Per batch that brought tokens, how many came streamed; at the end, the prompt's tokens
    and what the worker generated (each worker stream's own meter)."""
    backend = Backend()
    await run_endpoint(completions.ENDPOINT, request(False, prompts=2), context(), backend)
    meters = [session.meter for session in backend.sessions]
    for meter, session_text in zip(meters, ["prompt 0", "prompt 1"], strict=True):
        assert meter is not None
        tokens = len(TOKENIZER.encode(session_text, add_special_tokens=False)) + 1  # + EOS
        assert meter.batches == [1] * tokens  # one token per chunk; the complete brings none
        assert meter.finished == [(3, tokens)]
