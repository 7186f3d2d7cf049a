"""Validate ``tools``/``tool_choice``/``response_format`` and plan what the request needs:
which tools reach the template, which parser reads the output, and which constraint goes to the
worker (``required`` and named choices become a JSON-schema constraint; with
``parallel_tool_calls: false`` the ``required`` array holds exactly one call)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.errors import bad_request
from turnout.tool_calls.types import CallFormat

#: Parser used when the worker is constrained to a JSON array of calls.
CONSTRAINED_ARRAY_PARSER = "json"


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """What the pipeline does about tools for one request."""

    #: Tools shown to the chat template (None: none).
    template_tools: list[dict[str, Any]] | None
    #: Tools the parser may return calls to (None: no tool parsing).
    parse_tools: list[dict[str, Any]] | None
    #: ``"model"`` (the model's parser), ``"array"`` (constrained JSON array), ``"forced"``
    #: (the whole output is the arguments of :attr:`forced_name`) or ``"off"``.
    mode: str
    forced_name: str | None = None
    json_schema: str | None = None
    #: An xgrammar structural tag (JSON): calls in the model's own format, their arguments
    #: kept to the tools' schemas, or content in the response format.
    structural_tag: str | None = None


def _tool_name(tool: Mapping[str, Any], index: int) -> str:
    if tool.get("type", "function") != "function":
        raise bad_request(f"tools[{index}].type must be 'function'", f"tools[{index}].type")
    function = tool.get("function")
    if not isinstance(function, Mapping):
        raise bad_request(f"tools[{index}].function must be an object", f"tools[{index}].function")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(
            f"tools[{index}].function.name must be a non-empty string",
            f"tools[{index}].function.name",
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise bad_request(
            f"tools[{index}].function.parameters must be a JSON schema object",
            f"tools[{index}].function.parameters",
        )
    return name


def _parameters(tool: Mapping[str, Any]) -> dict[str, Any]:
    parameters = tool["function"].get("parameters")
    return dict(parameters) if parameters else {"type": "object", "properties": {}}


#: Where JSON schemas keep the definitions that ``$ref`` points at (``#/$defs/X``).
_DEFINITION_KEYS = ("$defs", "definitions")


def _array_schema(tools: Sequence[Mapping[str, Any]], parallel: bool) -> str:
    """One schema for "an array of calls": each tool's parameters nest under ``items``, so
    their definitions move to the root, where their ``#/$defs/…`` references point."""
    definitions: dict[str, dict[str, Any]] = {key: {} for key in _DEFINITION_KEYS}
    items = []
    for tool in tools:
        parameters = _parameters(tool)
        for key in _DEFINITION_KEYS:
            _hoist(parameters.pop(key, None), definitions[key], tool["function"]["name"], key)
        items.append(
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": [tool["function"]["name"]]},
                    "parameters": parameters,
                },
                "required": ["name", "parameters"],
            }
        )
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if not parallel:
        schema["maxItems"] = 1
    schema.update((key, found) for key, found in definitions.items() if found)
    return json.dumps(schema, ensure_ascii=False)


def _hoist(found: object, into: dict[str, Any], tool: str, key: str) -> None:
    """Add one tool's definitions to the shared ones; a name two tools define differently
    cannot be shared (a 400 naming it)."""
    if found is None:
        return
    if not isinstance(found, Mapping):
        raise bad_request(f"{key} of tool {tool!r} must be an object", "tools")
    for name, definition in found.items():
        if name in into and into[name] != definition:
            raise bad_request(
                f"tools define {key}/{name} differently ({tool!r} and an earlier tool): "
                "tool_choice 'required' needs one definition per name",
                "tools",
            )
        into[name] = definition


def _named(choice: Mapping[str, Any], key: str) -> str:
    function = choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request("tool_choice must name a function", key)
    return name


def plan_tools(
    tools: list[dict[str, Any]] | None,
    tool_choice: str | dict[str, Any] | None,
    response_format: dict[str, Any] | None,
    has_parser: bool,
    *,
    parallel: bool = True,
    call_format: CallFormat | None = None,
) -> ToolPlan:
    """Check the request's tool fields and decide how tools are handled.

    ``parallel`` is the request's ``parallel_tool_calls``; without it the output holds at most
    one call (the chat handler drops later ones; ``required`` is constrained to one).
    ``call_format`` is how the model's tool parser writes a call, when it says: under ``auto``,
    ``strict`` tools or a response format then become a structural tag, so the model may still
    call tools (see :func:`_auto_tag`).
    """
    response_schema = _response_format_schema(response_format)
    names = [_tool_name(tool, i) for i, tool in enumerate(tools or [])]
    if len(set(names)) != len(names):
        raise bad_request("tool names must be unique", "tools")
    if not tools:
        if tool_choice not in (None, "none", "auto"):
            raise bad_request("tool_choice requires tools", "tool_choice")
        return ToolPlan(None, None, "off", json_schema=response_schema)

    choice = "auto" if tool_choice is None else tool_choice
    selected = tools
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "allowed_tools":
            allowed = choice.get("allowed_tools")
            if not isinstance(allowed, Mapping):
                raise bad_request("allowed_tools must be an object", "tool_choice.allowed_tools")
            wanted = {
                _named(t, "tool_choice.allowed_tools.tools") for t in allowed.get("tools") or []
            }
            unknown = wanted - set(names)
            if unknown:
                raise bad_request(
                    f"tool_choice.allowed_tools names unknown tools: {', '.join(sorted(unknown))}",
                    "tool_choice",
                )
            selected = [t for t in tools if t["function"]["name"] in wanted]
            choice = allowed.get("mode", "auto")
        elif kind == "function":
            name = _named(choice, "tool_choice")
            if name not in names:
                raise bad_request(
                    f"tool_choice names function {name!r}, which is not among the tools "
                    f"({', '.join(names)})",
                    "tool_choice",
                )
            tool = tools[names.index(name)]
            # A forced call wins over response_format (as OpenAI, vLLM and SGLang do): the
            # output is the call's arguments, so the format has nothing left to shape.
            return ToolPlan(
                tools,
                [tool],
                "forced",
                forced_name=name,
                json_schema=json.dumps(_parameters(tool), ensure_ascii=False),
            )
        else:
            raise bad_request(f"unsupported tool_choice type {kind!r}", "tool_choice")

    if choice == "none":
        return ToolPlan(None, None, "off", json_schema=response_schema)
    if choice == "required":
        return ToolPlan(tools, selected, "array", json_schema=_array_schema(selected, parallel))
    if choice != "auto":
        raise bad_request(
            "tool_choice must be 'none', 'auto', 'required' or name a function", "tool_choice"
        )
    if has_parser and call_format is not None:
        strict = any(tool["function"].get("strict") is True for tool in selected)
        if strict or response_schema is not None:
            tag = _auto_tag(selected, call_format, response_schema, parallel)
            return ToolPlan(tools, selected, "model", structural_tag=tag)
    return ToolPlan(tools, selected, "model" if has_parser else "off", json_schema=response_schema)


def _auto_tag(
    tools: Sequence[Mapping[str, Any]],
    call_format: CallFormat,
    response_schema: str | None,
    parallel: bool,
) -> str:
    """The structural tag of ``tool_choice: auto``: text with calls in the model's format,
    each call's arguments valid under its tool's parameters; with a response format, either
    calls or content valid under the format (OpenAI's rule: the model may call tools, and its
    final answer follows the format)."""
    calls: dict[str, Any] = {
        "type": "triggered_tags",
        "triggers": [call_format.trigger],
        "tags": [
            {
                "type": "tag",
                "begin": call_format.begin_for(tool["function"]["name"]),
                "content": {"type": "json_schema", "json_schema": _parameters(tool)},
                "end": call_format.end,
            }
            for tool in tools
        ],
        "at_least_one": False,
        "stop_after_first": not parallel,
    }
    if response_schema is None:
        shape: dict[str, Any] = calls
    else:
        answer = {"type": "json_schema", "json_schema": json.loads(response_schema)}
        shape = {"type": "or", "elements": [{**calls, "at_least_one": True}, answer]}
    return json.dumps({"type": "structural_tag", "format": shape}, ensure_ascii=False)


def _response_format_schema(response_format: dict[str, Any] | None) -> str | None:
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise bad_request(
                "response_format.json_schema.schema must be a JSON schema object",
                "response_format",
            )
        return json.dumps(schema, ensure_ascii=False)
    raise bad_request(f"unsupported response_format type {kind!r}", "response_format")
