"""The Messages API's routes: ``POST /v1/messages`` (a generation endpoint on the one flow) and
``POST /v1/messages/count_tokens``. Their errors take Anthropic's shape (the app's error
handlers, by path; a stream's ``error`` event here)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from litestar import Request, post
from litestar.types import ASGIApp, ControllerRouterHandler, Receive, Scope, Send

from turnout.anthropic.endpoint import ENDPOINT, chat_plan
from turnout.anthropic.errors import error_body
from turnout.anthropic.request import CountTokensRequest, MessagesRequest, check_request
from turnout.errors import ApiError
from turnout.generation.context import RequestContext
from turnout.generation.flow import Folded, PayloadStream, Streamed, model_runtime, run_endpoint
from turnout.observability.metrics import note_failure, note_stream_cut
from turnout.server.context import Services, ServicesSlot
from turnout.server.middleware import ENDPOINT_APP
from turnout.server.openapi import EVENT_STREAM, REQUEST_BODY
from turnout.server.protocol import decode_body, read_body
from turnout.server.respond import answer_generated, answer_json

log = logging.getLogger(__name__)

#: Builds a request's context from its raw headers (the app's ``request_context``).
ContextOf = Callable[[Iterable[tuple[bytes, bytes]], Services, str], RequestContext]
_PREFIX = "msg"


class _ErrorEvents:
    """A stream's payloads, its failure after the start as Anthropic's ``error`` event (the
    last payload), noted on the request's record as a cut stream."""

    __slots__ = ("_done", "_payloads")

    def __init__(self, payloads: PayloadStream) -> None:
        self._payloads = payloads
        self._done = False

    def __aiter__(self) -> _ErrorEvents:
        return self

    async def __anext__(self) -> list[Any]:
        if self._done:
            raise StopAsyncIteration
        try:
            return await self._payloads.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            self._done = True
            if isinstance(exc, ApiError):
                error = exc
            else:
                log.exception("stream failed", exc_info=exc)
                note_failure(exc)
                error = ApiError(500, f"internal error: {type(exc).__name__}")
            note_stream_cut(error.status)
            await self._payloads.aclose()
            return [error_body(error)]

    async def aclose(self) -> None:
        """Close the stream (its worker sessions)."""
        self._done = True
        await self._payloads.aclose()


class MessagesApp:
    """``POST /v1/messages`` as a bare ASGI app (as the other generation endpoints run)."""

    __slots__ = ("_context_of", "_services")

    def __init__(self, services: ServicesSlot, context_of: ContextOf) -> None:
        self._services = services
        self._context_of = context_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        running = self._services()
        ctx = self._context_of(scope["headers"], running, _PREFIX)
        body = await read_body(receive, running.config.server.max_body_bytes)
        ctx.body_size = len(body)
        request = decode_body(body, MessagesRequest)
        generated = await run_endpoint(ENDPOINT, request, ctx, running)
        if not isinstance(generated, Folded):  # Anthropic's own error event mid-stream
            generated = Streamed(_ErrorEvents(generated.payloads), typed_events=True)
        answer = answer_generated(generated, running)
        await answer(scope, receive, send)


def anthropic_routes(
    services: ServicesSlot, context_of: ContextOf
) -> list[ControllerRouterHandler]:
    """The routes, on the app's services."""
    app = MessagesApp(services, context_of)

    @post(
        "/v1/messages",
        name=_PREFIX,
        status_code=200,
        opt={REQUEST_BODY: MessagesRequest, ENDPOINT_APP: app, EVENT_STREAM: True},
        summary="Create a message",
        description=ENDPOINT.description,
    )
    async def messages() -> ASGIApp:
        return app

    @post(
        "/v1/messages/count_tokens",
        name="msg_count_tokens",
        status_code=200,
        opt={REQUEST_BODY: CountTokensRequest},
        summary="Count the tokens of a message's prompt",
        description="The prompt's tokens as the model's chat template renders them (images "
        "included).",
    )
    async def count_tokens(request: Request[Any, Any, Any]) -> Any:
        running = services()
        ctx = context_of(request.scope["headers"], running, "msgtok")
        body = await request.body()
        ctx.body_size = len(body)
        counted = decode_body(body, CountTokensRequest)
        check_request(counted)
        runtime = await model_runtime(running.models, counted.model)
        plan = await chat_plan(counted, runtime, ctx)
        return answer_json({"input_tokens": sum(len(p.ids) for p in plan.prompts)})

    return [messages, count_tokens]
