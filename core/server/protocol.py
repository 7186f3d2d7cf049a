"""Request types of the OpenAI and SGLang APIs, decoded and validated with msgspec."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from turnout.server.errors import ApiError, bad_request

T = TypeVar("T")


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


class SamplingFields(msgspec.Struct, kw_only=True):
    """Sampling fields shared by chat and text completions (OpenAI names + SGLang extras)."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    no_stop_trim: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    rid: str | None = None
    regex: str | None = None
    ebnf: str | None = None


class ChatCompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
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


class CompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/completions``."""

    #: A string, a list of strings, token ids, or a list of token-id lists (checked later).
    prompt: str | list[Any]
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None


class GenerateRequestBody(msgspec.Struct, kw_only=True):
    """SGLang's native ``POST /generate``."""

    text: str | list[str] | None = None
    #: Token ids, or a list of token-id lists (checked later).
    input_ids: list[Any] | None = None
    model: str | None = None
    sampling_params: dict[str, Any] = msgspec.field(default_factory=dict)
    stream: bool = False
    return_logprob: bool = False
    top_logprobs_num: int = 0
    logprob_start_len: int = -1
    rid: str | None = None


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode and type-check a JSON body; errors become a 400 naming the field."""
    if not body:
        raise bad_request("request body is empty; expected a JSON object")
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        message = str(exc)
        param = None
        if " - at `$." in message:
            message, _, path = message.partition(" - at `$.")
            param = path.rstrip("`")
            message = f"{param}: {message}"
        raise ApiError(400, message, param=param, code="invalid_value") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None


def check_sampling(request: SamplingFields) -> None:
    """Range checks shared by every generation endpoint (400 with the parameter named)."""
    if request.temperature is not None and request.temperature < 0:
        raise bad_request("temperature must be >= 0", "temperature")
    if request.top_p is not None and not 0 < request.top_p <= 1:
        raise bad_request("top_p must be in (0, 1]", "top_p")
    if request.top_k is not None and (request.top_k < -1 or request.top_k == 0):
        raise bad_request("top_k must be -1 (disabled) or >= 1", "top_k")
    if request.min_p is not None and not 0 <= request.min_p <= 1:
        raise bad_request("min_p must be in [0, 1]", "min_p")
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(request, name)
        if value is not None and not -2 <= value <= 2:
            raise bad_request(f"{name} must be in [-2, 2]", name)
    if request.repetition_penalty is not None and not 0 < request.repetition_penalty <= 2:
        raise bad_request("repetition_penalty must be in (0, 2]", "repetition_penalty")
    if request.n < 1:
        raise bad_request("n must be >= 1", "n")
    if request.n > 128:
        raise bad_request("n must be <= 128", "n")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise bad_request("max_tokens must be >= 1", "max_tokens")
    if request.min_tokens is not None and request.min_tokens < 0:
        raise bad_request("min_tokens must be >= 0", "min_tokens")
    stops = stop_strings(request.stop)
    if len(stops) > 16:
        raise bad_request("at most 16 stop sequences are allowed", "stop")
    if any(not stop for stop in stops):
        raise bad_request("stop sequences must not be empty", "stop")
    if request.stop_token_ids is not None and any(t < 0 for t in request.stop_token_ids):
        raise bad_request("stop_token_ids must be non-negative token ids", "stop_token_ids")


def stop_strings(stop: str | list[str] | None) -> list[str]:
    """OpenAI's ``stop`` as a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
