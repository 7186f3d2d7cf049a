"""One embeddings request: the model, its inputs as prompts, one ``Embed`` call per input
(a bounded number at once, all or none), the answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final, Protocol

from turnout.embeddings.prompts import embedding_prompts
from turnout.embeddings.request import EmbeddingRequest
from turnout.embeddings.vectors import (
    EmbeddingObject,
    EmbeddingResponse,
    EmbeddingUsage,
    check_dimensions,
    encode_vector,
    shorten,
)
from turnout.generation.context import RequestContext
from turnout.generation.flow import model_runtime
from turnout.generation.models import ModelTable
from turnout.generation.plan import Prompt
from turnout.routing.types import RoutingRequest
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["CONCURRENT_CALLS", "Embedder", "EmbeddingBackend", "embed"]

#: ``Embed`` calls of one request running at once: a batch of 2048 inputs takes at most this
#: many worker slots at a time (SGLang batches what arrives together anyway).
CONCURRENT_CALLS: Final = 32


class Embedder(Protocol):
    """Runs one ``Embed`` call on a worker of a model (selection, retries and breakers inside)."""

    async def __call__(
        self, model: str, routing: RoutingRequest, request: pb.EmbedRequest
    ) -> pb.EmbedResponse:
        """Select a worker and return its answer to ``request``."""
        ...


class EmbeddingBackend(Protocol):
    """What an embeddings request needs of the router."""

    @property
    def models(self) -> ModelTable:
        """Model names → runtimes."""
        ...

    @property
    def embed(self) -> Embedder:
        """Runs ``Embed`` on a worker of a model."""
        ...


async def embed(
    request: EmbeddingRequest, ctx: RequestContext, backend: EmbeddingBackend
) -> EmbeddingResponse:
    """Answer one embeddings request."""
    runtime = await model_runtime(backend.models, request.model)
    check_dimensions(request.dimensions, runtime)
    prompts = await embedding_prompts(request.input, runtime, request.truncate_prompt_tokens)
    answers = await _embed_all(backend.embed, runtime.model_id, prompts, ctx)
    data = []
    tokens = 0
    for index, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        vector: Sequence[float] = answer.embedding
        if request.dimensions is not None:
            vector = shorten(vector, request.dimensions)
        data.append(
            EmbeddingObject(embedding=encode_vector(vector, request.encoding_format), index=index)
        )
        tokens += answer.prompt_tokens or len(prompt.ids)
    return EmbeddingResponse(
        data=data,
        model=runtime.model_id,
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )


def _worker_request(prompt: Prompt, request_id: str) -> pb.EmbedRequest:
    return pb.EmbedRequest(
        request_id=request_id,
        tokenized=pb.TokenizedInput(original_text=prompt.text, input_ids=prompt.ids),
    )


async def _embed_all(
    embedder: Embedder, model: str, prompts: list[Prompt], ctx: RequestContext
) -> list[pb.EmbedResponse]:
    """Every prompt's answer, in order; the first failure cancels the calls still running and
    is raised (the worker request id is ``<id>-<k>`` for input ``k`` of several)."""

    async def call(k: int, prompt: Prompt) -> pb.EmbedResponse:
        rid = ctx.worker_request_id if len(prompts) == 1 else f"{ctx.worker_request_id}-{k}"
        text = prompt.text or None
        routing = RoutingRequest(model, prompt.ids, text, ctx.headers, ctx.routing_key)
        return await embedder(model, routing, _worker_request(prompt, rid))

    if len(prompts) == 1:
        return [await call(0, prompts[0])]
    answers: list[pb.EmbedResponse | None] = [None] * len(prompts)
    pending = iter(enumerate(prompts))

    async def caller() -> None:
        for k, prompt in pending:  # the callers share one iterator: each input once
            answers[k] = await call(k, prompt)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(CONCURRENT_CALLS, len(prompts))):
                group.create_task(caller())
    except BaseExceptionGroup as failed:
        raise _first(failed) from None
    return [answer for answer in answers if answer is not None]


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error of a task group (the one that cancelled the others)."""
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
