"""OpenAI-style chat conversations rendered to gpt-oss prompt tokens by ``openai-harmony``.

The mapping is the one gpt-oss's own chat template follows: harmony's *system* message carries
the reasoning effort (and optionally the date); the conversation's ``system``/``developer``
messages become the *developer* message's instructions, together with the function tools;
an assistant turn becomes an ``analysis`` message (its reasoning), ``commentary`` messages
addressed ``to=functions.NAME`` (its tool calls) and a ``final`` message (its content); a
``tool`` message becomes a message from ``functions.NAME`` to the assistant. Reasoning of turns
before the last final answer is dropped by harmony's renderer, as the model was trained.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from openai_harmony import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    ToolDescription,
)

from turnout.tokenizer.content_parts import text_of_parts
from turnout.tokenizer.errors import ChatTemplateError

__all__ = ["render_chat"]

_EFFORTS = {
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
}


def _text(message: Mapping[str, Any], index: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_of_parts(content, index)
    raise ChatTemplateError(f"messages[{index}].content must be a string or a list of parts")


def _tool(tool: Mapping[str, Any]) -> ToolDescription:
    function = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ChatTemplateError("gpt-oss takes function tools with a name")
    return ToolDescription.new(
        function["name"],
        str(function.get("description") or ""),
        parameters=function.get("parameters"),
    )


def _arguments(arguments: object) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _assistant(message: Mapping[str, Any], index: int, names: dict[str, str]) -> list[Message]:
    out: list[Message] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        out.append(
            Message.from_role_and_content(Role.ASSISTANT, reasoning).with_channel("analysis")
        )
    text = _text(message, index)
    calls = message.get("tool_calls") or []
    if text and calls:  # text beside calls is a preamble, said before them
        out.append(Message.from_role_and_content(Role.ASSISTANT, text).with_channel("commentary"))
    for call in calls:
        function = call.get("function") or {}
        name = function.get("name")
        if not isinstance(name, str):
            raise ChatTemplateError(f"messages[{index}].tool_calls: a call needs a function name")
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        out.append(
            Message.from_role_and_content(
                Role.ASSISTANT, _arguments(function.get("arguments", "{}"))
            )
            .with_channel("commentary")
            .with_recipient(f"functions.{name}")
            .with_content_type("<|constrain|>json")
        )
    if text and not calls:
        out.append(Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final"))
    return out


def render_chat(
    encoding: HarmonyEncoding,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    conversation_start_date: str | None = None,
) -> list[int]:
    """Prompt token ids for the assistant's next turn; bad input is a :class:`ChatTemplateError`."""
    system = SystemContent.new()
    if reasoning_effort is not None:
        effort = _EFFORTS.get(reasoning_effort)
        if effort is None:
            raise ChatTemplateError(f"reasoning_effort must be one of {sorted(_EFFORTS)}")
        system = system.with_reasoning_effort(effort)
    if conversation_start_date:
        system = system.with_conversation_start_date(conversation_start_date)
    instructions: list[str] = []
    turns: list[Message] = []
    names: dict[str, str] = {}  # tool_call_id -> function name, for tool results
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            instructions.append(_text(message, index))
        elif role == "user":
            turns.append(Message.from_role_and_content(Role.USER, _text(message, index)))
        elif role == "assistant":
            turns.extend(_assistant(message, index, names))
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name"))
            if not isinstance(name, str):
                raise ChatTemplateError(
                    f"messages[{index}]: a tool result must answer an earlier tool call"
                )
            author = Author.new(Role.TOOL, f"functions.{name}")
            turns.append(
                Message.from_author_and_content(author, _text(message, index))
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        else:
            raise ChatTemplateError(f"messages[{index}].role {role!r} is not supported by gpt-oss")
    developer = DeveloperContent.new()
    if instructions:
        developer = developer.with_instructions("\n\n".join(instructions))
    if tools:
        developer = developer.with_function_tools([_tool(tool) for tool in tools])
    head = [Message.from_role_and_content(Role.SYSTEM, system)]
    if instructions or tools:
        head.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    conversation = Conversation.from_messages([*head, *turns])
    return list(encoding.render_conversation_for_completion(conversation, Role.ASSISTANT))
