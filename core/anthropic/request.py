"""The ``POST /v1/messages`` body, and the fields and values turnout refuses.

Decoding checks types and ranges (a 400 naming the field; unknown fields are refused);
:func:`check_request` refuses what turnout does not do with a 400 naming it: server tools,
containers, MCP servers… Fields that do not change the answer are accepted (``metadata``,
``cache_control``: the workers' prefix cache needs no breakpoints). The content blocks are
checked when they are read (:mod:`turnout.anthropic.blocks`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from turnout.errors import bad_request
from turnout.generation.requests import INT32_MAX, TokenCount, check_top_k
from turnout.generation.unsupported import unsupported

#: Fields turnout knows but does not implement → why.
_UNSUPPORTED: dict[str, str] = {
    "container": "turnout runs no code containers",
    "mcp_servers": "turnout connects to no MCP servers: give the tools as tools",
}
#: Keys of a client tool.
_TOOL_KEYS = frozenset(
    {
        "type",
        "name",
        "description",
        "input_schema",
        "cache_control",
        "defer_loading",
        "strict",
        "input_examples",
    }
)
_THINKING_TYPES = ("enabled", "disabled", "adaptive")
#: ``context_management`` edits that only drop old thinking (which turnout's prompt does not
#: keep anyway: chat templates drop the reasoning of earlier turns).
_HARMLESS_EDITS = frozenset({"clear_thinking_20251015"})


class MessagesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/messages``."""

    #: The model, or an alias of one (``aliases`` in the config).
    model: str | None = None
    messages: Annotated[list[Any], Meta(min_length=1)]
    #: The largest answer, clamped to the room the prompt leaves in the model's context.
    max_tokens: TokenCount
    #: A text or text blocks: the system message.
    system: str | list[Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=-1, le=INT32_MAX)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    #: ``{"type": "enabled", "budget_tokens": n}``, ``disabled`` or ``adaptive``: the model's
    #: thinking switch (``enable_thinking`` for its chat template).
    thinking: dict[str, Any] | None = None
    #: ``{"effort": …}``: the chat template's ``reasoning_effort``; ``format``: a JSON schema.
    output_config: dict[str, Any] | None = None
    #: Accepted: ``user_id`` does not change the answer.
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    context_management: dict[str, Any] | None = None
    # Known but not implemented: a request setting one is refused.
    container: Any = None
    mcp_servers: Any = None

    def __post_init__(self) -> None:
        check_top_k(self.top_k)

    @property
    def streams(self) -> bool:
        """Whether the answer is streamed."""
        return self.stream


class CountTokensRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/messages/count_tokens``: the prompt part of a messages request."""

    model: str | None = None
    messages: Annotated[list[Any], Meta(min_length=1)]
    system: str | list[Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None
    mcp_servers: Any = None


def check_request(request: MessagesRequest | CountTokensRequest) -> None:
    """Refuse what turnout does not do (400 ``unsupported_parameter`` naming the field) and
    the values the decoder cannot judge alone."""
    for name, why in _UNSUPPORTED.items():
        if getattr(request, name, None) not in (None, [], {}):
            raise unsupported(name, f"{name} is not supported: {why}")
    _check_tools(request.tools or [])
    _check_tool_choice(request.tool_choice, request.tools or [])
    _check_thinking(request.thinking)
    _check_output_config(request.output_config)
    _check_context_management(request.context_management)
    if isinstance(request, MessagesRequest):
        if request.service_tier not in (None, "auto", "standard_only"):
            raise bad_request("service_tier must be 'auto' or 'standard_only'", "service_tier")
        for i, stop in enumerate(request.stop_sequences or []):
            if not stop:
                raise bad_request(
                    "stop_sequences must not hold an empty string", f"stop_sequences[{i}]"
                )


def _check_tools(tools: list[dict[str, Any]]) -> None:
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise unsupported(
                f"tools[{i}].type",
                f"tools of type {kind!r} are not supported: only client tools (name, "
                "description, input_schema); server tools such as web search, code execution "
                "and computer use are Anthropic's",
            )
        extra = sorted(set(tool) - _TOOL_KEYS)
        if extra:
            raise unsupported(f"tools[{i}].{extra[0]}", f"tools[{i}].{extra[0]} is not supported")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"tools[{i}].name must be a non-empty string", f"tools[{i}].name")
        if not isinstance(tool.get("input_schema"), dict):
            raise bad_request(
                f"tools[{i}].input_schema must be a JSON schema object",
                f"tools[{i}].input_schema",
            )
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise bad_request(f"tools[{i}].description must be a string", f"tools[{i}].description")


def _check_tool_choice(choice: dict[str, Any] | None, tools: list[dict[str, Any]]) -> None:
    if choice is None:
        return
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise bad_request(
            "tool_choice.type must be 'auto', 'any', 'tool' or 'none'", "tool_choice.type"
        )
    extra = sorted(set(choice) - {"type", "name", "disable_parallel_tool_use"})
    if extra:
        raise unsupported(f"tool_choice.{extra[0]}", f"tool_choice.{extra[0]} is not supported")
    parallel = choice.get("disable_parallel_tool_use")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request(
            "tool_choice.disable_parallel_tool_use must be a boolean",
            "tool_choice.disable_parallel_tool_use",
        )
    if kind == "tool":
        name = choice.get("name")
        if name not in {tool.get("name") for tool in tools}:
            raise bad_request(
                f"tool_choice.name {name!r} is not one of the tools", "tool_choice.name"
            )
    if kind in ("any", "tool") and not tools:
        raise bad_request(f"tool_choice {kind!r} needs tools", "tool_choice")


def _check_thinking(thinking: dict[str, Any] | None) -> None:
    if thinking is None:
        return
    kind = thinking.get("type")
    if kind not in _THINKING_TYPES:
        raise bad_request(
            "thinking.type must be 'enabled', 'disabled' or 'adaptive'", "thinking.type"
        )
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise bad_request(
            "thinking.budget_tokens must be an integer when thinking is enabled",
            "thinking.budget_tokens",
        )
    display = thinking.get("display")
    if display not in (None, "summarized", "omitted"):
        raise bad_request("thinking.display must be 'summarized' or 'omitted'", "thinking.display")
    extra = sorted(set(thinking) - {"type", "budget_tokens", "display"})
    if extra:
        raise unsupported(f"thinking.{extra[0]}", f"thinking.{extra[0]} is not supported")


def _check_output_config(config: dict[str, Any] | None) -> None:
    if config is None:
        return
    effort = config.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise bad_request("output_config.effort must be a string", "output_config.effort")
    fmt = config.get("format")
    if fmt is not None and (
        not isinstance(fmt, dict)
        or fmt.get("type") != "json_schema"
        or not isinstance(fmt.get("schema"), dict)
    ):
        raise bad_request(
            "output_config.format must be {'type': 'json_schema', 'schema': {...}}",
            "output_config.format",
        )
    extra = sorted(set(config) - {"effort", "format"})
    if extra:
        raise unsupported(f"output_config.{extra[0]}", f"output_config.{extra[0]} is not supported")


def _check_context_management(management: dict[str, Any] | None) -> None:
    """Edits that only drop old thinking are accepted (the prompt has none of it); others
    (clearing tool results…) would change the prompt, and turnout does not make them."""
    if management is None:
        return
    extra = sorted(set(management) - {"edits"})
    if extra:
        raise unsupported(
            f"context_management.{extra[0]}", f"context_management.{extra[0]} is not supported"
        )
    edits = management.get("edits") or []
    if not isinstance(edits, list):
        raise bad_request("context_management.edits must be a list", "context_management.edits")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in _HARMLESS_EDITS:
            raise unsupported(
                f"context_management.edits[{i}]",
                f"context_management edit {kind!r} is not supported: turnout does not edit "
                "the context (only clear_thinking edits are accepted)",
            )
