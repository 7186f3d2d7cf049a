"""The rules of the request bodies, for the OpenAPI document.

The request types declare types and ranges, and msgspec's schema of them says as much. The
rules the server checks after decoding are added here (:func:`request_rules`): the served model
names, token ids within the vocabulary, allowed roles and tool shapes, fields refused unless
null, and the rules across fields that JSON Schema can state (``if``/``then``, ``not``). So a
body the document admits is a body the server takes, but for what no JSON schema can say
(unique tool names, a named tool among the tools, ids of kept objects).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.embeddings.request import MAX_INPUTS
from turnout.generation.plan_checks import MAX_CHOICES
from turnout.generation.requests import INT32_MAX, RESERVED_TEMPLATE_KWARGS
from turnout.generation.unsupported import CHAT, COMPLETIONS, GENERATE
from turnout.responses.request import LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE
from turnout.server.openapi_schemas import (
    BOOL,
    INT,
    JSON_SCHEMA,
    NULL,
    STR,
    TEXT,
    TOOL_CALL,
    Schema,
    nullable,
    obj,
)


@dataclass(frozen=True, slots=True)
class Served:
    """What the request schemas name from the running server: the model names a client may
    send (ids and aliases), the LoRA adapters, the smallest vocabulary and context of the
    models, and whether a request may leave the model out (one model served, or a default
    model)."""

    models: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    #: ``<model>:<adapter>`` of each model's adapters.
    with_adapters: tuple[str, ...] = ()
    vocab_size: int | None = None
    context_length: int | None = None
    model_optional: bool = True


def _token_id(served: Served) -> Schema:
    top = served.vocab_size - 1 if served.vocab_size else INT32_MAX
    return {"type": "integer", "minimum": 0, "maximum": top}


def _model(served: Served) -> Schema:
    if not served.models:
        return nullable(STR)
    names = [*served.models, *served.with_adapters]
    description = "A served model (id or alias; `<model>:<adapter>` runs a LoRA adapter)"
    if not served.model_optional:
        return {"enum": names, "description": description}
    return {
        "anyOf": [{"enum": names}, NULL],
        "description": f"{description}; null or absent: the default (or only) model",
    }


def _lora_path(served: Served) -> Schema:
    if not served.adapters:
        return {"type": "null", "description": "No LoRA adapter is loaded"}
    name: Schema = {"enum": list(served.adapters)}
    return nullable({"anyOf": [name, {"type": "array", "items": nullable(name), "minItems": 1}]})


def _refused(reason: str) -> Schema:
    return {"type": "null", "description": f"Not supported: {reason} (refused unless null)"}


def _logit_bias(served: Served) -> Schema:
    digits = len(str(served.vocab_size - 1)) - 1 if served.vocab_size else 9
    return nullable(
        {
            "type": "object",
            "propertyNames": {"pattern": f"^[0-9]{{1,{max(digits, 1)}}}$"},
            "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
            "description": "Token id (a string) → bias",
        }
    )


_TEXT_PART = obj({"type": {"const": "text"}, "text": STR}, "type", "text")
_CHAT_TOOL_CALLS = {"type": "array", "items": TOOL_CALL}


def _message(roles: list[str], content: Schema, **more: Schema) -> Schema:
    """A message of ``roles`` (other keys are ignored, as clients echo OpenAI's ``refusal``
    or ``annotations``; the fields a message type has are typed)."""
    fields: dict[str, Schema] = {
        "tool_calls": NULL,
        "tool_call_id": nullable(STR),
        "reasoning_content": nullable(STR),
        **more,
    }
    return obj(
        {"role": {"enum": roles}, "content": content, "name": nullable(STR), **fields},
        "role",
        *(["tool_call_id"] if more.get("tool_call_id") == STR else []),
    )


_TEXT_CONTENT = {"anyOf": [STR, {"type": "array", "items": _TEXT_PART, "minItems": 1}]}
_CHAT_MESSAGE: Schema = {
    "anyOf": [
        _message(["system", "developer"], _TEXT_CONTENT),
        _message(
            ["user"],
            {"anyOf": [STR, {"type": "array", "items": _TEXT_PART}]},
        ),
        _message(
            ["assistant"],
            nullable(_TEXT_CONTENT),
            tool_calls=_CHAT_TOOL_CALLS,
            reasoning_content=nullable(STR),
        ),
        _message(["tool"], _TEXT_CONTENT, tool_call_id=STR),
    ],
    "description": "A chat message. Models that take images also take `image_url` parts "
    "in user messages (not described here: the document does not know which models do)",
}
_FUNCTION_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
_CHAT_TOOL = obj(
    {
        "type": {"const": "function"},
        "function": obj(
            {
                "name": _FUNCTION_NAME,
                "description": STR,
                "parameters": JSON_SCHEMA,
                "strict": nullable(BOOL),
            },
            "name",
        ),
    },
    "type",
    "function",
)
_TOOL_CHOICE = nullable(
    {
        "anyOf": [
            {"enum": ["none", "auto", "required"]},
            obj(
                {"type": {"const": "function"}, "function": obj({"name": TEXT}, "name")},
                "type",
                "function",
            ),
        ],
        "description": "A named function must be one of the tools",
    }
)
_RESPONSE_FORMAT = nullable(
    {
        "anyOf": [
            obj({"type": {"enum": ["text", "json_object"]}}, "type"),
            obj(
                {
                    "type": {"const": "json_schema"},
                    "json_schema": obj(
                        {
                            "name": STR,
                            "description": STR,
                            "schema": JSON_SCHEMA,
                            "strict": nullable(BOOL),
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
_TEMPLATE_KWARGS = nullable(
    {
        "type": "object",
        "propertyNames": {"not": {"enum": sorted(RESERVED_TEMPLATE_KWARGS)}},
        "description": "Extra variables of the chat template",
    }
)
_METADATA = nullable(
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
    _given("response_format", obj({"type": {"enum": ["json_object", "json_schema"]}}, "type")),
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
    "then": {"properties": {"prompt_logprobs": NULL}},
}
#: ``continue_final_message`` continues a message with content.
_CONTINUE_WITH_CONTENT: Schema = {
    "if": _given("continue_final_message", {"const": True}),
    "then": {
        "properties": {
            "messages": {
                "items": {"required": ["content"], "properties": {"content": {"not": NULL}}}
            }
        }
    },
}
#: ``/v1/completions``: at most 128 choices (prompts × n).
_CHOICES_WITHIN_LIMIT: list[Schema] = [
    {
        "if": _given("prompt", {"type": "array", "minItems": k, "items": {"not": INT}}),
        "then": {"properties": {"n": {"maximum": MAX_CHOICES // k if k <= 16 else 1}}},
    }
    for k in range(2, 18)
]


#: ``/generate``: at most 128 choices (prompts of a batch × ``sampling_params.n``).
_GENERATE_CHOICES_WITHIN_LIMIT: list[Schema] = [
    {
        "if": {
            "anyOf": [
                _given("text", {"type": "array", "minItems": k}),
                _given("input_ids", {"type": "array", "minItems": k, "items": {"type": "array"}}),
            ]
        },
        "then": {
            "properties": {
                "sampling_params": {
                    "properties": {"n": {"maximum": MAX_CHOICES // k if k <= 16 else 1}}
                }
            }
        },
    }
    for k in range(2, 18)
]


def _within_default(most: str, least: str, default: int) -> Schema:
    """``least`` may not pass ``most``'s default when ``most`` is not given."""
    return {
        "if": {"not": _given(most, INT)},
        "then": {"properties": {least: nullable({"type": "integer", "maximum": default})}},
    }


#: ``/v1/completions``: ``min_tokens`` may not pass ``max_tokens`` (16 when not given).
_MIN_TOKENS_WITHIN_DEFAULT = _within_default("max_tokens", "min_tokens", 16)


#: The largest finite float32 (workers take sampling parameters as float32).
_FLOAT32_MAX = 3.4028234663852886e38
_REGEXES = {
    "anyOf": [
        {**_NON_EMPTY, "format": "regex"},
        {"type": "array", "items": {**_NON_EMPTY, "format": "regex"}, "maxItems": 16},
        NULL,
    ]
}


#: -1 (off) or at least 1, as SGLang takes it (0 is refused).
_TOP_K = nullable(
    {
        "anyOf": [{"const": -1}, {"type": "integer", "minimum": 1, "maximum": INT32_MAX}],
        "description": "-1 (off) or at least 1",
    }
)


def _sampling(served: Served, min_tokens: str = "min_tokens") -> dict[str, Schema]:
    """The sampling fields' rules (``min_tokens``: that field's name)."""
    context = served.context_length
    return {
        "temperature": nullable({"type": "number", "minimum": 0, "maximum": _FLOAT32_MAX}),
        "top_k": _TOP_K,
        "stop_regex": {**_REGEXES, "description": "Regular expressions that end the output"},
        min_tokens: nullable(
            {
                "type": "integer",
                "minimum": 0,
                "maximum": context // 2 if context else INT32_MAX,
                "description": "At most what the prompt leaves of the context, and at most "
                "the most tokens asked for",
            }
        ),
        "logit_bias": _logit_bias(served),
        "stop_token_ids": nullable({"type": "array", "items": _token_id(served)}),
    }


def _names(served: Served) -> dict[str, Schema]:
    """The rules of ``model`` and ``lora_path``."""
    return {"model": _model(served), "lora_path": _lora_path(served)}


#: Structural tag formats (xgrammar's), two levels deep: constant text, a JSON value, a tag
#: around either, or a sequence or choice of them.
_TAG_LEAF = {
    "anyOf": [
        obj({"type": {"const": "const_string"}, "value": STR}, "type", "value"),
        obj({"type": {"const": "json_schema"}, "json_schema": JSON_SCHEMA}, "type", "json_schema"),
    ]
}
_TAG = obj(
    {"type": {"const": "tag"}, "begin": STR, "content": _TAG_LEAF, "end": STR},
    "type",
    "begin",
    "content",
    "end",
)
_TAG_FORMAT = {
    "anyOf": [
        *_TAG_LEAF["anyOf"],
        _TAG,
        obj(
            {
                "type": {"enum": ["sequence", "or"]},
                "elements": {"type": "array", "items": {"anyOf": [_TAG_LEAF, _TAG]}, "minItems": 1},
            },
            "type",
            "elements",
        ),
    ]
}
_STRUCTURAL_TAG = obj({"type": {"const": "structural_tag"}, "format": _TAG_FORMAT}, "format")


def _generate_rules(served: Served) -> dict[str, Schema]:
    ids = {"type": "array", "items": _token_id(served), "minItems": 1}
    batch = {"minItems": 1, "maxItems": MAX_CHOICES}
    text = {"anyOf": [TEXT, {"type": "array", "items": TEXT, **batch}]}
    return {
        "GenerateRequestBody": {
            "properties": {
                **{name: _refused(why) for name, why in GENERATE.items()},
                **_names(served),
                "text": nullable(text),
                "input_ids": nullable({"anyOf": [ids, {"type": "array", "items": ids, **batch}]}),
                "logprob_start_len": {
                    "const": -1,
                    "description": "Only -1: prompt logprobs are not returned by /generate",
                },
            },
            "allOf": [
                # Exactly one of text and input_ids.
                {"anyOf": [_given("text", {"not": NULL}), _given("input_ids", {"not": NULL})]},
                {
                    "not": {
                        "allOf": [
                            _given("text", {"not": NULL}),
                            _given("input_ids", {"not": NULL}),
                        ]
                    }
                },
                {
                    "if": _given("token_ids_logprob", {"type": "array", "minItems": 1}),
                    "then": _given("return_logprob", {"const": True}),
                },
                *_GENERATE_CHOICES_WITHIN_LIMIT,
            ],
        },
        "NativeSamplingParams": {
            "properties": {
                **_sampling(served, "min_new_tokens"),
                "json_schema": nullable(
                    {
                        "anyOf": [
                            {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": JSON_SCHEMA,
                            },
                            JSON_SCHEMA,
                        ],
                        "description": "A JSON schema (or its JSON text) the output must match",
                    }
                ),
                "structural_tag": nullable(
                    {
                        "anyOf": [
                            {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": _STRUCTURAL_TAG,
                            },
                            _STRUCTURAL_TAG,
                        ],
                        "description": "An xgrammar structural tag (or its JSON text)",
                    }
                ),
            },
            "allOf": [
                _within_default("max_new_tokens", "min_new_tokens", 128),
                *_at_most_one(
                    [
                        _given("regex", _NON_EMPTY),
                        _given("ebnf", _NON_EMPTY),
                        _given("json_schema", {"not": NULL}),
                        _given("structural_tag", {"not": NULL}),
                    ]
                ),
            ],
        },
    }


def _truncate(served: Served) -> Schema:
    del served
    return nullable(
        {"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1, "maximum": INT32_MAX}]}
    )


def _prompt(served: Served, what: str, most: int) -> Schema:
    ids = {"type": "array", "items": _token_id(served), "minItems": 1}
    return {
        "anyOf": [
            TEXT,
            ids,
            {"type": "array", "items": {"anyOf": [TEXT, ids]}, "minItems": 1, "maxItems": most},
        ],
        "description": f"{what}: a text, token ids, or a list of texts and token-id lists",
    }


_INPUT_TEXT = obj({"type": {"const": "input_text"}, "text": STR}, "type", "text")
#: ``input_image`` parts too for models that take images (not described: see the chat message).
_INPUT_PARTS = _INPUT_TEXT
_OUTPUT_PARTS = {
    "anyOf": [
        obj({"type": {"enum": ["output_text", "input_text"]}, "text": STR}, "type", "text"),
        obj({"type": {"const": "refusal"}, "refusal": STR}, "type", "refusal"),
    ]
}
_ITEM_ID = {"type": "string", "minLength": 1}


def _input_message(roles: list[str], parts: Schema) -> Schema:
    return obj(
        {
            "type": {"const": "message"},
            "id": _ITEM_ID,
            "role": {"enum": roles},
            "content": {"anyOf": [STR, {"type": "array", "items": parts}]},
        },
        "role",
        "content",
    )


_INPUT_ITEM: Schema = {
    "anyOf": [
        _input_message(["user", "system", "developer"], _INPUT_PARTS),
        _input_message(["assistant"], _OUTPUT_PARTS),
        obj(
            {
                "type": {"const": "function_call"},
                "id": _ITEM_ID,
                "call_id": TEXT,
                "name": TEXT,
                "arguments": STR,
            },
            "type",
            "call_id",
            "name",
            "arguments",
        ),
        obj(
            {
                "type": {"const": "function_call_output"},
                "id": _ITEM_ID,
                "call_id": STR,
                "output": {"anyOf": [STR, {"type": "array", "items": _INPUT_TEXT}]},
            },
            "type",
            "call_id",
            "output",
        ),
        obj(
            {
                "type": {"const": "reasoning"},
                "id": _ITEM_ID,
                "summary": {
                    "type": "array",
                    "items": obj({"type": {"const": "summary_text"}, "text": STR}, "text"),
                },
                "content": {
                    "type": "array",
                    "items": obj({"type": {"const": "reasoning_text"}, "text": STR}, "text"),
                },
            },
            "type",
        ),
    ],
    "description": "An input item: a message, a function call, its output, or reasoning",
}
_RESPONSES_TOOL = obj(
    {
        "type": {"const": "function"},
        "name": _FUNCTION_NAME,
        "description": nullable(STR),
        "parameters": nullable(JSON_SCHEMA),
        "strict": nullable(BOOL),
    },
    "type",
    "name",
)
_NAMED_FUNCTION = obj({"type": {"const": "function"}, "name": TEXT}, "type", "name")
_RESPONSES_TOOL_CHOICE = nullable(
    {
        "anyOf": [
            {"enum": ["none", "auto", "required"]},
            _NAMED_FUNCTION,
            obj(
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


_ANTHROPIC_TEXT = obj({"type": {"const": "text"}, "text": STR}, "type", "text", closed=True)
_ANTHROPIC_CONTENT = {"anyOf": [STR, {"type": "array", "items": _ANTHROPIC_TEXT}]}
_ANTHROPIC_MESSAGE = obj(
    {"role": {"enum": ["user", "assistant"]}, "content": _ANTHROPIC_CONTENT},
    "role",
    "content",
    closed=True,
)
_ANTHROPIC_TOOL = obj(
    {
        "type": {"const": "custom"},
        "name": _FUNCTION_NAME,
        "description": STR,
        "input_schema": JSON_SCHEMA,
        "strict": BOOL,
    },
    "name",
    "input_schema",
    closed=True,
)
_NO_PARALLEL = {"disable_parallel_tool_use": BOOL}
_ANTHROPIC_TOOL_CHOICE = nullable(
    {
        "anyOf": [
            obj({"type": {"enum": ["auto", "any", "none"]}, **_NO_PARALLEL}, "type", closed=True),
            obj(
                {"type": {"const": "tool"}, "name": TEXT, **_NO_PARALLEL},
                "type",
                "name",
                closed=True,
            ),
        ],
        "description": "A named tool must be one of the tools",
    }
)
_DISPLAY = {"enum": ["summarized", "omitted"]}
_THINKING = nullable(
    {
        "anyOf": [
            obj(
                {"type": {"const": "enabled"}, "budget_tokens": INT, "display": _DISPLAY},
                "type",
                "budget_tokens",
                closed=True,
            ),
            obj(
                {"type": {"enum": ["disabled", "adaptive"]}, "display": _DISPLAY},
                "type",
                closed=True,
            ),
        ]
    }
)
_OUTPUT_CONFIG = nullable(
    obj(
        {
            "effort": nullable(STR),
            "format": obj(
                {"type": {"const": "json_schema"}, "schema": JSON_SCHEMA}, "type", "schema"
            ),
        },
        closed=True,
    )
)
_CONTEXT_MANAGEMENT = nullable(
    obj(
        {
            "edits": nullable(
                {
                    "type": "array",
                    "items": obj({"type": {"const": "clear_thinking_20251015"}}, "type"),
                }
            )
        },
        closed=True,
    )
)
#: ``tool_choice`` ``any`` or ``tool`` needs tools.
_ANTHROPIC_CHOICE_NEEDS_TOOLS: Schema = {
    "if": _given("tool_choice", obj({"type": {"enum": ["any", "tool"]}}, "type")),
    "then": _given("tools", {"type": "array", "minItems": 1}),
}


def _anthropic_rules(served: Served) -> dict[str, Schema]:
    common: dict[str, Schema] = {
        "model": _model(served),
        "messages": {"type": "array", "items": _ANTHROPIC_MESSAGE, "minItems": 1},
        "system": nullable(_ANTHROPIC_CONTENT),
        "tools": nullable({"type": "array", "items": _ANTHROPIC_TOOL}),
        "tool_choice": _ANTHROPIC_TOOL_CHOICE,
        "thinking": _THINKING,
        "output_config": _OUTPUT_CONFIG,
        "context_management": _CONTEXT_MANAGEMENT,
        "mcp_servers": _refused("turnout connects to no MCP servers: give the tools as tools"),
    }
    return {
        "MessagesRequest": {
            "properties": {
                **common,
                "top_k": _TOP_K,
                "container": _refused("turnout runs no code containers"),
                "service_tier": nullable({"enum": ["auto", "standard_only"]}),
                "stop_sequences": nullable({"type": "array", "items": _NON_EMPTY}),
            },
            "allOf": [_ANTHROPIC_CHOICE_NEEDS_TOOLS],
        },
        "CountTokensRequest": {
            "properties": common,
            "allOf": [_ANTHROPIC_CHOICE_NEEDS_TOOLS],
        },
    }


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
    return {
        "ChatCompletionRequest": {
            "properties": {
                **_sampling(served),
                **_names(served),
                **refused_chat,
                "messages": {"type": "array", "items": _CHAT_MESSAGE, "minItems": 1},
                "tools": nullable({"type": "array", "items": _CHAT_TOOL}),
                "tool_choice": _TOOL_CHOICE,
                "response_format": _RESPONSE_FORMAT,
                "chat_template_kwargs": _TEMPLATE_KWARGS,
                "modalities": nullable({"type": "array", "items": {"const": "text"}}),
                "metadata": _METADATA,
                "store": nullable(BOOL),
                "service_tier": nullable(STR),
                "prompt_cache_key": nullable(STR),
                "prompt_cache_retention": nullable(STR),
                "safety_identifier": nullable(STR),
                "prediction": nullable({"type": "object"}),
                "verbosity": nullable({"enum": ["low", "medium", "high"]}),
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
                **_names(served),
                **refused_completions,
                "prompt": _prompt(served, "The prompt", MAX_CHOICES),
                "suffix": _refused("suffix"),
                "json_schema": nullable(
                    {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": JSON_SCHEMA,
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
        **_generate_rules(served),
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
                "top_k": _TOP_K,
                "input": {"anyOf": [STR, {"type": "array", "items": _INPUT_ITEM, "minItems": 1}]},
                "conversation": nullable({"anyOf": [TEXT, obj({"id": TEXT}, "id")]}),
                "tools": nullable({"type": "array", "items": _RESPONSES_TOOL}),
                "tool_choice": _RESPONSES_TOOL_CHOICE,
                "metadata": _METADATA,
                "truncation": nullable({"enum": ["auto", "disabled"]}),
                "include": nullable(
                    {
                        "type": "array",
                        "items": {"enum": [LOGPROBS_INCLUDE, SEALED_REASONING_INCLUDE]},
                    }
                ),
                "text": nullable(
                    obj(
                        {
                            "format": {
                                "anyOf": [
                                    obj({"type": {"enum": ["text", "json_object"]}}, "type"),
                                    obj(
                                        {
                                            "type": {"const": "json_schema"},
                                            "name": STR,
                                            "schema": JSON_SCHEMA,
                                            "strict": nullable(BOOL),
                                        },
                                        "type",
                                        "schema",
                                    ),
                                ]
                            },
                            "verbosity": nullable({"const": "medium"}),
                        }
                    )
                ),
                "reasoning": nullable(obj({"effort": nullable(STR), "summary": nullable(STR)})),
                "background": {"anyOf": [NULL, {"const": False}]},
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
                            _given("conversation", {"not": NULL}),
                            _given("previous_response_id", {"not": NULL}),
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
        **_anthropic_rules(served),
        "TokenizeRequest": {
            "properties": {
                "model": _model(served),
                "messages": nullable({"type": "array", "items": _CHAT_MESSAGE, "minItems": 1}),
            },
            "allOf": [
                {"anyOf": [_given(name, {"not": NULL}) for name in ("prompt", "text", "messages")]},
                *_at_most_one(
                    [_given(name, {"not": NULL}) for name in ("prompt", "text", "messages")]
                ),
            ],
        },
        "DetokenizeRequest": {"properties": {"model": _model(served)}},
    }
