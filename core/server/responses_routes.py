"""The Responses API's routes besides ``POST /v1/responses``: a kept response (polled, or a
background response's events streamed again), its input items, deleting it, and cancelling a
background response."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.types import ASGIApp, ControllerRouterHandler

from turnout.errors import ApiError, bad_request
from turnout.responses.store import ResponseStore, StoredResponse, find_kept
from turnout.server.background_routes import BackgroundRoutes
from turnout.server.context import Services
from turnout.server.query import QueryFlag, query_flag
from turnout.server.respond import JsonAnswer, answer_json

_encode = msgspec.json.Encoder().encode
#: Input items per page: OpenAI's default and largest.
_DEFAULT_LIMIT, _MAX_LIMIT = 20, 100


def responses_routes(
    store: ResponseStore, background: BackgroundRoutes
) -> list[ControllerRouterHandler]:
    """The routes, on ``store`` and the app's ``background`` responses."""

    async def kept(response_id: str) -> StoredResponse:
        stored = await find_kept(store, response_id)
        if stored is None:
            raise ApiError(
                404,
                f"response {response_id!r} not found (never stored, deleted or expired)",
                param="response_id",
                code="response_not_found",
            )
        return stored

    @get("/v1/responses/{response_id:str}")
    async def get_response(
        response_id: FromPath[str],
        services: NamedDependency[Services],
        stream: QueryFlag = None,
        starting_after: FromQuery[str | None] = None,
    ) -> ASGIApp:
        """A kept response; with ``stream``, a background response's events after
        ``starting_after``, then the live ones until it ends."""
        streams = query_flag(stream, "stream")  # (a bad value is a 400 before the look-up)
        stored = await kept(response_id)
        if streams:
            keepalive_s = services.config.server.keepalive_interval_s
            return background.resumed(stored, starting_after, keepalive_s)
        return JsonAnswer(_encode(stored.response))

    @delete("/v1/responses/{response_id:str}", status_code=200)
    async def delete_response(response_id: FromPath[str]) -> Any:
        """Forget a kept response."""
        stored = await kept(response_id)  # the 404, also for another tenant's
        if stored.response.get("background"):
            await background.cancel(stored)  # (else it would store itself again as it ends)
        if not await store.delete(response_id):
            await kept(response_id)  # (expired meanwhile)
        return answer_json({"id": response_id, "object": "response", "deleted": True})

    @get("/v1/responses/{response_id:str}/input_items")
    async def input_items(
        response_id: FromPath[str],
        limit: FromQuery[str | None] = None,
        order: FromQuery[str | None] = None,
        after: FromQuery[str | None] = None,
    ) -> Any:
        """The items a kept response was generated from, a page at a time (newest first by
        default)."""
        items = (await kept(response_id)).input_items
        return answer_json(page(items, page_limit(limit), order or "desc", after, "response"))

    @post("/v1/responses/{response_id:str}/cancel", status_code=200)
    async def cancel_response(response_id: FromPath[str]) -> Any:
        """Cancel a background response: it is aborted on its worker and ends ``cancelled``.
        One that already ended is answered as it ended."""
        stored = await kept(response_id)
        if not stored.response.get("background"):
            raise bad_request(
                "only background responses can be cancelled: this one was not", "response_id"
            )
        if not await background.cancel(stored):
            stored = await kept(response_id)
            if stored.response.get("status") in ("queued", "in_progress"):
                raise ApiError(
                    409,
                    f"response {response_id!r} runs on another router (or on one that stopped "
                    "before it ended): only the router that runs it can cancel it",
                    param="response_id",
                    code="response_not_cancellable",
                )
        return answer_json((await kept(response_id)).response)

    return [get_response, delete_response, input_items, cancel_response]


def page_limit(value: str | None) -> int:
    """The ``limit`` query parameter: items per page (a 400 out of range)."""
    if value is None:
        return _DEFAULT_LIMIT
    if not value.isdigit() or not 1 <= int(value) <= _MAX_LIMIT:
        raise bad_request(f"limit must be an integer from 1 to {_MAX_LIMIT}", "limit")
    return int(value)


def page(
    items: list[dict[str, Any]], limit: int, order: str, after: str | None, holder: str
) -> dict[str, Any]:
    """One page of ``items`` (a ``list`` object): ``limit`` of them from after the item
    ``after`` in ``order`` (``asc``: oldest first); ``holder`` names what holds them in
    errors."""
    if order not in ("asc", "desc"):
        raise bad_request("order must be 'asc' or 'desc'", "order")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise bad_request(f"no item {after!r} in this {holder}", "after")
        start = ids.index(after) + 1
    data = ordered[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "has_more": start + limit < len(ordered),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
