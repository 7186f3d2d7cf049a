"""The Responses API's routes besides ``POST /v1/responses``: a kept response, its input items,
deleting it, and cancelling (which only background responses could be, and turnout has none)."""

from __future__ import annotations

from typing import Any

from litestar import delete, get, post
from litestar.params import FromPath, FromQuery
from litestar.types import ControllerRouterHandler

from turnout.errors import ApiError, bad_request
from turnout.generation.unsupported import unsupported
from turnout.responses.store import ResponseStore, StoredResponse, find_kept
from turnout.server.query import QueryFlag, query_flag
from turnout.server.respond import answer_json

#: Input items per page: OpenAI's default and largest.
_DEFAULT_LIMIT, _MAX_LIMIT = 20, 100


def responses_routes(store: ResponseStore) -> list[ControllerRouterHandler]:
    """The routes, on ``store``."""

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
    async def get_response(response_id: FromPath[str], stream: QueryFlag = None) -> Any:
        """A kept response."""
        if query_flag(stream, "stream"):
            raise unsupported("stream", "streaming a kept response again is not supported")
        return answer_json((await kept(response_id)).response)

    @delete("/v1/responses/{response_id:str}", status_code=200)
    async def delete_response(response_id: FromPath[str]) -> Any:
        """Forget a kept response."""
        await kept(response_id)  # the 404, also for another tenant's
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
        """Only background responses can be cancelled; turnout answers in the foreground."""
        await kept(response_id)
        raise bad_request(
            "only background responses can be cancelled, and turnout runs none", "response_id"
        )

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
