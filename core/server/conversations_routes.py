"""OpenAI's Conversations API: ``/v1/conversations`` (create, retrieve, update, delete) and its
items (list, add, retrieve, delete). A conversation belongs to the tenant that made it: any
other request finds it as if it had never been kept (404)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec
from litestar import Request, delete, get, post
from litestar.params import FromPath, FromQuery
from litestar.types import ControllerRouterHandler
from msgspec import Meta

from turnout.errors import ApiError
from turnout.generation.unsupported import unsupported
from turnout.responses.conversations import (
    ConversationHead,
    ConversationStore,
    find_conversation,
    new_conversation_id,
)
from turnout.responses.items import Item, input_items
from turnout.responses.request import (
    LOGPROBS_INCLUDE,
    SEALED_REASONING_INCLUDE,
    Metadata,
    check_metadata,
)
from turnout.responses.sealing import ReasoningSeal
from turnout.responses.store import current_owner
from turnout.server.openapi import OPTIONAL_BODY, REQUEST_BODY
from turnout.server.protocol import decode_body
from turnout.server.respond import answer_json
from turnout.server.responses_routes import page, page_limit

#: Items one request may add: OpenAI's bound.
MAX_ADDED_ITEMS = 20
_INCLUDES = (LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE)

AddedItems = Annotated[list[Any], Meta(max_length=MAX_ADDED_ITEMS)]


class CreateConversation(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/conversations``."""

    metadata: Metadata | None = None
    #: The first items (input items, as ``POST /v1/responses`` takes them).
    items: AddedItems | None = None

    def __post_init__(self) -> None:
        check_metadata(self.metadata)


class UpdateConversation(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/conversations/{id}``: the new metadata (replaces the old)."""

    metadata: Metadata

    def __post_init__(self) -> None:
        check_metadata(self.metadata)


class AddItems(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/conversations/{id}/items``."""

    items: AddedItems


def conversations_routes(
    store: ConversationStore, seal: ReasoningSeal
) -> list[ControllerRouterHandler]:
    """The routes, on ``store`` (``seal``: reasoning sealed for ``include``, and opened in
    added items)."""

    async def kept(conversation_id: str) -> ConversationHead:
        head = await find_conversation(store, conversation_id)
        if head is None:
            raise _not_found(conversation_id)
        return head

    async def kept_items(conversation_id: str) -> list[Item]:
        await kept(conversation_id)
        items = await store.items(conversation_id)
        if items is None:  # deleted or expired meanwhile
            raise _not_found(conversation_id)
        return items

    def checked(raw: list[Any]) -> list[Item]:
        try:
            return input_items(raw, seal.open)
        except ApiError as exc:
            if exc.param is not None and exc.param.startswith("input"):
                exc.param = "items" + exc.param.removeprefix("input")
                exc.message = exc.message.replace("input[", "items[")
            raise

    @post(
        "/v1/conversations",
        status_code=200,
        opt={REQUEST_BODY: CreateConversation, OPTIONAL_BODY: True},
    )
    async def create_conversation(request: Request[Any, Any, Any]) -> Any:
        """Create a conversation (with its first items)."""
        body = decode_body(await request.body() or b"{}", CreateConversation)
        items = checked(body.items or [])
        head = ConversationHead(
            new_conversation_id(), int(time.time()), body.metadata or {}, current_owner()
        )
        await store.create(head, items)
        return answer_json(head.resource())

    @get("/v1/conversations/{conversation_id:str}")
    async def get_conversation(conversation_id: FromPath[str]) -> Any:
        """A conversation."""
        return answer_json((await kept(conversation_id)).resource())

    @post(
        "/v1/conversations/{conversation_id:str}",
        status_code=200,
        opt={REQUEST_BODY: UpdateConversation},
    )
    async def update_conversation(
        conversation_id: FromPath[str], request: Request[Any, Any, Any]
    ) -> Any:
        """Replace a conversation's metadata."""
        body = decode_body(await request.body(), UpdateConversation)
        await kept(conversation_id)
        head = await store.set_metadata(conversation_id, body.metadata)
        if head is None:
            raise _not_found(conversation_id)
        return answer_json(head.resource())

    @delete("/v1/conversations/{conversation_id:str}", status_code=200)
    async def delete_conversation(conversation_id: FromPath[str]) -> Any:
        """Forget a conversation and its items."""
        await kept(conversation_id)
        if not await store.delete(conversation_id):
            raise _not_found(conversation_id)
        return answer_json(
            {"id": conversation_id, "object": "conversation.deleted", "deleted": True}
        )

    @get("/v1/conversations/{conversation_id:str}/items")
    async def list_items(
        conversation_id: FromPath[str],
        request: Request[Any, Any, Any],
        limit: FromQuery[str | None] = None,
        order: FromQuery[str | None] = None,
        after: FromQuery[str | None] = None,
    ) -> Any:
        """A conversation's items, a page at a time (newest first by default)."""
        includes = _includes(request)
        items = await kept_items(conversation_id)
        listed = page(items, page_limit(limit), order or "desc", after, "conversation")
        listed["data"] = [_shown(item, includes, seal) for item in listed["data"]]
        return answer_json(listed)

    @post(
        "/v1/conversations/{conversation_id:str}/items",
        status_code=200,
        opt={REQUEST_BODY: AddItems},
    )
    async def add_items(conversation_id: FromPath[str], request: Request[Any, Any, Any]) -> Any:
        """Add items at the end of a conversation; the list of the added items."""
        includes = _includes(request)
        body = decode_body(await request.body(), AddItems)
        items = checked(body.items)
        await kept(conversation_id)
        if not await store.append(conversation_id, items):
            raise _not_found(conversation_id)
        return answer_json(
            {
                "object": "list",
                "data": [_shown(item, includes, seal) for item in items],
                "has_more": False,
                "first_id": items[0]["id"] if items else None,
                "last_id": items[-1]["id"] if items else None,
            }
        )

    @get("/v1/conversations/{conversation_id:str}/items/{item_id:str}")
    async def get_item(
        conversation_id: FromPath[str], item_id: FromPath[str], request: Request[Any, Any, Any]
    ) -> Any:
        """One item of a conversation."""
        includes = _includes(request)
        for item in await kept_items(conversation_id):
            if item.get("id") == item_id:
                return answer_json(_shown(item, includes, seal))
        raise _item_not_found(item_id)

    @delete("/v1/conversations/{conversation_id:str}/items/{item_id:str}", status_code=200)
    async def delete_item(conversation_id: FromPath[str], item_id: FromPath[str]) -> Any:
        """Remove one item; the conversation."""
        head = await kept(conversation_id)
        if not await store.delete_item(conversation_id, item_id):
            raise _item_not_found(item_id)
        return answer_json(head.resource())

    return [
        create_conversation,
        get_conversation,
        update_conversation,
        delete_conversation,
        list_items,
        add_items,
        get_item,
        delete_item,
    ]


def _not_found(conversation_id: str) -> ApiError:
    return ApiError(
        404,
        f"conversation {conversation_id!r} not found (never created, deleted or expired)",
        param="conversation_id",
        code="conversation_not_found",
    )


def _item_not_found(item_id: str) -> ApiError:
    return ApiError(
        404, f"item {item_id!r} not found in this conversation", param="item_id", code="not_found"
    )


def _includes(request: Request[Any, Any, Any]) -> frozenset[str]:
    """The ``include`` query parameter (``include=…`` or ``include[]=…``, repeated)."""
    query = request.query_params
    values = [*query.getall("include", []), *query.getall("include[]", [])]
    for value in values:
        if value not in _INCLUDES:
            raise unsupported(
                "include",
                f"include {value!r} is not supported: only {' and '.join(map(repr, _INCLUDES))}",
            )
    return frozenset(values)


def _shown(item: Item, includes: frozenset[str], seal: ReasoningSeal) -> Item:
    """An item as listed: logprobs and sealed reasoning only when ``include`` asks for them
    (reasoning kept unsealed is sealed now)."""
    kind = item.get("type")
    if kind == "message" and item.get("role") == "assistant":
        if LOGPROBS_INCLUDE in includes:
            return item
        parts = [
            {**part, "logprobs": []} if part.get("logprobs") else part
            for part in item.get("content") or []
        ]
        return {**item, "content": parts}
    if kind == "reasoning":
        shown = {k: v for k, v in item.items() if k != "encrypted_content"}
        if SEALED_REASONING_INCLUDE in includes:
            sealed = item.get("encrypted_content")
            if not isinstance(sealed, str):
                text = "".join(part.get("text", "") for part in item.get("content") or [])
                sealed = seal.seal(text)
            shown["encrypted_content"] = sealed
        return shown
    return item
