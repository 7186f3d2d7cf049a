"""The HTTP side of background responses (:mod:`turnout.responses.background`): submitting one
on ``POST /v1/responses``, reading its events again, cancelling it."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.errors import ApiError, bad_request
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint, run_endpoint
from turnout.generation.unsupported import unsupported
from turnout.responses.background import BackgroundResponses
from turnout.responses.event_log import Follower
from turnout.responses.store import StoredResponse
from turnout.server.connections import connection_of
from turnout.server.context import Services
from turnout.server.limits import ClientWatch
from turnout.server.respond import JsonAnswer, StreamAnswer, answer_generated

_encode = msgspec.json.Encoder().encode


class BackgroundRoutes:
    """Background responses as the routes see them."""

    def __init__(self, responses: BackgroundResponses) -> None:
        self.responses = responses

    async def answer(
        self, endpoint: Endpoint[Any], request: Any, ctx: RequestContext, services: Services
    ) -> ASGIApp:
        """``POST /v1/responses``: a background request is submitted and answered at once (the
        queued response, or with ``stream`` its events as they come); any other runs on the
        flow."""
        if not getattr(request, "background", None):
            return answer_generated(await run_endpoint(endpoint, request, ctx, services), services)
        response, events = await self.responses.submit(request, ctx, services)
        if request.streams:
            # The client follows the events; leaving stops only its reading.
            keepalive_s = services.config.server.keepalive_interval_s
            return StreamAnswer(events.follow(-1), typed=True, keepalive_s=keepalive_s)
        return JsonAnswer(_encode(response))

    def resumed(
        self, stored: StoredResponse, starting_after: str | None, keepalive_s: float
    ) -> ASGIApp:
        """``GET /v1/responses/{id}?stream=true``: the events of a background response after
        ``starting_after`` (all without it), then the live ones until it ends."""
        if not stored.response.get("background"):
            raise unsupported(
                "stream", "only background responses can be streamed again: this one was not"
            )
        after = _sequence(starting_after)
        events = self.responses.events(stored.id)
        if events is None:
            raise ApiError(
                404,
                f"the events of response {stored.id!r} are not kept here: a background "
                "response's events are kept by the router that runs it, while it is kept",
                param="response_id",
                code="response_events_not_found",
            )
        return _WatchedStream(events.follow(after), keepalive_s)

    async def cancel(self, stored: StoredResponse) -> bool:
        """``POST /v1/responses/{id}/cancel`` of a background response: cancelled if it waits or
        runs here (False when it does not)."""
        return await self.responses.cancel(stored.id)


def _sequence(value: str | None) -> int:
    """The ``starting_after`` query parameter (-1: from the first event)."""
    if value is None:
        return -1
    try:
        number = int(value)
    except ValueError:
        number = -2
    if number < -1:
        raise bad_request("starting_after must be an integer of at least -1", "starting_after")
    return number


class _WatchedStream:
    """An SSE answer of a follower that stops when its client leaves (a route outside the
    generation gate, which watches generation requests)."""

    __slots__ = ("_follower", "_keepalive_s")

    def __init__(self, follower: Follower, keepalive_s: float) -> None:
        self._follower = follower
        self._keepalive_s = keepalive_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        watch = ClientWatch(receive, 0, connection_of(scope))
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                task.cancel()

        answer = StreamAnswer(self._follower, typed=True, keepalive_s=self._keepalive_s)
        try:
            await watch.start()
            watch.on_disconnect = leave
            if watch.gone:
                leave()
            await answer(scope, watch, send)
        except asyncio.CancelledError:
            if not left or task.uncancel() > 0:
                raise
        finally:
            watch.on_disconnect = None
            await watch.close()
            await self._follower.aclose()
