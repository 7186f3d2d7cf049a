"""The fields every streamed chunk of an OpenAI completion shares, made once per answer."""

from __future__ import annotations

from typing import Any

__all__ = ["chunk_template"]


def chunk_template(
    object_type: str, response_id: str, created: int, model: str, *, usage: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer's shared fields (``id``, ``object``, ``created``, ``model``), and a chunk's
    fields in order with ``choices`` (and, with ``usage``, ``usage``) to be set: copying a
    ready dict costs less than building one per chunk."""
    base: dict[str, Any] = {
        "id": response_id,
        "object": object_type,
        "created": created,
        "model": model,
    }
    template = base | {"choices": None}
    if usage:
        template["usage"] = None
    return base, template
