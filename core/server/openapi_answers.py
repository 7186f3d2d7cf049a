"""The schemas of the router's answers, for the OpenAPI document.

Most routes build their answers as JSON directly (no typed structure to derive a schema from):
their schemas are written here once, in the shapes the router writes them (OpenAI's, SGLang's
and Anthropic's). Objects stay open (turnout adds fields such as ``matched_stop``); what is
always there is required.
"""

from __future__ import annotations

from turnout.server.openapi_schemas import (
    BOOL,
    COUNT,
    INT,
    NULL,
    NUM,
    STR,
    STRING_MAP,
    TOOL_CALL,
    Schema,
    nullable,
    obj,
    ref,
)

_USAGE = obj(
    {
        "prompt_tokens": COUNT,
        "completion_tokens": COUNT,
        "total_tokens": COUNT,
        "prompt_tokens_details": nullable(obj({"cached_tokens": COUNT})),
        "completion_tokens_details": nullable(obj({"reasoning_tokens": COUNT})),
    },
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
)
_TOP_LOGPROB = obj(
    {"token": STR, "logprob": NUM, "bytes": nullable({"type": "array", "items": INT})},
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
_CHAT_LOGPROBS = nullable(
    obj(
        {
            "content": nullable({"type": "array", "items": _TOKEN_LOGPROB}),
            "refusal": nullable({"type": "array", "items": _TOKEN_LOGPROB}),
        }
    )
)
_FINISH = nullable(
    {"type": "string", "description": "stop, length, tool_calls, content_filter or abort"}
)
_MATCHED_STOP = {
    "anyOf": [INT, STR, NULL],
    "description": "SGLang: the stop token id or string that ended the choice",
}
_CREATED = {"type": "integer", "description": "Unix seconds"}


def _openai_object(kind: str, choices: Schema, *, usage_required: bool) -> Schema:
    required = ["id", "object", "created", "model", "choices"]
    return obj(
        {
            "id": STR,
            "object": {"const": kind},
            "created": _CREATED,
            "model": STR,
            "choices": {"type": "array", "items": choices},
            "usage": nullable(ref("CompletionUsage")),
            "system_fingerprint": nullable(STR),
        },
        *required,
        *(["usage"] if usage_required else []),
    )


_CHAT_CHOICE = obj(
    {
        "index": COUNT,
        "message": obj(
            {
                "role": {"const": "assistant"},
                "content": nullable(STR),
                "refusal": nullable(STR),
                "reasoning_content": nullable(STR),
                "tool_calls": {"type": "array", "items": TOOL_CALL},
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
_CHUNK_CHOICE = obj(
    {
        "index": COUNT,
        "delta": obj(
            {
                "role": {"const": "assistant"},
                "content": nullable(STR),
                "refusal": nullable(STR),
                "reasoning_content": nullable(STR),
                "tool_calls": {
                    "type": "array",
                    "items": obj(
                        {
                            "index": COUNT,
                            "id": STR,
                            "type": {"const": "function"},
                            "function": obj({"name": STR, "arguments": STR}),
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
_COMPLETION_CHOICE = obj(
    {
        "index": COUNT,
        "text": STR,
        "logprobs": nullable(
            obj(
                {
                    "tokens": {"type": "array", "items": STR},
                    "token_logprobs": {"type": "array", "items": nullable(NUM)},
                    "top_logprobs": {
                        "type": "array",
                        "items": nullable({"type": "object", "additionalProperties": NUM}),
                    },
                    "text_offset": {"type": "array", "items": COUNT},
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
_GENERATE_OUTPUT = obj(
    {
        "text": STR,
        "output_ids": {"type": "array", "items": COUNT},
        "index": COUNT,
        "meta_info": obj(
            {
                "id": STR,
                "finish_reason": nullable(
                    obj({"type": STR, "matched": {"anyOf": [INT, STR, NULL]}}, "type")
                ),
                "prompt_tokens": COUNT,
                "completion_tokens": COUNT,
                "cached_tokens": COUNT,
                "reasoning_tokens": COUNT,
                "e2e_latency": NUM,
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
_PART = obj({"type": STR, "text": STR}, "type")
_ITEM = {
    "anyOf": [
        obj(
            {
                "id": STR,
                "type": {"const": "message"},
                "role": {"enum": ["user", "system", "developer", "assistant"]},
                "status": STR,
                "content": {"type": "array", "items": _PART},
            },
            "id",
            "type",
            "role",
            "content",
        ),
        obj(
            {
                "id": STR,
                "type": {"const": "function_call"},
                "call_id": STR,
                "name": STR,
                "arguments": STR,
                "status": STR,
            },
            "id",
            "type",
            "call_id",
            "name",
            "arguments",
        ),
        obj(
            {
                "id": STR,
                "type": {"const": "function_call_output"},
                "call_id": STR,
                "output": {"anyOf": [STR, {"type": "array", "items": _PART}]},
                "status": STR,
            },
            "id",
            "type",
            "call_id",
            "output",
        ),
        obj(
            {
                "id": STR,
                "type": {"const": "reasoning"},
                "summary": {"type": "array", "items": _PART},
                "content": {"type": "array", "items": _PART},
                "encrypted_content": nullable(STR),
                "status": STR,
            },
            "id",
            "type",
            "summary",
        ),
    ]
}
_RESPONSE = obj(
    {
        "id": STR,
        "object": {"const": "response"},
        "created_at": _CREATED,
        "completed_at": nullable(_CREATED),
        "status": {"enum": ["completed", "incomplete", "in_progress", "failed", "cancelled"]},
        "background": BOOL,
        "error": nullable(obj({"code": STR, "message": STR}, "message")),
        "incomplete_details": nullable(obj({"reason": STR})),
        "instructions": nullable({"anyOf": [STR, {"type": "array"}]}),
        "max_output_tokens": nullable(INT),
        "max_tool_calls": nullable(INT),
        "model": STR,
        "output": {"type": "array", "items": ref("ResponseItem")},
        "parallel_tool_calls": BOOL,
        "previous_response_id": nullable(STR),
        "conversation": nullable(obj({"id": STR}, "id")),
        "reasoning": nullable({"type": "object"}),
        "service_tier": nullable(STR),
        "store": BOOL,
        "temperature": nullable(NUM),
        "text": {"type": "object"},
        "tool_choice": {"anyOf": [STR, {"type": "object"}]},
        "tools": {"type": "array", "items": {"type": "object"}},
        "top_logprobs": nullable(INT),
        "top_p": nullable(NUM),
        "truncation": nullable(STR),
        "usage": nullable(
            obj(
                {
                    "input_tokens": COUNT,
                    "input_tokens_details": obj({"cached_tokens": COUNT}),
                    "output_tokens": COUNT,
                    "output_tokens_details": obj({"reasoning_tokens": COUNT}),
                    "total_tokens": COUNT,
                },
                "input_tokens",
                "output_tokens",
                "total_tokens",
            )
        ),
        "user": nullable(STR),
        "metadata": nullable(STRING_MAP),
    },
    "id",
    "object",
    "created_at",
    "status",
    "model",
    "output",
)
_RESPONSE_EVENT = obj(
    {
        "type": {"type": "string", "pattern": "^(response\\.|error$)"},
        "sequence_number": COUNT,
        "response": ref("Response"),
        "item": ref("ResponseItem"),
        "output_index": COUNT,
        "content_index": COUNT,
        "item_id": STR,
        "delta": STR,
        "text": STR,
    },
    "type",
    "sequence_number",
)


def _item_list(item: Schema) -> Schema:
    return obj(
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "has_more": BOOL,
            "first_id": nullable(STR),
            "last_id": nullable(STR),
        },
        "object",
        "data",
        "has_more",
    )


_DELETED = obj({"id": STR, "object": STR, "deleted": {"const": True}}, "id", "object", "deleted")
_CONVERSATION = obj(
    {
        "id": STR,
        "object": {"const": "conversation"},
        "created_at": _CREATED,
        "metadata": STRING_MAP,
    },
    "id",
    "object",
    "created_at",
    "metadata",
)
_MODEL = obj(
    {"id": STR, "object": {"const": "model"}, "created": _CREATED, "owned_by": STR},
    "id",
    "object",
    "created",
    "owned_by",
)
_ANTHROPIC_USAGE = obj(
    {
        "input_tokens": COUNT,
        "output_tokens": COUNT,
        "cache_creation_input_tokens": nullable(COUNT),
        "cache_read_input_tokens": nullable(COUNT),
    },
    "input_tokens",
    "output_tokens",
)
_ANTHROPIC_BLOCK = obj(
    {
        "type": {"enum": ["text", "thinking", "redacted_thinking", "tool_use"]},
        "text": STR,
        "thinking": STR,
        "signature": STR,
        "id": STR,
        "name": STR,
        "input": {"type": "object"},
    },
    "type",
)
_ANTHROPIC_MESSAGE = obj(
    {
        "id": STR,
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "model": STR,
        "content": {"type": "array", "items": _ANTHROPIC_BLOCK},
        "stop_reason": nullable(STR),
        "stop_sequence": nullable(STR),
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
_ANTHROPIC_EVENT = obj(
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
        "index": COUNT,
        "content_block": _ANTHROPIC_BLOCK,
        "delta": {"type": "object"},
        "usage": _ANTHROPIC_USAGE,
        "error": obj({"type": STR, "message": STR}, "type", "message"),
    },
    "type",
)
_WORKER = obj(
    {
        "id": STR,
        "url": STR,
        "model": nullable(STR),
        "role": {"enum": ["regular", "prefill", "decode"]},
        "state": STR,
        "health": STR,
        "circuit": STR,
        "load": NUM,
        "in_flight": COUNT,
        "requests_total": COUNT,
        "failures_total": COUNT,
        "consecutive_failures": COUNT,
        "last_error": nullable(STR),
        "labels": STRING_MAP,
        "dp_size": INT,
        "dp_ranks": {"type": "array"},
        "adapters": nullable({"type": "array"}),
        "vetoed": nullable(STR),
        "kv_events": BOOL,
    },
    "id",
    "url",
    "model",
    "role",
    "state",
    "health",
)
_OPERATION = obj(
    {
        "model": nullable(STR),
        "workers": {
            "type": "array",
            "items": obj(
                {"worker": STR, "success": BOOL, "message": STR, "answered": BOOL},
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
    "ModelList": obj(
        {"object": {"const": "list"}, "data": {"type": "array", "items": ref("Model")}},
        "object",
        "data",
    ),
    "AnthropicMessage": _ANTHROPIC_MESSAGE,
    "AnthropicStreamEvent": _ANTHROPIC_EVENT,
    "AnthropicError": obj(
        {
            "type": {"const": "error"},
            "error": obj({"type": STR, "message": STR}, "type", "message"),
        },
        "type",
        "error",
    ),
    "Status": obj(
        {"status": STR, "models": {"type": "array", "items": STR}},
        "status",
    ),
    "Worker": _WORKER,
    "WorkerList": obj(
        {
            "workers": {"type": "array", "items": ref("Worker")},
            "total": COUNT,
            "stats": {"type": "object"},
        },
        "workers",
    ),
    "WorkerOperation": _OPERATION,
}

_TOKEN_IDS: Schema = {"type": "array", "items": COUNT}

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
    ("/v1/messages/count_tokens", "post"): obj({"input_tokens": COUNT}, "input_tokens"),
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
    ("/get_model_info", "get"): obj(
        {
            "served_model_name": STR,
            "is_generation": BOOL,
            "max_context_length": INT,
            "vocab_size": INT,
            "model_type": STR,
            "eos_token_ids": _TOKEN_IDS,
        }
    ),
    ("/get_server_info", "get"): obj({"server_args": {"type": "object"}}),
    ("/v1/tokenize", "post"): obj(
        {
            "tokens": {"anyOf": [_TOKEN_IDS, {"type": "array", "items": _TOKEN_IDS}]},
            "count": {"anyOf": [COUNT, {"type": "array", "items": COUNT}]},
            "max_model_len": COUNT,
        },
        "tokens",
        "count",
    ),
    ("/v1/detokenize", "post"): obj(
        {"text": {"anyOf": [STR, {"type": "array", "items": STR}]}}, "text"
    ),
    ("/parse/function_call", "post"): obj(
        {
            "normal_text": STR,
            "calls": {
                "type": "array",
                "items": obj({"name": STR, "arguments": STR, "tool_index": INT}, "name"),
            },
        },
        "normal_text",
        "calls",
    ),
    ("/parse/reasoning", "post"): obj(
        {"reasoning_text": STR, "normal_text": STR}, "reasoning_text", "normal_text"
    ),
    ("/workers", "get"): ref("WorkerList"),
    ("/workers", "post"): ref("Worker"),
    ("/workers/{worker_id}", "get"): ref("Worker"),
    ("/workers/{worker_id}", "delete"): ref("Worker"),
    ("/admin/reload", "post"): obj({"status": {"const": "reloaded"}}, "status"),
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
