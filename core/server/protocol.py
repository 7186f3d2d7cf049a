"""Reading and decoding request bodies, and the request types of the routes that do not generate.

Every range a request field must respect is declared on the field (``msgspec.Meta``) or, for
rules that span fields, in the type's ``__post_init__`` (raising
:class:`~turnout.generation.requests.InvalidField`), so decoding alone answers a bad request
with a 400 naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

import msgspec
from litestar.types import Receive
from msgspec import Meta

from turnout.errors import ApiError, bad_request
from turnout.generation.requests import ChatMessage, InvalidField, TokenId
from turnout.server.errors import body_too_large

T = TypeVar("T")


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/tokenize``: a text, a list of texts, or chat messages (rendered first)."""

    model: str | None = None
    prompt: str | list[str] | None = None
    #: Alias of ``prompt``.
    text: str | list[str] | None = None
    messages: Annotated[list[ChatMessage], Meta(min_length=1)] | None = None
    tools: list[dict[str, Any]] | None = None
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        given = [name for name in ("prompt", "text", "messages") if getattr(self, name) is not None]
        if len(given) != 1:
            raise InvalidField(
                "prompt", "give one of prompt (a string or list of strings), text or messages"
            )


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/detokenize``: token ids, or a list of token-id lists."""

    tokens: list[TokenId | list[TokenId]]
    model: str | None = None
    skip_special_tokens: bool = False

    def __post_init__(self) -> None:
        if len({isinstance(item, list) for item in self.tokens}) > 1:
            raise InvalidField(
                "tokens", "tokens must be token ids or a list of token-id lists, not both"
            )


class ParseFunctionCallRequest(msgspec.Struct, kw_only=True):
    """``POST /parse/function_call``: run a tool parser over a text."""

    text: str
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    #: The parser (else ``parser``, else the model's).
    tool_call_parser: str | None = None
    parser: str | None = None


class ParseReasoningRequest(msgspec.Struct, kw_only=True):
    """``POST /parse/reasoning``: run a reasoning parser over a text."""

    text: str
    model: str | None = None
    #: The parser (else ``parser``, else the model's).
    reasoning_parser: str | None = None
    parser: str | None = None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body from ``receive``: a 413 past ``limit`` bytes, a 400 when the
    client leaves before it has all arrived. (The common case, a body in one message, is one
    call of ``receive`` and no copy.)"""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(
                400, "the client left before its request body arrived", code="client_disconnected"
            )
        if message["type"] != "http.request":
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode and type-check a JSON body; errors become a 400 naming the field."""
    if not body:
        raise bad_request("request body is empty; expected a JSON object")
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise nested_too_deeply() from None


def convert(data: Any, kind: type[T], path: str = "") -> T:
    """``msgspec.convert`` with :func:`decode_body`'s errors; ``path`` prefixes field names."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, path) from None


def nested_too_deeply() -> ApiError:
    """The 400 for JSON nested deeper than the decoder follows."""
    return ApiError(400, "request body is nested too deeply", code="nested_too_deeply")


#: msgspec's messages about a field that it names in the message rather than in the path.
_NAMED_FIELD = re.compile(r"Object (contains unknown|missing required) field `([^`]*)`")


def _invalid(exc: msgspec.ValidationError, prefix: str = "") -> ApiError:
    """A 400 naming the field from msgspec's ``… - at `$.a.b``` message (and an
    :class:`InvalidField` raised in a ``__post_init__``)."""
    message, _, path = str(exc).partition(" - at `$")
    parts = [prefix, path.rstrip("`").lstrip(".")]
    cause = exc.__cause__
    named = None
    if isinstance(cause, InvalidField):
        parts.append(cause.param)
    elif named := _NAMED_FIELD.fullmatch(message):
        parts.append(named.group(2))
    param = ".".join(p for p in parts if p).replace(".[", "[") or None
    if named and named.group(1) == "contains unknown":  # a field turnout does not take
        return ApiError(
            400,
            f"{param} is not supported: turnout does not take this field (docs/api.md lists "
            "the fields it takes)",
            param=param,
            code="unsupported_parameter",
        )
    if param is not None and not isinstance(cause, InvalidField):
        message = f"{param}: {message}"
    return ApiError(400, message, param=param, code="invalid_value")
