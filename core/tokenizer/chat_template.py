"""Render OpenAI-style conversations through a model's Jinja chat template, like ``transformers``.

:class:`ChatTemplate` wraps one compiled template. Before rendering, messages are brought into the
shape Hugging Face templates expect: keys whose value is ``None`` are dropped, a null or
missing ``content`` becomes ``""`` (as SGLang does; templates read it), tool-call ``arguments``
given as a JSON string become a dict, reasoning is offered under both ``reasoning_content`` and
``thinking``, and content is converted to the template's :data:`ContentFormat` (parts joined
into a string, or a string wrapped in a text part; images as typed parts for templates that
render them, see :mod:`turnout.tokenizer.content_parts`). Templates that need otherwise get
what they expect (see :class:`MessageShape`): arguments as JSON text, a null content beside
tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from turnout.tokenizer.content_format import ContentFormat
from turnout.tokenizer.content_parts import template_content
from turnout.tokenizer.errors import ChatTemplateError
from turnout.tokenizer.message_shape import MessageShape, detect_message_shape
from turnout.tokenizer.template_env import compile_template

Message = Mapping[str, Any]

_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
# Appended to the message being continued, then cut off again with everything after it. The
# trailing space tells whether the template trimmed the message (then the cut is right-stripped).
_CONTINUE_TAG = "<turnout-continue-final-message> "
_DEFAULT_SHAPE = MessageShape()


def _arguments_as_object(arguments: object) -> object:
    """OpenAI sends arguments as JSON text; most templates expect the decoded object."""
    if not isinstance(arguments, str):
        return arguments
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments  # leave malformed JSON as text; templates print strings verbatim
    return decoded if isinstance(decoded, dict) else arguments


def _arguments_as_text(arguments: object) -> object:
    """For templates that concatenate arguments into the prompt: JSON text, as sent."""
    if isinstance(arguments, Mapping):
        return json.dumps(arguments, ensure_ascii=False)
    return arguments


def _tool_calls(calls: object, index: int, as_text: bool) -> object:
    if not isinstance(calls, list):
        raise ChatTemplateError(f"messages[{index}].tool_calls must be a list")
    shape_arguments = _arguments_as_text if as_text else _arguments_as_object
    converted: list[object] = []
    for call in calls:
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            function = dict(call["function"])
            if "arguments" in function:
                function["arguments"] = shape_arguments(function["arguments"])
            converted.append({**call, "function": function})
        else:
            converted.append(call)
    return converted


def prepare_messages(
    messages: Sequence[Message], shape: MessageShape = _DEFAULT_SHAPE
) -> list[dict[str, Any]]:
    """Copy ``messages`` into the shape chat templates expect (see the module docstring).

    The caller's objects are not modified.
    """
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError("messages must be a list of message objects")
    if not messages:
        raise ChatTemplateError("messages must not be empty")
    prepared: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if type(message) is not dict and not isinstance(message, Mapping):
            raise ChatTemplateError(f"messages[{index}] must be an object")
        if not isinstance(message.get("role"), str):
            raise ChatTemplateError(f"messages[{index}].role must be a string")
        out = {key: value for key, value in message.items() if value is not None}
        if "content" in out:
            out["content"] = template_content(
                out["content"],
                index=index,
                role=out["role"],
                parts_only=shape.content_format == "openai",
                media=shape.media,
            )
        elif out.get("tool_calls") and shape.null_content_with_calls:
            out["content"] = None
        else:
            out["content"] = ""
        if "tool_calls" in out:
            out["tool_calls"] = _tool_calls(out["tool_calls"], index, shape.arguments_as_text)
        reasoning = next((out[key] for key in _REASONING_KEYS if key in out), None)
        if reasoning is not None:
            out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
        prepared.append(out)
    return prepared


def _mark_final_message(
    messages: list[dict[str, Any]], key: str, source: str, sent: Message
) -> str:
    """Append the continue tag to the text being continued; return that text.

    ``sent`` is the final message as the client sent it: a content it did not send (made
    ``""`` for the template) is nothing to continue.
    """
    final = messages[-1]
    value = final.get(key)
    if value is None or sent.get(key) is None:
        raise ChatTemplateError(
            f"continue_final_message: the final message has no {key!r} to continue"
        )
    keys = [key]
    if key in _REASONING_KEYS:
        keys = [name for name in _REASONING_KEYS if final.get(name) == value]
    if not any(name in source for name in keys):
        raise ChatTemplateError(
            f"continue_final_message: the chat template does not use the field {key!r}"
        )
    if isinstance(value, list):
        for position in range(len(value) - 1, -1, -1):
            part = value[position]
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                value = [*value]
                value[position] = {**part, "text": part["text"] + _CONTINUE_TAG}
                final[key] = value
                text: str = part["text"]
                return text
        raise ChatTemplateError("continue_final_message: the final message has no text part")
    if not isinstance(value, str):
        raise ChatTemplateError(f"continue_final_message: {key!r} of the final message is no text")
    for name in keys:
        final[name] = value + _CONTINUE_TAG
    return value


def _cut_at_tag(rendered: str, final_text: str) -> str:
    tag_at = rendered.rfind(_CONTINUE_TAG.rstrip())
    if tag_at < 0 or final_text.strip() not in rendered:
        raise ChatTemplateError(
            "continue_final_message: the chat template drops (part of) the final message, "
            "so it cannot be continued"
        )
    if rendered.startswith(_CONTINUE_TAG, tag_at):
        return rendered[:tag_at]
    return rendered[:tag_at].rstrip()


class ChatTemplate:
    """One compiled chat template and the message shape it expects."""

    __slots__ = ("_template", "name", "shape", "source")

    def __init__(self, source: str, name: str = "default") -> None:
        """Compile ``source``; a syntax error raises :class:`ChatTemplateError`."""
        try:
            self._template = compile_template(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"chat template {name!r} has a syntax error on line {exc.lineno}: {exc.message}"
            ) from exc
        self.source = source
        self.name = name
        self.shape = detect_message_shape(source)

    @property
    def content_format(self) -> ContentFormat:
        """Whether the template takes content as a string or as parts."""
        return self.shape.content_format

    @property
    def media_kinds(self) -> frozenset[str]:
        """Media kinds (``image``…) the template renders from content parts."""
        return frozenset(self.shape.media)

    def render(
        self,
        messages: Sequence[Message],
        /,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool | str = False,
        special_tokens: Mapping[str, str] | None = None,
        **template_kwargs: Any,
    ) -> str:
        """Render a conversation; every failure is a :class:`ChatTemplateError`.

        ``continue_final_message`` (``True`` for ``content``, or the name of the field) leaves
        the last message open so the model continues it; it excludes ``add_generation_prompt``.
        ``special_tokens`` (``bos_token`` …) and ``template_kwargs`` become template variables;
        the latter win.
        """
        reserved = _RESERVED.intersection(template_kwargs)
        if reserved:
            raise ChatTemplateError(f"chat template arguments may not override {sorted(reserved)}")
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError(
                "continue_final_message and add_generation_prompt cannot both be set"
            )
        if documents is not None and not all(isinstance(doc, Mapping) for doc in documents):
            raise ChatTemplateError("documents must be a list of objects")
        prepared = prepare_messages(messages, self.shape)
        final_text = None
        if continue_final_message:
            key = continue_final_message if isinstance(continue_final_message, str) else "content"
            final_text = _mark_final_message(prepared, key, self.source, messages[-1])
        variables: dict[str, Any] = dict(special_tokens or {})
        variables.update(template_kwargs)
        try:
            rendered = self._template.render(
                messages=prepared,
                tools=None if tools is None else list(tools),
                documents=None if documents is None else list(documents),
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(exc.message or type(exc).__name__) from exc
        except Exception as exc:  # templates are third-party code fed with client data
            raise ChatTemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        if final_text is not None:
            rendered = _cut_at_tag(rendered, final_text)
        return rendered
