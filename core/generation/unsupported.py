"""Request fields turnout knows but does not implement. A request that sets one is refused with
a 400 naming the field: nothing a client asks for is silently ignored.

Fields that do not change the answer (``user``, ``metadata``, ``store``, ``service_tier``…)
are not listed: like OpenAI-compatible servers, turnout accepts and ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.errors import ApiError

#: SGLang extensions shared by the generation endpoints: field → what to do instead.
_SGLANG: Mapping[str, str] = {
    "return_hidden_states": "hidden states are not returned through turnout",
    "custom_logit_processor": "custom logit processors are not forwarded by turnout",
    "session_params": "SGLang sessions are not supported by turnout",
}

CHAT: Mapping[str, str] = {
    "functions": "use tools",
    "function_call": "use tool_choice",
    "audio": "audio output is not supported",
    "web_search_options": "web search is not supported",
    "moderation": "moderation policies are not supported",
    "prompt_cache_options": "the prefix cache is the workers' own: it takes no options",
    **_SGLANG,
}

COMPLETIONS: Mapping[str, str] = dict(_SGLANG)

GENERATE: Mapping[str, str] = {
    "input_embeds": "send text or input_ids",
    "image_data": "multimodal input is not supported by turnout yet",
    "video_data": "multimodal input is not supported by turnout yet",
    "audio_data": "multimodal input is not supported by turnout yet",
    **_SGLANG,
}


def _is_set(value: Any) -> bool:
    """Whether a value asks for something (``web_search_options: {}`` does; ``[]`` does not)."""
    return value not in (None, False, "", [])


def refuse_unsupported(request: object, fields: Mapping[str, str]) -> None:
    """400 naming the first of ``fields`` that ``request`` sets."""
    for name, instead in fields.items():
        value = getattr(request, name)
        if value is not None and _is_set(value):
            raise unsupported(name, f"{name} is not supported: {instead}")


def refuse_modalities(modalities: list[str] | None) -> None:
    """Only text output exists."""
    other = sorted(set(modalities or ()) - {"text"})
    if other:
        raise unsupported("modalities", f"modalities {other} are not supported: only text")


def unsupported(param: str, message: str) -> ApiError:
    """The 400 of a parameter turnout does not implement (OpenAI's code for it)."""
    return ApiError(400, message, param=param, code="unsupported_parameter")
