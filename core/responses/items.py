"""Input items: checked and given ids (as they are kept and listed), and as chat messages.

Items turnout reads: ``message`` (roles user, system, developer, assistant; text parts, and
the parts the chat path takes), ``function_call``, ``function_call_output`` and ``reasoning``.
As chat messages: a reasoning item becomes the ``reasoning_content`` of the assistant message
after it; function calls that follow an assistant message (or each other) become its
``tool_calls``; a call's output becomes a ``tool`` message naming the function.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.errors import ApiError, bad_request
from turnout.generation.requests import ChatMessage
from turnout.generation.unsupported import unsupported

Item = dict[str, Any]

_ROLES = frozenset({"user", "system", "developer", "assistant"})
#: Content part types of input messages → their text key (None: a media part, handed to the
#: chat path as it is).
_INPUT_PARTS: Mapping[str, str | None] = {"input_text": "text", "input_image": None}
_ASSISTANT_PARTS: Mapping[str, str] = {
    "output_text": "text",
    "input_text": "text",
    "refusal": "refusal",
}
#: Id prefixes of the items turnout names.
_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "mcp_approval_response": "mcpa",
}


def new_id(prefix: str) -> str:
    """A fresh OpenAI-style id, ``<prefix>_<48 hex>``."""
    return f"{prefix}_{secrets.token_hex(24)}"


#: Opens sealed reasoning (``encrypted_content``): the text, or None when it cannot be read.
Unseal = Callable[[str], str | None]


def input_items(value: str | list[Any], unseal: Unseal | None = None) -> list[Item]:
    """The request's ``input`` as checked items, each with an id (kept and listed as given,
    with the ids clients left out filled in). A reasoning item with only ``encrypted_content``
    is opened with ``unseal``. Errors name ``input[i]…``."""
    if isinstance(value, str):
        return [_message_item({"role": "user", "content": value}, "input")]
    items = []
    for i, raw in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(raw, dict):
            raise bad_request(f"{where} must be an object", where)
        kind = raw.get("type", "message" if "role" in raw else None)
        if kind == "message":
            items.append(_message_item(raw, where))
        elif kind == "function_call":
            items.append(_function_call(raw, where))
        elif kind == "function_call_output":
            items.append(_call_output(raw, where))
        elif kind == "reasoning":
            items.append(_reasoning(raw, where, unseal))
        elif isinstance(kind, str) and kind in _MCP_ITEMS:
            items.append(_MCP_ITEMS[kind](raw, where))
        elif kind is None:
            raise bad_request(f"{where} needs a 'type' (or a 'role' for a message)", where)
        else:
            raise unsupported(
                f"{where}.type",
                f"input items of type {kind!r} are not supported: only message, "
                "function_call, function_call_output, reasoning and the MCP items",
            )
    return items


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{where}.{key} must be a string", f"{where}.{key}")
    return value


def _identified(raw: Mapping[str, Any], kind: str, where: str) -> str:
    given = raw.get("id")
    if given is None:
        return new_id(_PREFIX[kind])
    if not isinstance(given, str) or not given:
        raise bad_request(f"{where}.id must be a non-empty string", f"{where}.id")
    return given


def _message_item(raw: Mapping[str, Any], where: str) -> Item:
    role = raw.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise bad_request(
            f"{where}.role must be one of {', '.join(sorted(_ROLES))}", f"{where}.role"
        )
    content = raw.get("content")
    assistant = role == "assistant"
    if isinstance(content, str):
        part: Item = {"type": "output_text" if assistant else "input_text", "text": content}
        if assistant:
            part["annotations"] = []
        parts = [part]
    elif isinstance(content, list):
        parts = [_part(p, assistant, f"{where}.content[{j}]") for j, p in enumerate(content)]
    else:
        raise bad_request(
            f"{where}.content must be a string or a list of parts", f"{where}.content"
        )
    return {
        "id": _identified(raw, "message", where),
        "type": "message",
        "role": role,
        "content": parts,
        "status": "completed",
    }


def _part(part: object, assistant: bool, where: str) -> Item:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise bad_request(f"{where} must be an object with a 'type'", where)
    kind = part["type"]
    known: Mapping[str, str | None] = _ASSISTANT_PARTS if assistant else _INPUT_PARTS
    if kind not in known:
        allowed = ", ".join(sorted(known))
        raise unsupported(
            where,
            f"{'assistant' if assistant else 'input'} message parts of type {kind!r} are not "
            f"supported: only {allowed}",
        )
    key = known[kind]
    if key is not None:
        _text(part, key, where)
    return dict(part)


def _function_call(raw: Mapping[str, Any], where: str) -> Item:
    call_id = _text(raw, "call_id", where)
    name = _text(raw, "name", where)
    if not call_id or not name:
        raise bad_request(f"{where}: call_id and name must not be empty", where)
    return {
        "id": _identified(raw, "function_call", where),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": _text(raw, "arguments", where),
        "status": "completed",
    }


def _call_output(raw: Mapping[str, Any], where: str) -> Item:
    call_id = _text(raw, "call_id", where)
    output = raw.get("output")
    if isinstance(output, list):
        for j, part in enumerate(output):
            at = f"{where}.output[{j}]"
            if not isinstance(part, dict) or part.get("type") != "input_text":
                raise unsupported(at, "function call outputs may hold input_text parts only")
            _text(part, "text", at)
    elif not isinstance(output, str):
        raise bad_request(f"{where}.output must be a string or a list of parts", f"{where}.output")
    return {
        "id": _identified(raw, "function_call_output", where),
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }


def _reasoning(raw: Mapping[str, Any], where: str, unseal: Unseal | None) -> Item:
    content = _text_parts(raw.get("content"), "reasoning_text", f"{where}.content")
    summary = _text_parts(raw.get("summary"), "summary_text", f"{where}.summary")
    sealed = raw.get("encrypted_content")
    if not content and not summary and sealed is not None:
        text = unseal(sealed) if unseal is not None and isinstance(sealed, str) else None
        if text is None:
            raise ApiError(
                400,
                "encrypted_content cannot be opened: it was not sealed by this router (or its "
                "responses.reasoning_key), or it was changed",
                param=f"{where}.encrypted_content",
                code="invalid_encrypted_content",
            )
        content = [{"type": "reasoning_text", "text": text}]
    item: Item = {"id": _identified(raw, "reasoning", where), "type": "reasoning"}
    item["summary"] = summary
    item["content"] = content
    item["status"] = "completed"
    return item


def _text_parts(value: object, kind: str, where: str) -> list[Item]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a list of {kind} parts", where)
    parts = []
    for j, part in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(part, dict) or part.get("type", kind) != kind:
            raise bad_request(f"{at} must be a {kind} part", at)
        parts.append({"type": kind, "text": _text(part, "text", at)})
    return parts


def _mcp_call(raw: Mapping[str, Any], where: str) -> Item:
    item = _mcp_named(raw, where)
    for key in ("output", "approval_request_id"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise bad_request(f"{where}.{key} must be a string", f"{where}.{key}")
        item[key] = value
    error = raw.get("error")
    if error is not None and not isinstance(error, (dict, str)):
        raise bad_request(f"{where}.error must be an object", f"{where}.error")
    item["error"] = error
    item["status"] = raw.get("status") or ("failed" if error is not None else "completed")
    return item


def _mcp_named(raw: Mapping[str, Any], where: str) -> Item:
    """The fields every MCP call item has: id, server label, tool name, arguments."""
    kind = raw["type"]
    given = raw.get("id")
    if not isinstance(given, str) or not given:
        raise bad_request(f"{where}.id must be a non-empty string", f"{where}.id")
    item: Item = {"id": given, "type": kind}
    for key in ("server_label", "name", "arguments"):
        item[key] = _text(raw, key, where)
    return item


def _mcp_list_tools(raw: Mapping[str, Any], where: str) -> Item:
    given = raw.get("id")
    if not isinstance(given, str) or not given:
        raise bad_request(f"{where}.id must be a non-empty string", f"{where}.id")
    tools = raw.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(tool, dict) and isinstance(tool.get("name"), str) for tool in tools
    ):
        raise bad_request(f"{where}.tools must list named tools", f"{where}.tools")
    item: Item = {
        "id": given,
        "type": "mcp_list_tools",
        "server_label": _text(raw, "server_label", where),
        "tools": [dict(tool) for tool in tools],
    }
    if raw.get("error") is not None:
        item["error"] = str(raw["error"])
    return item


def _mcp_approval_response(raw: Mapping[str, Any], where: str) -> Item:
    approve = raw.get("approve")
    if not isinstance(approve, bool):
        raise bad_request(f"{where}.approve must be a boolean", f"{where}.approve")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise bad_request(f"{where}.reason must be a string", f"{where}.reason")
    return {
        "id": _identified(raw, "mcp_approval_response", where),
        "type": "mcp_approval_response",
        "approval_request_id": _text(raw, "approval_request_id", where),
        "approve": approve,
        "reason": reason,
    }


#: MCP item types → their readers (items a response with MCP tools output, replayed by
#: clients, and the client's answer to an approval request).
_MCP_ITEMS: Mapping[str, Callable[[Mapping[str, Any], str], Item]] = {
    "mcp_list_tools": _mcp_list_tools,
    "mcp_call": _mcp_call,
    "mcp_approval_request": _mcp_named,
    "mcp_approval_response": _mcp_approval_response,
}


@dataclass(slots=True)
class Conversation:
    """Chat messages, and where each came from (``input[i]``, ``instructions``, or
    ``previous_response_id`` for a kept item) to name it in errors."""

    messages: list[ChatMessage] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)


def chat_messages(
    instructions: str | None, history: Sequence[Item], items: Sequence[Item]
) -> Conversation:
    """The chat messages of a response's context: ``instructions`` as a system message, then
    the kept items of earlier responses (``history``), then the request's own ``items``."""
    out = Conversation()
    if instructions:
        out.messages.append(ChatMessage(role="system", content=instructions))
        out.origins.append("instructions")
    reader = _Reader(out)
    for item in history:
        reader.read(item, "previous_response_id")
    for i, item in enumerate(items):
        reader.read(item, f"input[{i}]")
    reader.end()
    return out


class _Reader:
    """Folds items into chat messages (see the module's docstring)."""

    def __init__(self, out: Conversation) -> None:
        self._out = out
        self._reasoning: list[str] = []
        self._reasoning_origin = ""
        #: The last message is an assistant turn that later calls may join.
        self._open_turn = False
        self._names: dict[str, str] = {}
        #: MCP approval requests by id, until their answer.
        self._asked: dict[str, Item] = {}

    def read(self, item: Item, origin: str) -> None:
        kind = item["type"]
        if kind.startswith("mcp_"):
            self._mcp(item, origin)
            return
        if kind == "reasoning":
            parts = item["content"] or item["summary"]
            self._reasoning.append("".join(part["text"] for part in parts))
            self._reasoning_origin = self._reasoning_origin or origin
            return
        if kind == "message" and item["role"] == "assistant":
            self._assistant(_assistant_text(item["content"]), None, origin)
        elif kind == "message":
            self._flush_reasoning()
            self._add(
                ChatMessage(role=item["role"], content=_user_content(item["content"])), origin
            )
            self._open_turn = False
        elif kind == "function_call":
            self._names[item["call_id"]] = item["name"]
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = self._out.messages[-1] if self._out.messages else None
            if self._open_turn and not self._reasoning and last is not None:
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                self._assistant(None, call, origin)
        else:  # function_call_output
            self._flush_reasoning()
            output = item["output"]
            if isinstance(output, list):
                output = "".join(part["text"] for part in output)
            name = self._names.get(item["call_id"])
            message = ChatMessage(role="tool", content=output, tool_call_id=item["call_id"])
            if name is not None:
                message.name = name
            self._add(message, origin)
            self._open_turn = False

    def end(self) -> None:
        self._flush_reasoning()

    def _mcp(self, item: Item, origin: str) -> None:
        """An MCP call reads as a function call and its output; an approval request is
        remembered until its answer: a refusal reads as a call whose output says so; the
        call an approval led to is an ``mcp_call`` item of its own. Tool lists are not
        part of the conversation (the tools are)."""
        kind = item["type"]
        if kind == "mcp_approval_request":
            self._asked[item["id"]] = item
            return
        if kind == "mcp_approval_response":
            asked = self._asked.get(item["approval_request_id"])
            if asked is None or item["approve"]:
                return
            reason = f": {item['reason']}" if item.get("reason") else ""
            output = f"The user did not approve this call{reason}"
            call = asked
        elif kind == "mcp_call":
            error = item.get("error")
            if error is not None:
                said = error.get("message") if isinstance(error, dict) else None
                output = f"Error: {said or error}"
            else:
                output = item.get("output") or ""
            call = item
        else:
            return
        self.read(_as_call(call), origin)
        self.read({"type": "function_call_output", "call_id": call["id"], "output": output}, origin)

    def _assistant(self, content: str | None, call: dict[str, Any] | None, origin: str) -> None:
        message = ChatMessage(role="assistant", content=content)
        if call is not None:
            message.tool_calls = [call]
        if self._reasoning:
            message.reasoning_content = "".join(self._reasoning)
            origin = self._reasoning_origin
            self._reasoning = []
            self._reasoning_origin = ""
        self._add(message, origin)
        self._open_turn = True

    def _flush_reasoning(self) -> None:
        """Reasoning that no assistant output followed: an assistant turn of its own."""
        if self._reasoning:
            self._assistant("", None, self._reasoning_origin)

    def _add(self, message: ChatMessage, origin: str) -> None:
        self._out.messages.append(message)
        self._out.origins.append(origin)


def _as_call(item: Item) -> Item:
    """An MCP call (or approval request) as the function call the model made."""
    return {
        "type": "function_call",
        "call_id": item["id"],
        "name": item["name"],
        "arguments": item["arguments"],
    }


def _assistant_text(parts: Sequence[Item]) -> str:
    return "".join(part.get("text") or part.get("refusal") or "" for part in parts)


def _user_content(parts: Sequence[Item]) -> str | list[dict[str, Any]]:
    """Text parts joined by newlines (as text-only chat templates read them); with a media
    part, the parts as they are, for the chat path to check and render."""
    if all(part["type"] == "input_text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return [dict(part) for part in parts]
