"""The JSON schemas of the OpenAPI document that the route types cannot give.

The answers of most routes are built as JSON directly (no typed structure to derive a schema
from): their schemas are written here once (:data:`ANSWERS`, :data:`STREAM_EVENTS`), in the
shapes the router writes them (OpenAI's, SGLang's and Anthropic's, with turnout's extra fields
allowed). The request types declare types and ranges; the rules the server checks after
decoding (allowed roles, tool shapes, fields refused unless null, token ids within the
vocabulary, the served model names…) are added to their schemas by :func:`request_rules`, so
that a body the document admits is a body the server takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.embeddings.request import MAX_INPUTS
from turnout.generation.completions import MAX_CHOICES
from turnout.generation.requests import INT32_MAX, RESERVED_TEMPLATE_KWARGS
from turnout.generation.unsupported import CHAT, COMPLETIONS, GENERATE
from turnout.responses.request import LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE

Schema = dict[str, Any]

_REF = "#/components/schemas/{name}"


def ref(name: str) -> Schema:
    """A reference to the component ``name``."""
    return {"$ref": _REF.format(name=name)}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(properties: dict[str, Schema], *required: str, closed: bool = False) -> Schema:
    found: Schema = {"type": "object", "properties": properties, "required": list(required)}
    if closed:
        found["additionalProperties"] = False
    return found


_STR: Schema = {"type": "string"}
_TEXT: Schema = {"type": "string", "minLength": 1}
_INT: Schema = {"type": "integer"}
_COUNT: Schema = {"type": "integer", "minimum": 0}
_NUM: Schema = {"type": "number"}
_BOOL: Schema = {"type": "boolean"}
_NULL: Schema = {"type": "null"}
_JSON_SCHEMA: Schema = {"type": "object", "description": "A JSON schema"}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": _STR}


# --- what the server answers -------------------------------------------------------------------

_USAGE = _obj(
    {
        "prompt_tokens": _COUNT,
        "completion_tokens": _COUNT,
        "total_tokens": _COUNT,
        "prompt_tokens_details": _nullable(_obj({"cached_tokens": _COUNT})),
        "completion_tokens_details": _nullable(_obj({"reasoning_tokens": _COUNT})),
    },
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
)
_TOP_LOGPROB = _obj(
    {"token": _STR, "logprob": _NUM, "bytes": _nullable({"type": "array", "items": _INT})},
    "token",
    "logprob",
)
_TOKEN_LOGPROB = {
    **_TOP_LOGPROB,
    "properties": {
        **_TOP_LOGPROB["properties"],
        "top_logprobs": {"type": "array", "items": _TOP_LOGPROB},
    },
    "required": ["token", "logprob", "top_logprobs"],
}
_CHAT_LOGPROBS = _nullable(
    _obj(
        {
            "content": _nullable({"type": "array", "items": _TOKEN_LOGPROB}),
            "refusal": _nullable({"type": "array", "items": _TOKEN_LOGPROB}),
        }
    )
)
_TOOL_CALL = _obj(
    {
        "id": _STR,
        "type": {"const": "function"},
        "function": _obj({"name": _STR, "arguments": _STR}, "name", "arguments"),
    },
    "id",
    "type",
    "function",
)
_FINISH = _nullable(
    {"type": "string", "description": "stop, length, tool_calls, content_filter or abort"}
)
_MATCHED_STOP = {
    "anyOf": [_INT, _STR, _NULL],
    "description": "SGLang: the stop token id or string that ended the choice",
}
_CREATED = {"type": "integer", "description": "Unix seconds"}


def _openai_object(kind: str, choices: Schema, *, usage_required: bool) -> Schema:
    required = ["id", "object", "created", "model", "choices"]
    return _obj(
        {
            "id": _STR,
            "object": {"const": kind},
            "created": _CREATED,
            "model": _STR,
            "choices": {"type": "array", "items": choices},
            "usage": _nullable(ref("CompletionUsage")),
            "system_fingerprint": _nullable(_STR),
        },
        *required,
        *(["usage"] if usage_required else []),
    )


_CHAT_CHOICE = _obj(
    {
        "index": _COUNT,
        "message": _obj(
            {
                "role": {"const": "assistant"},
                "content": _nullable(_STR),
                "refusal": _nullable(_STR),
                "reasoning_content": _nullable(_STR),
                "tool_calls": {"type": "array", "items": _TOOL_CALL},
            },
            "role",
            "content",
        ),
        "logprobs": _CHAT_LOGPROBS,
        "finish_reason": _FINISH,
        "matched_stop": _MATCHED_STOP,
    },
    "index",
    "message",
    "finish_reason",
)
_CHUNK_CHOICE = _obj(
    {
        "index": _COUNT,
        "delta": _obj(
            {
                "role": {"const": "assistant"},
                "content": _nullable(_STR),
                "refusal": _nullable(_STR),
                "reasoning_content": _nullable(_STR),
                "tool_calls": {
                    "type": "array",
                    "items": _obj(
                        {
                            "index": _COUNT,
                            "id": _STR,
                            "type": {"const": "function"},
                            "function": _obj({"name": _STR, "arguments": _STR}),
                        },
                        "index",
                    ),
                },
            }
        ),
        "logprobs": _CHAT_LOGPROBS,
        "finish_reason": _FINISH,
        "matched_stop": _MATCHED_STOP,
    },
    "index",
    "delta",
)
_COMPLETION_CHOICE = _obj(
    {
        "index": _COUNT,
        "text": _STR,
        "logprobs": _nullable(
            _obj(
                {
                    "tokens": {"type": "array", "items": _STR},
                    "token_logprobs": {"type": "array", "items": _nullable(_NUM)},
                    "top_logprobs": {
                        "type": "array",
                        "items": _nullable({"type": "object", "additionalProperties": _NUM}),
                    },
                    "text_offset": {"type": "array", "items": _COUNT},
                }
            )
        ),
        "finish_reason": _FINISH,
        "matched_stop": _MATCHED_STOP,
    },
    "index",
    "text",
    "finish_reason",
)
_GENERATE_OUTPUT = _obj(
    {
        "text": _STR,
        "output_ids": {"type": "array", "items": _COUNT},
        "index": _COUNT,
        "meta_info": _obj(
            {
                "id": _STR,
                "finish_reason": _nullable(
                    _obj({"type": _STR, "matched": {"anyOf": [_INT, _STR, _NULL]}}, "type")
                ),
                "prompt_tokens": _COUNT,
                "completion_tokens": _COUNT,
                "cached_tokens": _COUNT,
                "reasoning_tokens": _COUNT,
                "e2e_latency": _NUM,
                "output_token_logprobs": {"type": "array", "items": {"type": "array"}},
            },
            "id",
            "finish_reason",
            "prompt_tokens",
            "completion_tokens",
        ),
    },
    "text",
    "meta_info",
)
_PART = _obj({"type": _STR, "text": _STR}, "type")
_ITEM = {
    "anyOf": [
        _obj(
            {
                "id": _STR,
                "type": {"const": "message"},
                "role": {"enum": ["user", "system", "developer", "assistant"]},
                "status": _STR,
                "content": {"type": "array", "items": _PART},
            },
            "id",
            "type",
            "role",
            "content",
        ),
        _obj(
            {
                "id": _STR,
                "type": {"const": "function_call"},
                "call_id": _STR,
                "name": _STR,
                "arguments": _STR,
                "status": _STR,
            },
            "id",
            "type",
            "call_id",
            "name",
            "arguments",
        ),
        _obj(
            {
                "id": _STR,
                "type": {"const": "function_call_output"},
                "call_id": _STR,
                "output": {"anyOf": [_STR, {"type": "array", "items": _PART}]},
                "status": _STR,
            },
            "id",
            "type",
            "call_id",
            "output",
        ),
        _obj(
            {
                "id": _STR,
                "type": {"const": "reasoning"},
                "summary": {"type": "array", "items": _PART},
                "content": {"type": "array", "items": _PART},
                "encrypted_content": _nullable(_STR),
                "status": _STR,
            },
            "id",
            "type",
            "summary",
        ),
    ]
}
_RESPONSE = _obj(
    {
        "id": _STR,
        "object": {"const": "response"},
        "created_at": _CREATED,
        "completed_at": _nullable(_CREATED),
        "status": {"enum": ["completed", "incomplete", "in_progress", "failed", "cancelled"]},
        "background": _BOOL,
        "error": _nullable(_obj({"code": _STR, "message": _STR}, "message")),
        "incomplete_details": _nullable(_obj({"reason": _STR})),
        "instructions": _nullable({"anyOf": [_STR, {"type": "array"}]}),
        "max_output_tokens": _nullable(_INT),
        "max_tool_calls": _nullable(_INT),
        "model": _STR,
        "output": {"type": "array", "items": ref("ResponseItem")},
        "parallel_tool_calls": _BOOL,
        "previous_response_id": _nullable(_STR),
        "conversation": _nullable(_obj({"id": _STR}, "id")),
        "reasoning": _nullable({"type": "object"}),
        "service_tier": _nullable(_STR),
        "store": _BOOL,
        "temperature": _nullable(_NUM),
        "text": {"type": "object"},
        "tool_choice": {"anyOf": [_STR, {"type": "object"}]},
        "tools": {"type": "array", "items": {"type": "object"}},
        "top_logprobs": _nullable(_INT),
        "top_p": _nullable(_NUM),
        "truncation": _nullable(_STR),
        "usage": _nullable(
            _obj(
                {
                    "input_tokens": _COUNT,
                    "input_tokens_details": _obj({"cached_tokens": _COUNT}),
                    "output_tokens": _COUNT,
                    "output_tokens_details": _obj({"reasoning_tokens": _COUNT}),
                    "total_tokens": _COUNT,
                },
                "input_tokens",
                "output_tokens",
                "total_tokens",
            )
        ),
        "user": _nullable(_STR),
        "metadata": _nullable(_STRING_MAP),
    },
    "id",
    "object",
    "created_at",
    "status",
    "model",
    "output",
)
_RESPONSE_EVENT = _obj(
    {
        "type": {"type": "string", "pattern": "^(response\\.|error$)"},
        "sequence_number": _COUNT,
        "response": ref("Response"),
        "item": ref("ResponseItem"),
        "output_index": _COUNT,
        "content_index": _COUNT,
        "item_id": _STR,
        "delta": _STR,
        "text": _STR,
    },
    "type",
    "sequence_number",
)


def _item_list(item: Schema) -> Schema:
    return _obj(
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "has_more": _BOOL,
            "first_id": _nullable(_STR),
            "last_id": _nullable(_STR),
        },
        "object",
        "data",
        "has_more",
    )


_DELETED = _obj({"id": _STR, "object": _STR, "deleted": {"const": True}}, "id", "object", "deleted")
_CONVERSATION = _obj(
    {
        "id": _STR,
        "object": {"const": "conversation"},
        "created_at": _CREATED,
        "metadata": _STRING_MAP,
    },
    "id",
    "object",
    "created_at",
    "metadata",
)
_MODEL = _obj(
    {"id": _STR, "object": {"const": "model"}, "created": _CREATED, "owned_by": _STR},
    "id",
    "object",
    "created",
    "owned_by",
)
_ANTHROPIC_USAGE = _obj(
    {
        "input_tokens": _COUNT,
        "output_tokens": _COUNT,
        "cache_creation_input_tokens": _nullable(_COUNT),
        "cache_read_input_tokens": _nullable(_COUNT),
    },
    "input_tokens",
    "output_tokens",
)
_ANTHROPIC_BLOCK = _obj(
    {
        "type": {"enum": ["text", "thinking", "redacted_thinking", "tool_use"]},
        "text": _STR,
        "thinking": _STR,
        "signature": _STR,
        "id": _STR,
        "name": _STR,
        "input": {"type": "object"},
    },
    "type",
)
_ANTHROPIC_MESSAGE = _obj(
    {
        "id": _STR,
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "model": _STR,
        "content": {"type": "array", "items": _ANTHROPIC_BLOCK},
        "stop_reason": _nullable(_STR),
        "stop_sequence": _nullable(_STR),
        "usage": _ANTHROPIC_USAGE,
    },
    "id",
    "type",
    "role",
    "model",
    "content",
    "stop_reason",
    "usage",
)
_ANTHROPIC_EVENT = _obj(
    {
        "type": {
            "enum": [
                "message_start",
                "message_delta",
                "message_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "ping",
                "error",
            ]
        },
        "message": ref("AnthropicMessage"),
        "index": _COUNT,
        "content_block": _ANTHROPIC_BLOCK,
        "delta": {"type": "object"},
        "usage": _ANTHROPIC_USAGE,
        "error": _obj({"type": _STR, "message": _STR}, "type", "message"),
    },
    "type",
)
_WORKER = _obj(
    {
        "id": _STR,
        "url": _STR,
        "model": _nullable(_STR),
        "role": {"enum": ["regular", "prefill", "decode"]},
        "state": _STR,
        "health": _STR,
        "circuit": _STR,
        "load": _NUM,
        "in_flight": _COUNT,
        "requests_total": _COUNT,
        "failures_total": _COUNT,
        "consecutive_failures": _COUNT,
        "last_error": _nullable(_STR),
        "labels": _STRING_MAP,
        "dp_size": _INT,
        "dp_ranks": {"type": "array"},
        "adapters": _nullable({"type": "array"}),
        "vetoed": _nullable(_STR),
        "kv_events": _BOOL,
    },
    "id",
    "url",
    "model",
    "role",
    "state",
    "health",
)
_OPERATION = _obj(
    {
        "model": _nullable(_STR),
        "workers": {
            "type": "array",
            "items": _obj(
                {"worker": _STR, "success": _BOOL, "message": _STR, "answered": _BOOL},
                "worker",
                "success",
            ),
        },
    },
    "model",
    "workers",
)

#: Component name → schema, for the answers below.
COMPONENTS: dict[str, Schema] = {
    "CompletionUsage": _USAGE,
    "ChatCompletion": _openai_object("chat.completion", _CHAT_CHOICE, usage_required=True),
    "ChatCompletionChunk": _openai_object(
        "chat.completion.chunk", _CHUNK_CHOICE, usage_required=False
    ),
    "Completion": _openai_object("text_completion", _COMPLETION_CHOICE, usage_required=False),
    "GenerateOutput": _GENERATE_OUTPUT,
    "GenerateAnswer": {
        "anyOf": [ref("GenerateOutput"), {"type": "array", "items": ref("GenerateOutput")}]
    },
    "Response": _RESPONSE,
    "ResponseItem": _ITEM,
    "ResponseStreamEvent": _RESPONSE_EVENT,
    "ItemList": _item_list(ref("ResponseItem")),
    "Deleted": _DELETED,
    "Conversation": _CONVERSATION,
    "Model": _MODEL,
    "ModelList": _obj(
        {"object": {"const": "list"}, "data": {"type": "array", "items": ref("Model")}},
        "object",
        "data",
    ),
    "AnthropicMessage": _ANTHROPIC_MESSAGE,
    "AnthropicStreamEvent": _ANTHROPIC_EVENT,
    "AnthropicError": _obj(
        {
            "type": {"const": "error"},
            "error": _obj({"type": _STR, "message": _STR}, "type", "message"),
        },
        "type",
        "error",
    ),
    "Status": _obj(
        {"status": _STR, "models": {"type": "array", "items": _STR}},
        "status",
    ),
    "Worker": _WORKER,
    "WorkerList": _obj(
        {
            "workers": {"type": "array", "items": ref("Worker")},
            "total": _COUNT,
            "stats": {"type": "object"},
        },
        "workers",
    ),
    "WorkerOperation": _OPERATION,
}

_TOKEN_IDS: Schema = {"type": "array", "items": _COUNT}

#: ``(path, method)`` → the schema of the route's JSON answer (2xx).
ANSWERS: dict[tuple[str, str], Schema] = {
    ("/v1/chat/completions", "post"): ref("ChatCompletion"),
    ("/v1/completions", "post"): ref("Completion"),
    ("/generate", "post"): ref("GenerateAnswer"),
    ("/v1/responses", "post"): ref("Response"),
    ("/v1/responses/{response_id}", "get"): ref("Response"),
    ("/v1/responses/{response_id}", "delete"): ref("Deleted"),
    ("/v1/responses/{response_id}/input_items", "get"): ref("ItemList"),
    ("/v1/responses/{response_id}/cancel", "post"): ref("Response"),
    ("/v1/messages", "post"): ref("AnthropicMessage"),
    ("/v1/messages/count_tokens", "post"): _obj({"input_tokens": _COUNT}, "input_tokens"),
    ("/v1/conversations", "post"): ref("Conversation"),
    ("/v1/conversations/{conversation_id}", "get"): ref("Conversation"),
    ("/v1/conversations/{conversation_id}", "post"): ref("Conversation"),
    ("/v1/conversations/{conversation_id}", "delete"): ref("Deleted"),
    ("/v1/conversations/{conversation_id}/items", "get"): ref("ItemList"),
    ("/v1/conversations/{conversation_id}/items", "post"): ref("ItemList"),
    ("/v1/conversations/{conversation_id}/items/{item_id}", "get"): ref("ResponseItem"),
    ("/v1/conversations/{conversation_id}/items/{item_id}", "delete"): ref("Conversation"),
    ("/health", "get"): ref("Status"),
    ("/liveness", "get"): ref("Status"),
    ("/readiness", "get"): ref("Status"),
    ("/health_generate", "get"): ref("Status"),
    ("/v1/models", "get"): ref("ModelList"),
    ("/v1/models/{model_id}", "get"): ref("Model"),
    ("/get_model_info", "get"): _obj(
        {
            "served_model_name": _STR,
            "is_generation": _BOOL,
            "max_context_length": _INT,
            "vocab_size": _INT,
            "model_type": _STR,
            "eos_token_ids": _TOKEN_IDS,
        }
    ),
    ("/get_server_info", "get"): _obj({"server_args": {"type": "object"}}),
    ("/v1/tokenize", "post"): _obj(
        {
            "tokens": {"anyOf": [_TOKEN_IDS, {"type": "array", "items": _TOKEN_IDS}]},
            "count": {"anyOf": [_COUNT, {"type": "array", "items": _COUNT}]},
            "max_model_len": _COUNT,
        },
        "tokens",
        "count",
    ),
    ("/v1/detokenize", "post"): _obj(
        {"text": {"anyOf": [_STR, {"type": "array", "items": _STR}]}}, "text"
    ),
    ("/parse/function_call", "post"): _obj(
        {
            "normal_text": _STR,
            "calls": {
                "type": "array",
                "items": _obj({"name": _STR, "arguments": _STR, "tool_index": _INT}, "name"),
            },
        },
        "normal_text",
        "calls",
    ),
    ("/parse/reasoning", "post"): _obj(
        {"reasoning_text": _STR, "normal_text": _STR}, "reasoning_text", "normal_text"
    ),
    ("/workers", "get"): ref("WorkerList"),
    ("/workers", "post"): ref("Worker"),
    ("/workers/{worker_id}", "get"): ref("Worker"),
    ("/workers/{worker_id}", "delete"): ref("Worker"),
    ("/admin/reload", "post"): _obj({"status": {"const": "reloaded"}}, "status"),
    ("/admin/load_lora_adapter", "post"): ref("WorkerOperation"),
    ("/admin/unload_lora_adapter", "post"): ref("WorkerOperation"),
    ("/admin/flush_cache", "post"): ref("WorkerOperation"),
    ("/admin/start_profile", "post"): ref("WorkerOperation"),
    ("/admin/stop_profile", "post"): ref("WorkerOperation"),
}

#: Path → the schema of the JSON in each ``data:`` line of the route's event stream.
STREAM_EVENTS: dict[str, Schema] = {
    "/v1/chat/completions": ref("ChatCompletionChunk"),
    "/v1/completions": ref("Completion"),
    "/generate": ref("GenerateOutput"),
    "/v1/responses": ref("ResponseStreamEvent"),
    "/v1/messages": ref("AnthropicStreamEvent"),
}


# --- what the server takes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Served:
    """What the request schemas name from the running server: the model names a client may
    send (ids and aliases), the LoRA adapters, the smallest vocabulary of the models, and
    whether a request may leave the model out (one model served, or a default model)."""

    models: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    vocab_size: int | None = None
    context_length: int | None = None
    model_optional: bool = True


def _token_id(served: Served) -> Schema:
    top = served.vocab_size - 1 if served.vocab_size else INT32_MAX
    return {"type": "integer", "minimum": 0, "maximum": top}


def _model(served: Served) -> Schema:
    if not served.models:
        return _nullable(_STR)
    names = [*served.models, *(f"{m}:{a}" for m in served.models for a in served.adapters)]
    description = "A served model (id or alias; `<model>:<adapter>` runs a LoRA adapter)"
    if not served.model_optional:
        return {"enum": names, "description": description}
    return {
        "anyOf": [{"enum": names}, _NULL],
        "description": f"{description}; null or absent: the default (or only) model",
    }


def _lora_path(served: Served) -> Schema:
    if not served.adapters:
        return {"type": "null", "description": "No LoRA adapter is loaded"}
    name: Schema = {"enum": list(served.adapters)}
    return _nullable({"anyOf": [name, {"type": "array", "items": _nullable(name), "minItems": 1}]})


def _refused(reason: str) -> Schema:
    return {"type": "null", "description": f"Not supported: {reason} (refused unless null)"}


def _logit_bias(served: Served) -> Schema:
    digits = len(str(served.vocab_size - 1)) - 1 if served.vocab_size else 9
    return _nullable(
        {
            "type": "object",
            "propertyNames": {"pattern": f"^[0-9]{{1,{max(digits, 1)}}}$"},
            "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
            "description": "Token id (a string) → bias",
        }
    )


_TEXT_PART = _obj({"type": {"const": "text"}, "text": _STR}, "type", "text", closed=True)
_CHAT_TOOL_CALLS = {"type": "array", "items": _TOOL_CALL}


def _message(roles: list[str], content: Schema, **more: Schema) -> Schema:
    return _obj(
        {"role": {"enum": roles}, "content": content, "name": _STR, **more},
        "role",
        *(["tool_call_id"] if "tool_call_id" in more else []),
        closed=True,
    )


_TEXT_CONTENT = {"anyOf": [_STR, {"type": "array", "items": _TEXT_PART, "minItems": 1}]}
_CHAT_MESSAGE: Schema = {
    "anyOf": [
        _message(["system", "developer"], _TEXT_CONTENT),
        _message(
            ["user"],
            {"anyOf": [_STR, {"type": "array", "items": _TEXT_PART}]},
        ),
        _message(
            ["assistant"],
            _nullable(_TEXT_CONTENT),
            tool_calls=_CHAT_TOOL_CALLS,
            reasoning_content=_nullable(_STR),
        ),
        _message(["tool"], _TEXT_CONTENT, tool_call_id=_STR),
    ],
    "description": "A chat message. Models that take images also take `image_url` parts "
    "in user messages (not described here: the document does not know which models do)",
}
_FUNCTION_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
_CHAT_TOOL = _obj(
    {
        "type": {"const": "function"},
        "function": _obj(
            {
                "name": _FUNCTION_NAME,
                "description": _STR,
                "parameters": _JSON_SCHEMA,
                "strict": _nullable(_BOOL),
            },
            "name",
        ),
    },
    "type",
    "function",
)
_TOOL_CHOICE = _nullable(
    {
        "anyOf": [
            {"enum": ["none", "auto", "required"]},
            _obj(
                {"type": {"const": "function"}, "function": _obj({"name": _STR}, "name")},
                "type",
                "function",
            ),
        ],
        "description": "A named function must be one of the tools",
    }
)
_RESPONSE_FORMAT = _nullable(
    {
        "anyOf": [
            _obj({"type": {"enum": ["text", "json_object"]}}, "type"),
            _obj(
                {
                    "type": {"const": "json_schema"},
                    "json_schema": _obj(
                        {
                            "name": _STR,
                            "description": _STR,
                            "schema": _JSON_SCHEMA,
                            "strict": _nullable(_BOOL),
                        },
                        "schema",
                    ),
                },
                "type",
                "json_schema",
            ),
        ]
    }
)
_TEMPLATE_KWARGS = _nullable(
    {
        "type": "object",
        "propertyNames": {"not": {"enum": sorted(RESERVED_TEMPLATE_KWARGS)}},
        "description": "Extra variables of the chat template",
    }
)
_METADATA = _nullable(
    {
        "type": "object",
        "propertyNames": {"maxLength": 64},
        "additionalProperties": {"type": "string", "maxLength": 512},
        "maxProperties": 16,
    }
)
#: ``top_logprobs`` needs ``logprobs: true``.
_TOP_LOGPROBS_NEED_LOGPROBS: Schema = {
    "if": {"properties": {"top_logprobs": {"type": "integer"}}, "required": ["top_logprobs"]},
    "then": {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]},
}


def _given(name: str, schema: Schema) -> Schema:
    """ "``name`` is given and matches ``schema``" (for the rules across fields)."""
    return {"properties": {name: schema}, "required": [name]}


_NON_EMPTY = {"type": "string", "minLength": 1}
_CONSTRAINTS = [
    _given("regex", _NON_EMPTY),
    _given("ebnf", _NON_EMPTY),
    _given("response_format", _obj({"type": {"enum": ["json_object", "json_schema"]}}, "type")),
    _given("tool_choice", {"anyOf": [{"const": "required"}, {"type": "object"}]}),
]


def _at_most_one(conditions: list[Schema]) -> list[Schema]:
    return [
        {"not": {"allOf": [a, b]}} for i, a in enumerate(conditions) for b in conditions[i + 1 :]
    ]


#: At most one output constraint: a JSON format, a regex, a grammar or a forced tool call.
_ONE_CONSTRAINT = _at_most_one(_CONSTRAINTS)
#: ``/v1/completions``: at most one of a JSON format, a regex, a grammar, a JSON schema.
_ONE_COMPLETION_CONSTRAINT = _at_most_one([*_CONSTRAINTS[:3], _given("json_schema", _NON_EMPTY)])
#: A tool choice other than none/auto needs tools.
_CHOICE_NEEDS_TOOLS: Schema = {
    "if": _given("tool_choice", {"anyOf": [{"const": "required"}, {"type": "object"}]}),
    "then": _given("tools", {"type": "array", "minItems": 1}),
}
#: Prompt logprobs are not streamed.
_NO_STREAMED_PROMPT_LOGPROBS: Schema = {
    "if": _given("stream", {"const": True}),
    "then": {"properties": {"prompt_logprobs": _NULL}},
}
#: ``continue_final_message`` continues a message with content.
_CONTINUE_WITH_CONTENT: Schema = {
    "if": _given("continue_final_message", {"const": True}),
    "then": {
        "properties": {
            "messages": {
                "items": {"required": ["content"], "properties": {"content": {"not": _NULL}}}
            }
        }
    },
}
#: ``/v1/completions``: at most 128 choices (prompts × n).
_CHOICES_WITHIN_LIMIT: list[Schema] = [
    {
        "if": _given("prompt", {"type": "array", "minItems": k, "items": {"not": _INT}}),
        "then": {"properties": {"n": {"maximum": MAX_CHOICES // k if k <= 16 else 1}}},
    }
    for k in range(2, 18)
]
#: ``/v1/completions``: ``min_tokens`` may not pass ``max_tokens`` (16 when not given).
_MIN_TOKENS_WITHIN_DEFAULT: Schema = {
    "if": {"not": {"properties": {"max_tokens": {"type": "integer"}}, "required": ["max_tokens"]}},
    "then": {"properties": {"min_tokens": _nullable({"type": "integer", "maximum": 16})}},
}


#: The largest finite float32 (workers take sampling parameters as float32).
_FLOAT32_MAX = 3.4028234663852886e38
_REGEXES = {
    "anyOf": [
        {**_NON_EMPTY, "format": "regex"},
        {"type": "array", "items": {**_NON_EMPTY, "format": "regex"}, "maxItems": 16},
        _NULL,
    ]
}


def _sampling(served: Served) -> dict[str, Schema]:
    context = served.context_length
    return {
        "temperature": _nullable({"type": "number", "minimum": 0, "maximum": _FLOAT32_MAX}),
        "stop_regex": {**_REGEXES, "description": "Regular expressions that end the output"},
        "min_tokens": _nullable(
            {
                "type": "integer",
                "minimum": 0,
                "maximum": context // 2 if context else INT32_MAX,
                "description": "At most what the prompt leaves of the context, and at most "
                "max_tokens",
            }
        ),
        "logit_bias": _logit_bias(served),
        "stop_token_ids": _nullable({"type": "array", "items": _token_id(served)}),
        "model": _model(served),
        "lora_path": _lora_path(served),
    }


def _truncate(served: Served) -> Schema:
    del served
    return _nullable(
        {"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1, "maximum": INT32_MAX}]}
    )


def _prompt(served: Served, what: str, most: int) -> Schema:
    ids = {"type": "array", "items": _token_id(served), "minItems": 1}
    return {
        "anyOf": [
            _TEXT,
            ids,
            {"type": "array", "items": {"anyOf": [_TEXT, ids]}, "minItems": 1, "maxItems": most},
        ],
        "description": f"{what}: a text, token ids, or a list of texts and token-id lists",
    }


_INPUT_TEXT = _obj({"type": {"const": "input_text"}, "text": _STR}, "type", "text")
#: ``input_image`` parts too for models that take images (not described: see the chat message).
_INPUT_PARTS = _INPUT_TEXT
_OUTPUT_PARTS = {
    "anyOf": [
        _obj({"type": {"enum": ["output_text", "input_text"]}, "text": _STR}, "type", "text"),
        _obj({"type": {"const": "refusal"}, "refusal": _STR}, "type", "refusal"),
    ]
}
_ITEM_ID = {"type": "string", "minLength": 1}


def _input_message(roles: list[str], parts: Schema) -> Schema:
    return _obj(
        {
            "type": {"const": "message"},
            "id": _ITEM_ID,
            "role": {"enum": roles},
            "content": {"anyOf": [_STR, {"type": "array", "items": parts}]},
        },
        "role",
        "content",
    )


_INPUT_ITEM: Schema = {
    "anyOf": [
        _input_message(["user", "system", "developer"], _INPUT_PARTS),
        _input_message(["assistant"], _OUTPUT_PARTS),
        _obj(
            {
                "type": {"const": "function_call"},
                "id": _ITEM_ID,
                "call_id": _TEXT,
                "name": _TEXT,
                "arguments": _STR,
            },
            "type",
            "call_id",
            "name",
            "arguments",
        ),
        _obj(
            {
                "type": {"const": "function_call_output"},
                "id": _ITEM_ID,
                "call_id": _STR,
                "output": {"anyOf": [_STR, {"type": "array", "items": _INPUT_TEXT}]},
            },
            "type",
            "call_id",
            "output",
        ),
        _obj(
            {
                "type": {"const": "reasoning"},
                "id": _ITEM_ID,
                "summary": {
                    "type": "array",
                    "items": _obj({"type": {"const": "summary_text"}, "text": _STR}, "text"),
                },
                "content": {
                    "type": "array",
                    "items": _obj({"type": {"const": "reasoning_text"}, "text": _STR}, "text"),
                },
            },
            "type",
        ),
    ],
    "description": "An input item: a message, a function call, its output, or reasoning",
}
_RESPONSES_TOOL = _obj(
    {
        "type": {"const": "function"},
        "name": _FUNCTION_NAME,
        "description": _nullable(_STR),
        "parameters": _nullable(_JSON_SCHEMA),
        "strict": _nullable(_BOOL),
    },
    "type",
    "name",
)
_NAMED_FUNCTION = _obj({"type": {"const": "function"}, "name": _STR}, "type", "name")
_RESPONSES_TOOL_CHOICE = _nullable(
    {
        "anyOf": [
            {"enum": ["none", "auto", "required"]},
            _NAMED_FUNCTION,
            _obj(
                {
                    "type": {"const": "allowed_tools"},
                    "mode": {"enum": ["auto", "required"]},
                    "tools": {"type": "array", "items": _NAMED_FUNCTION},
                },
                "type",
                "tools",
            ),
        ],
        "description": "A named function must be one of the tools",
    }
)


def request_rules(served: Served) -> dict[str, Schema]:
    """Component name → the rules to merge into that request type's schema: ``properties``
    (each replaces the type's own schema of that field) and other keywords (added)."""
    rules = _rules(served)
    if served.models and not served.model_optional:
        for rule in rules.values():
            if "model" in rule.get("properties", {}):
                rule["require"] = ["model"]
    return rules


def _rules(served: Served) -> dict[str, Schema]:
    refused_chat = {name: _refused(why) for name, why in CHAT.items()}
    refused_completions = {name: _refused(why) for name, why in COMPLETIONS.items()}
    refused_generate = {name: _refused(why) for name, why in GENERATE.items()}
    return {
        "ChatCompletionRequest": {
            "properties": {
                **_sampling(served),
                **refused_chat,
                "messages": {"type": "array", "items": _CHAT_MESSAGE, "minItems": 1},
                "tools": _nullable({"type": "array", "items": _CHAT_TOOL}),
                "tool_choice": _TOOL_CHOICE,
                "response_format": _RESPONSE_FORMAT,
                "chat_template_kwargs": _TEMPLATE_KWARGS,
                "modalities": _nullable({"type": "array", "items": {"const": "text"}}),
                "metadata": _METADATA,
                "store": _nullable(_BOOL),
                "service_tier": _nullable(_STR),
                "prompt_cache_key": _nullable(_STR),
                "prompt_cache_retention": _nullable(_STR),
                "safety_identifier": _nullable(_STR),
                "prediction": _nullable({"type": "object"}),
                "verbosity": _nullable({"enum": ["low", "medium", "high"]}),
            },
            "allOf": [
                _TOP_LOGPROBS_NEED_LOGPROBS,
                _CHOICE_NEEDS_TOOLS,
                _NO_STREAMED_PROMPT_LOGPROBS,
                _CONTINUE_WITH_CONTENT,
                *_ONE_CONSTRAINT,
            ],
        },
        "CompletionRequest": {
            "properties": {
                **_sampling(served),
                **refused_completions,
                "prompt": _prompt(served, "The prompt", MAX_CHOICES),
                "suffix": _refused("suffix"),
                "json_schema": _nullable(
                    {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": _JSON_SCHEMA,
                        "description": "A JSON schema (as JSON text) the output must match",
                    }
                ),
                "best_of": {"type": "null", "description": "Refused unless null or equal to n"},
                "response_format": _RESPONSE_FORMAT,
                "truncate_prompt_tokens": _truncate(served),
            },
            "allOf": [
                _MIN_TOKENS_WITHIN_DEFAULT,
                _NO_STREAMED_PROMPT_LOGPROBS,
                *_CHOICES_WITHIN_LIMIT,
                *_ONE_COMPLETION_CONSTRAINT,
            ],
        },
        "GenerateRequestBody": {
            "properties": {
                **refused_generate,
                "model": _model(served),
                "lora_path": _lora_path(served),
            },
        },
        "NativeSamplingParams": {"properties": {"logit_bias": _logit_bias(served)}},
        "EmbeddingRequest": {
            "properties": {
                "model": _model(served),
                "input": _prompt(served, "The input", MAX_INPUTS),
                "dimensions": {
                    "type": "null",
                    "description": "Matryoshka models only (is_matryoshka or "
                    "matryoshka_dimensions in their config.json): the length of the embeddings",
                },
                "truncate_prompt_tokens": _truncate(served),
            },
        },
        "ResponsesRequest": {
            "properties": {
                "model": _model(served),
                "input": {"anyOf": [_STR, {"type": "array", "items": _INPUT_ITEM, "minItems": 1}]},
                "conversation": _nullable({"anyOf": [_TEXT, _obj({"id": _TEXT}, "id")]}),
                "tools": _nullable({"type": "array", "items": _RESPONSES_TOOL}),
                "tool_choice": _RESPONSES_TOOL_CHOICE,
                "metadata": _METADATA,
                "truncation": _nullable({"enum": ["auto", "disabled"]}),
                "include": _nullable(
                    {
                        "type": "array",
                        "items": {"enum": [LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE]},
                    }
                ),
                "text": _nullable(
                    _obj(
                        {
                            "format": {
                                "anyOf": [
                                    _obj({"type": {"enum": ["text", "json_object"]}}, "type"),
                                    _obj(
                                        {
                                            "type": {"const": "json_schema"},
                                            "name": _STR,
                                            "schema": _JSON_SCHEMA,
                                            "strict": _nullable(_BOOL),
                                        },
                                        "type",
                                        "schema",
                                    ),
                                ]
                            },
                            "verbosity": _nullable({"const": "medium"}),
                        }
                    )
                ),
                "reasoning": _nullable(
                    _obj({"effort": _nullable(_STR), "summary": _nullable(_STR)})
                ),
                "background": {"anyOf": [_NULL, {"const": False}]},
                **{
                    name: _refused(name)
                    for name in (
                        "prompt",
                        "context_management",
                        "moderation",
                        "background_options",
                        "access_programs",
                        "prompt_cache_options",
                        "image",
                    )
                },
            },
            "allOf": [
                _CHOICE_NEEDS_TOOLS,
                {
                    "not": {
                        "allOf": [
                            _given("conversation", {"not": _NULL}),
                            _given("previous_response_id", {"not": _NULL}),
                        ]
                    }
                },
                {
                    "if": _given("top_logprobs", {"type": "integer", "minimum": 1}),
                    "then": _given(
                        "include", {"type": "array", "contains": {"const": LOGPROBS_INCLUDE}}
                    ),
                },
            ],
        },
        "MessagesRequest": {"properties": {"model": _model(served)}},
        "TokenizeRequest": {"properties": {"model": _model(served)}},
        "DetokenizeRequest": {"properties": {"model": _model(served)}},
    }
