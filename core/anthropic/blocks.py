"""Content blocks as chat messages, checked as they are read (a 400 naming the block).

- ``system`` (a text or text blocks) → a system message;
- a user turn: its ``tool_result`` blocks → ``tool`` messages (first, as Anthropic has them),
  its ``text`` and ``image`` blocks → one user message (images as ``image_url`` parts: a
  ``data:`` URI from a base64 source, or the URL; the chat path's image checks apply);
- a ``system`` turn between the others (Claude Code sends them): a system message;
- an assistant turn: ``text`` → content, ``thinking`` → ``reasoning_content``, ``tool_use``
  → tool calls (``input`` as JSON arguments); ``redacted_thinking`` is opaque and dropped.

``cache_control`` is accepted everywhere (the workers' prefix cache is automatic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from turnout.errors import bad_request
from turnout.generation.requests import ChatMessage
from turnout.generation.unsupported import unsupported

#: Blocks Anthropic defines that turnout does not take → why.
_REFUSED_BLOCKS = {
    "document": "documents (PDFs, citations) are Anthropic's: send the text",
    "search_result": "search results are Anthropic's",
    "server_tool_use": "server tools are Anthropic's",
    "web_search_tool_result": "server tools are Anthropic's",
    "container_upload": "turnout runs no code containers",
}
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
#: Marks the text of a ``tool_result`` with ``is_error`` (the chat template has no field).
ERROR_PREFIX = "Error: "


@dataclass(slots=True)
class Conversation:
    """Chat messages, and where each came from (``system``, ``messages[3]``), so that an error
    of the chat path names what the client sent."""

    messages: list[ChatMessage] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)

    def add(self, message: ChatMessage, origin: str) -> None:
        """Append ``message``, read from ``origin``."""
        self.messages.append(message)
        self.origins.append(origin)


def conversation(system: str | list[Any] | None, messages: list[Any]) -> Conversation:
    """The chat messages of a request's ``system`` and ``messages``."""
    out = Conversation()
    text = _system_text(system)
    if text:
        out.add(ChatMessage(role="system", content=text), "system")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object", where)
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise unsupported(f"{where}.{extra[0]}", f"{where}.{extra[0]} is not supported")
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise bad_request(f"{where}.content must be a string or a list of blocks", where)
        for j, block in enumerate(content):
            _check_block(block, f"{where}.content[{j}]")
        if role == "user":
            _user(content, where, out)
        elif role == "assistant":
            _assistant(content, where, out)
        elif role == "system":  # Claude Code sends system text between the turns
            if any(block["type"] != "text" for block in content):
                raise bad_request(f"{where}: a system turn holds text blocks", where)
            out.add(ChatMessage(role="system", content=_parts(content, where)), where)
        else:
            raise bad_request(
                f"{where}.role must be 'user', 'assistant' or 'system', not {role!r}",
                f"{where}.role",
            )
    return out


def _system_text(system: str | list[Any] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for i, block in enumerate(system):
        where = f"system[{i}]"
        _check_block(block, where)
        if block["type"] != "text":
            raise bad_request(f"{where}: system blocks must be text blocks", where)
        texts.append(block["text"])
    return "\n\n".join(texts)


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad_request(f"{where} must be a content block with a 'type'", where)
    kind = block["type"]
    if kind in _REFUSED_BLOCKS:
        raise unsupported(where, f"{kind} blocks are not supported: {_REFUSED_BLOCKS[kind]}")
    if block.get("citations"):
        raise unsupported(f"{where}.citations", "citations are not supported")
    if kind == "text":
        _need(block, "text", str, where)
    elif kind == "image":
        _image_url(block, where)
    elif kind == "tool_use":
        _need(block, "id", str, where)
        _need(block, "name", str, where)
        _need(block, "input", dict, where)
    elif kind == "tool_result":
        _need(block, "tool_use_id", str, where)
        content = block.get("content")
        if isinstance(content, list):
            for j, inner in enumerate(content):
                _check_block(inner, f"{where}.content[{j}]")
                if inner["type"] not in ("text", "image"):
                    raise bad_request(
                        f"{where}.content[{j}]: a tool result holds text and image blocks",
                        f"{where}.content[{j}]",
                    )
        elif content is not None and not isinstance(content, str):
            raise bad_request(
                f"{where}.content must be a string or a list of blocks", f"{where}.content"
            )
        if not isinstance(block.get("is_error", False), bool):
            raise bad_request(f"{where}.is_error must be a boolean", f"{where}.is_error")
    elif kind == "thinking":
        _need(block, "thinking", str, where)
    elif kind != "redacted_thinking":
        raise bad_request(f"{where}: unknown content block type {kind!r}", f"{where}.type")


def _need(block: dict[str, Any], key: str, kind: type, where: str) -> None:
    if not isinstance(block.get(key), kind):
        name = "a string" if kind is str else "an object"
        raise bad_request(f"{where}.{key} must be {name}", f"{where}.{key}")


def _image_url(block: dict[str, Any], where: str) -> str:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        assert isinstance(source, dict)
        media_type, data = source.get("media_type"), source.get("data")
        if media_type not in _IMAGE_TYPES:
            raise bad_request(
                f"{where}.source.media_type must be one of {', '.join(_IMAGE_TYPES)}",
                f"{where}.source.media_type",
            )
        if not isinstance(data, str) or not data:
            raise bad_request(f"{where}.source.data must be base64 text", f"{where}.source.data")
        return f"data:{media_type};base64,{data}"
    if kind == "url":
        assert isinstance(source, dict)
        url = source.get("url")
        if not isinstance(url, str) or not url:
            raise bad_request(f"{where}.source.url must be a URL", f"{where}.source.url")
        return url
    if kind == "file":
        raise unsupported(
            f"{where}.source", "file sources are not supported: turnout keeps no files"
        )
    raise bad_request(f"{where}.source.type must be 'base64' or 'url'", f"{where}.source")


def _parts(blocks: list[dict[str, Any]], where: str) -> str | list[dict[str, Any]]:
    """Text blocks joined by newlines (as text-only templates read them); with an image, the
    parts as chat content parts, for the chat path to check and render."""
    if all(block["type"] == "text" for block in blocks):
        return "\n".join(block["text"] for block in blocks)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            parts.append({"type": "text", "text": block["text"]})
        else:
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, where)}})
    return parts


def _user(blocks: list[dict[str, Any]], where: str, out: Conversation) -> None:
    rest: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_result":
            out.add(_tool_message(block, f"{where}.content[{j}]"), where)
        elif kind in ("text", "image"):
            rest.append(block)
        else:
            raise bad_request(
                f"{where}.content[{j}]: a user turn holds text, image and tool_result blocks",
                f"{where}.content[{j}]",
            )
    if rest or not blocks:
        out.add(ChatMessage(role="user", content=_parts(rest, where)), where)


def _tool_message(block: dict[str, Any], where: str) -> ChatMessage:
    content = block.get("content")
    inner: list[dict[str, Any]] = (
        [{"type": "text", "text": content or ""}] if not isinstance(content, list) else content
    )
    parts = _parts(inner, where)
    if block.get("is_error"):
        if isinstance(parts, str):
            parts = ERROR_PREFIX + parts
        else:
            parts = [{"type": "text", "text": ERROR_PREFIX.strip()}, *parts]
    return ChatMessage(role="tool", content=parts, tool_call_id=block["tool_use_id"])


def _assistant(blocks: list[dict[str, Any]], where: str, out: Conversation) -> None:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "thinking":
            thinking.append(block["thinking"])
        elif kind == "tool_use":
            arguments = json.dumps(block["input"], ensure_ascii=False)
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
        elif kind != "redacted_thinking":
            raise bad_request(
                f"{where}.content[{j}]: an assistant turn holds text, thinking and tool_use blocks",
                f"{where}.content[{j}]",
            )
    message = ChatMessage(role="assistant", content="".join(texts))
    if thinking:
        message.reasoning_content = "".join(thinking)
    if calls:
        message.tool_calls = calls
    out.add(message, where)
