"""Request types of the generation endpoints (OpenAI's and SGLang's), validated by msgspec.

Every range a request field must respect is declared on the field (``msgspec.Meta``) or, for
rules that span fields, in the type's ``__post_init__``, so decoding alone answers a bad request
with a 400 naming the field. Where the APIs disagree, SGLang's own checks decide (``top_k=0``
is refused, as SGLang does); ``turnout.wire.sampling`` keeps only what the wire format needs.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import Meta

#: Largest value of the int32 fields of SGLang's protocol (older SGLang protos use int32 where
#: ours says uint32, so every count and token id stays within int32).
INT32_MAX = 2**31 - 1

TokenId = Annotated[int, Meta(ge=0, le=INT32_MAX)]
TokenCount = Annotated[int, Meta(ge=1, le=INT32_MAX)]
NonEmptyText = Annotated[str, Meta(min_length=1)]
#: ``logprobs`` / ``top_logprobs`` / ``top_logprobs_num``: OpenAI's and SGLang's range.
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
#: SGLang's ``lora_path``: an adapter name, or one per prompt (``None``: the base model).
LoraPath = str | list[str | None]
Penalty = Annotated[float, Meta(ge=-2, le=2)]
#: OpenAI ``stop``: one string or up to 16, none empty.
Stop = NonEmptyText | Annotated[list[NonEmptyText], Meta(max_length=16)]

#: ``chat_template_kwargs`` keys that turnout passes to the template itself.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
    }
)


class InvalidField(ValueError):
    """Raised by a request type's ``__post_init__``: ``param`` names the field (relative to the
    object being decoded)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class StreamOptions(msgspec.Struct, kw_only=True):
    """OpenAI ``stream_options``."""

    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One chat message as OpenAI clients send it."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


def check_top_k(top_k: int | None) -> None:
    """Refuse ``top_k=0``, as SGLang does (-1 is off, otherwise at least 1)."""
    if top_k == 0:
        raise InvalidField("top_k", "top_k must be -1 (disabled) or >= 1, got 0")


def check_template_kwargs(kwargs: dict[str, Any] | None, hint: str = "") -> None:
    """Refuse ``chat_template_kwargs`` that would override what turnout passes the template."""
    reserved = sorted(RESERVED_TEMPLATE_KWARGS.intersection(kwargs or ()))
    if reserved:
        raise InvalidField(
            f"chat_template_kwargs.{reserved[0]}",
            f"chat_template_kwargs must not set {', '.join(reserved)}{hint}",
        )


class SamplingFields(msgspec.Struct, kw_only=True):
    """Sampling fields shared by every generation endpoint (OpenAI names + SGLang extras)."""

    temperature: Annotated[float, Meta(ge=0)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    #: -1 (off) or at least 1; 0 is refused in ``__post_init__``, like SGLang does.
    top_k: Annotated[int, Meta(ge=-1, le=INT32_MAX)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Meta(gt=0, le=2)] | None = None
    max_tokens: TokenCount | None = None
    min_tokens: Annotated[int, Meta(ge=0, le=INT32_MAX)] | None = None
    n: Annotated[int, Meta(ge=1, le=128)] = 1
    stop: Stop | None = None
    #: SGLang: regexes that end the output like stop strings (matched by turnout).
    stop_regex: Stop | None = None
    stop_token_ids: list[TokenId] | None = None
    no_stop_trim: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    seed: Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)] | None = None
    #: Token id (as a string) → bias, in OpenAI's range.
    logit_bias: dict[str, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    regex: str | None = None
    ebnf: str | None = None

    #: Wire names of ``min_tokens`` / ``max_tokens`` in this API (for error messages).
    _names: ClassVar[tuple[str, str]] = ("min_tokens", "max_tokens")

    def __post_init__(self) -> None:
        check_top_k(self.top_k)
        if self.max_tokens is not None:
            self._check_min_tokens(self.max_tokens, self._names[1])
        for key in self.logit_bias or ():
            if not (key.isascii() and key.isdigit() and len(key) <= 10 and int(key) <= INT32_MAX):
                raise InvalidField(
                    "logit_bias", f"logit_bias keys must be token ids, got {key[:40]!r}"
                )

    def _check_min_tokens(self, max_tokens: int, max_name: str) -> None:
        min_name = self._names[0]
        if self.min_tokens is not None and self.min_tokens > max_tokens:
            raise InvalidField(
                min_name,
                f"{min_name} ({self.min_tokens}) must not exceed {max_name} ({max_tokens})",
            )


#: vLLM's ``truncate_prompt_tokens``: keep the prompt's last k tokens (-1: as many as the model
#: takes); 0 is refused after decoding.
TruncatePromptTokens = Annotated[int, Meta(ge=-1, le=INT32_MAX)]


def check_truncate_prompt_tokens(value: int | None) -> None:
    """Refuse ``truncate_prompt_tokens: 0`` (nothing of the prompt would be left)."""
    if value == 0:
        raise InvalidField(
            "truncate_prompt_tokens", "truncate_prompt_tokens must be -1 (the context) or >= 1"
        )


class OpenAIRequest(SamplingFields, kw_only=True):
    """Fields of both OpenAI generation requests besides sampling.

    The subclasses refuse unknown fields (``forbid_unknown_fields``): every field a client may
    send is declared, those that change nothing included (``user``…)."""

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    rid: str | None = None
    # vLLM's extensions.
    #: Log probabilities of the prompt's tokens, with this many alternatives each.
    prompt_logprobs: TopLogprobs | None = None
    #: The answer carries the prompt's and each choice's token ids.
    return_token_ids: bool = False
    #: Logprob tokens are named ``token_id:<id>`` instead of their text.
    return_tokens_as_token_ids: bool = False


class ChatCompletionRequest(OpenAIRequest, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_completion_tokens: TokenCount | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    documents: list[dict[str, Any]] | None = None
    #: SGLang: the LoRA adapter to run (like ``model: "<model>:<adapter>"``).
    lora_path: LoraPath | None = None
    #: vLLM: the answer starts with the last message's content when it is the assistant's.
    echo: bool = False
    # OpenAI's fields that change nothing here: accepted and ignored.
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    prompt_cache_retention: Any = None
    safety_identifier: Any = None
    prediction: Any = None
    verbosity: Any = None
    # Known but not implemented: a request setting one is refused (see ``unsupported``).
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    modalities: list[str] | None = None
    web_search_options: Any = None
    moderation: Any = None
    prompt_cache_options: Any = None
    return_hidden_states: Any = None
    custom_logit_processor: Any = None
    session_params: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_completion_tokens is not None:
            self._check_min_tokens(self.max_completion_tokens, "max_completion_tokens")
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidField("top_logprobs", "top_logprobs requires logprobs to be true")
        check_template_kwargs(self.chat_template_kwargs, ": give them as request fields")


#: One ``/v1/completions`` prompt item: a string, a token id, or a list of token ids.
PromptItem = str | TokenId | Annotated[list[TokenId], Meta(min_length=1)]


class CompletionRequest(OpenAIRequest, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/completions``."""

    #: A string, a list of strings, token ids, or a list of token-id lists.
    prompt: str | Annotated[list[PromptItem], Meta(min_length=1)]
    echo: bool = False
    logprobs: TopLogprobs | None = None
    suffix: str | None = None
    best_of: int | None = None
    #: SGLang: constrain the output to a JSON schema (``json_schema``: the schema as text).
    response_format: dict[str, Any] | None = None
    json_schema: str | None = None
    #: SGLang: the LoRA adapter to run (like ``model: "<model>:<adapter>"``).
    lora_path: LoraPath | None = None
    #: vLLM: keep only the prompt's last k tokens (-1: as many as the model takes).
    truncate_prompt_tokens: TruncatePromptTokens | None = None
    # Known but not implemented: a request setting one is refused (see ``unsupported``).
    return_hidden_states: Any = None
    custom_logit_processor: Any = None
    session_params: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_truncate_prompt_tokens(self.truncate_prompt_tokens)


class NativeSamplingParams(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    """``sampling_params`` of SGLang's ``/generate`` (SGLang's names and ranges)."""

    max_tokens: Annotated[int, Meta(ge=0, le=INT32_MAX)] | None = msgspec.field(
        default=None, name="max_new_tokens"
    )
    min_tokens: Annotated[int, Meta(ge=0, le=INT32_MAX)] | None = msgspec.field(
        default=None, name="min_new_tokens"
    )
    #: A JSON schema (text or object) the output must match.
    json_schema: str | dict[str, Any] | None = None
    #: An xgrammar structural tag (text or object).
    structural_tag: str | dict[str, Any] | None = None

    _names: ClassVar[tuple[str, str]] = ("min_new_tokens", "max_new_tokens")


#: ``/generate`` ``input_ids``: token ids, or a list of token-id lists.
InputIds = Annotated[
    list[TokenId | Annotated[list[TokenId], Meta(min_length=1)]], Meta(min_length=1)
]


class GenerateRequestBody(msgspec.Struct, kw_only=True):
    """SGLang's native ``POST /generate``."""

    text: str | Annotated[list[str], Meta(min_length=1)] | None = None
    input_ids: InputIds | None = None
    model: str | None = None
    sampling_params: NativeSamplingParams = msgspec.field(default_factory=NativeSamplingParams)
    stream: bool = False
    return_logprob: bool = False
    top_logprobs_num: TopLogprobs = 0
    logprob_start_len: Annotated[int, Meta(ge=-1, le=INT32_MAX)] = -1
    #: The third element of each logprob entry is the token's text (else null).
    return_text_in_logprobs: bool = False
    #: Ask the worker to count reasoning tokens (``meta_info.reasoning_tokens``).
    require_reasoning: bool = False
    rid: str | None = None
    #: The LoRA adapter to run (like ``model: "<model>:<adapter>"``); one per prompt allowed,
    #: when they are all the same.
    lora_path: LoraPath | None = None
    #: Token ids whose logprobs every output position reports (``output_token_ids_logprobs``),
    #: whatever was sampled; needs ``return_logprob``.
    token_ids_logprob: Annotated[list[TokenId], Meta(max_length=1024)] | None = None
    # Known but not implemented: a request setting one is refused (see ``unsupported``).
    return_hidden_states: Any = None
    input_embeds: Any = None
    image_data: Any = None
    video_data: Any = None
    audio_data: Any = None
    custom_logit_processor: Any = None
    session_params: Any = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.input_ids is None):
            raise InvalidField("text", "give exactly one of text and input_ids")
        ids = self.input_ids
        if ids is not None and len({isinstance(item, list) for item in ids}) > 1:
            raise InvalidField(
                "input_ids", "input_ids must be token ids or a list of token-id lists, not both"
            )
        if self.token_ids_logprob and not self.return_logprob:
            raise InvalidField(
                "token_ids_logprob", "token_ids_logprob requires return_logprob to be true"
            )


def stop_strings(stop: str | list[str] | None) -> list[str]:
    """OpenAI's ``stop`` as a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
