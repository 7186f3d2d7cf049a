"""The ``POST /v1/responses`` body, and the fields and values turnout refuses.

Decoding checks types and ranges (a 400 naming the field); :func:`check_request` refuses what
turnout does not do with a 400 ``unsupported_parameter`` naming it: built-in tools, background
options, prompt templates… Nothing a client asks for is silently ignored. The input
items are checked when they are read (:mod:`turnout.responses.items`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from turnout.errors import ApiError, bad_request
from turnout.generation.requests import (
    INT32_MAX,
    InvalidField,
    Penalty,
    TokenCount,
    TopLogprobs,
    check_template_kwargs,
    check_top_k,
)
from turnout.generation.unsupported import unsupported
from turnout.responses.mcp.servers import check_mcp_tool

#: ``include`` values turnout serves: output text logprobs, and sealed reasoning.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
SEALED_REASONING_INCLUDE = "reasoning.encrypted_content"
_INCLUDES = (LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE)

#: Fields turnout knows but does not implement → what to do instead.
_UNSUPPORTED: dict[str, str] = {
    "background_options": "background responses take no options",
    "prompt": "prompt templates are OpenAI's: send the input",
    "context_management": "turnout does not compact the context",
    "moderation": "turnout does not moderate",
    "access_programs": "access programs are OpenAI's",
    "prompt_cache_options": "the workers' prefix cache needs no breakpoints (prompt_cache_key "
    "is accepted)",
    "image": "request-level image options are OpenAI's",
}


#: OpenAI's ``metadata``: at most 16 pairs (see :func:`check_metadata`).
Metadata = Annotated[dict[str, str], Meta(max_length=16)]


def check_metadata(metadata: dict[str, str] | None) -> None:
    """Keys of at most 64 characters, values of at most 512 (in a ``__post_init__``)."""
    for key, value in (metadata or {}).items():
        if len(key) > 64 or len(value) > 512:
            raise InvalidField(
                "metadata", "metadata keys are at most 64 characters, values at most 512"
            )


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/responses``."""

    model: str | None = None
    #: A text (one user message) or a list of input items.
    input: str | list[Any]
    #: A system message before the input (not carried over by ``previous_response_id``).
    instructions: str | None = None
    previous_response_id: Annotated[str, Meta(min_length=1)] | None = None
    #: The conversation the response belongs to: its id, or ``{"id": …}``. Its items come
    #: before the input; the input and output items are added to it when the response ends.
    conversation: str | dict[str, Any] | None = None
    #: Keep the response (``GET /v1/responses/{id}``, ``previous_response_id``).
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_logprobs: TopLogprobs | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    #: ``{"format": {"type": "text" | "json_object" | "json_schema", …}}``.
    text: dict[str, Any] | None = None
    #: ``{"effort": …}`` (passed to the chat template); ``summary`` is accepted, no summary
    #: is written (reasoning items carry the reasoning itself).
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    #: Echoed in the response.
    metadata: Metadata | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    #: ``disabled`` (the default): a prompt over the context is a 400. ``auto``: the oldest
    #: input items are dropped until it fits.
    truncation: str | None = None
    #: MCP calls the router makes in one response at most.
    max_tool_calls: Annotated[int, Meta(ge=0)] | None = None
    # SGLang / vLLM extensions.
    top_k: Annotated[int, Meta(ge=-1, le=INT32_MAX)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Meta(gt=0, le=2)] | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    seed: Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    #: Run detached (:mod:`turnout.responses.background`): answered at once, polled, cancelled.
    background: bool | None = None
    # Known but not implemented: a request setting one is refused.
    prompt: Any = None
    context_management: Any = None
    moderation: Any = None
    background_options: Any = None
    access_programs: Any = None
    prompt_cache_options: Any = None
    image: Any = None

    def __post_init__(self) -> None:
        check_top_k(self.top_k)
        check_metadata(self.metadata)
        check_template_kwargs(self.chat_template_kwargs)

    @property
    def stores(self) -> bool:
        """Whether the response is kept (OpenAI's default: yes)."""
        return self.store is not False

    @property
    def conversation_id(self) -> str | None:
        """The id of the conversation the response belongs to (checked by
        :func:`check_request`), or None."""
        value = self.conversation
        if isinstance(value, dict):
            found = value.get("id")
            return found if isinstance(found, str) else None
        return value

    @property
    def streams(self) -> bool:
        """Whether the answer is streamed."""
        return bool(self.stream)

    @property
    def logprobs(self) -> bool:
        """Whether output text carries logprobs (``include``)."""
        return LOGPROBS_INCLUDE in (self.include or ())

    @property
    def seals_reasoning(self) -> bool:
        """Whether reasoning items carry their reasoning sealed (``encrypted_content``)."""
        return SEALED_REASONING_INCLUDE in (self.include or ())


def check_request(request: ResponsesRequest) -> None:
    """Refuse what turnout does not do (400 ``unsupported_parameter`` naming the field) and
    the values the decoder cannot judge alone."""
    for name, instead in _UNSUPPORTED.items():
        value = getattr(request, name)
        if value not in (None, False):
            raise unsupported(name, f"{name} is not supported: {instead}")
    _check_conversation(request)
    if request.background and not request.stores:
        raise bad_request(
            "background responses must be stored: background needs store: true", "store"
        )
    if request.truncation not in (None, "disabled", "auto"):
        raise bad_request("truncation must be 'auto' or 'disabled'", "truncation")
    for value in request.include or ():
        if value not in _INCLUDES:
            raise unsupported(
                "include",
                f"include {value!r} is not supported: only {' and '.join(map(repr, _INCLUDES))}",
            )
    if request.top_logprobs and not request.logprobs:
        raise bad_request(f"top_logprobs needs include: [{LOGPROBS_INCLUDE!r}]", "top_logprobs")
    _check_tools(request.tools or [])
    _check_tool_choice(request.tool_choice, request.tools or [])
    _check_text(request.text)
    effort = (request.reasoning or {}).get("effort")
    if effort is not None and not isinstance(effort, str):
        raise bad_request("reasoning.effort must be a string", "reasoning.effort")


def _check_conversation(request: ResponsesRequest) -> None:
    if request.conversation is None:
        return
    if not request.conversation_id:
        raise bad_request(
            "conversation must be a conversation id or an object with a non-empty 'id'",
            "conversation",
        )
    if request.previous_response_id is not None:
        raise ApiError(
            400,
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )


def _check_tools(tools: list[dict[str, Any]]) -> None:
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind == "mcp":
            check_mcp_tool(tool, f"tools[{i}]")
            continue
        if kind != "function":
            raise unsupported(
                f"tools[{i}].type",
                f"tools of type {kind!r} are not supported: only function and mcp tools "
                "(built-in tools such as web_search, file_search and code_interpreter are "
                "OpenAI's)",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"tools[{i}].name must be a non-empty string", f"tools[{i}].name")
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request(
                f"tools[{i}].parameters must be a JSON schema object", f"tools[{i}].parameters"
            )


def _check_tool_choice(choice: str | dict[str, Any] | None, tools: list[dict[str, Any]]) -> None:
    if not isinstance(choice, dict):
        return
    kind = choice.get("type")
    if kind == "mcp":
        labels = [tool.get("server_label") for tool in tools if tool.get("type") == "mcp"]
        name = choice.get("name")
        if choice.get("server_label") not in labels or not (name is None or isinstance(name, str)):
            raise bad_request(
                "tool_choice of type 'mcp' names the server_label of one of the request's mcp "
                "tools (and a tool name)",
                "tool_choice",
            )
    elif kind == "allowed_tools":
        for j, tool in enumerate(choice.get("tools") or []):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise unsupported(
                    f"tool_choice.tools[{j}]", "allowed_tools may only list function tools"
                )
    elif kind != "function":
        raise unsupported(
            "tool_choice",
            f"tool_choice of type {kind!r} is not supported: only 'none', 'auto', 'required', "
            "a function, an mcp server's tool or allowed_tools",
        )


def _check_text(text: dict[str, Any] | None) -> None:
    if not text:
        return
    verbosity = text.get("verbosity")
    if verbosity not in (None, "medium"):
        raise unsupported("text.verbosity", "text.verbosity is not supported")
    fmt = text.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise bad_request("text.format must be an object", "text.format")
    kind = fmt.get("type")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise bad_request(
                "text.format.schema must be a JSON schema object", "text.format.schema"
            )
    elif kind not in ("text", "json_object"):
        raise bad_request(
            "text.format.type must be 'text', 'json_object' or 'json_schema'", "text.format.type"
        )
