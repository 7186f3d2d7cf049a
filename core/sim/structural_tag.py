"""What the simulator answers under a ``structural_tag`` constraint (xgrammar's format).

The formats routers send for tool calls are covered: ``json_schema``, ``tag`` (begin, content,
end), ``triggered_tags`` (free text in which each trigger opens one of the tags), ``or`` and
``sequence``, and SGLang's older shape (``structures`` and ``triggers``). A scripted reply that
fits the tag is the answer; otherwise a small text built from the tag's first choices.
"""

from __future__ import annotations

import json
from typing import Any

from turnout.sim.schema_instance import SchemaError, conforms, instance_for

__all__ = ["StructuralTagError", "structural_answer"]


class StructuralTagError(ValueError):
    """The structural tag is not one the simulator can read."""


def structural_answer(tag_text: str, replies: tuple[str, ...] | None) -> str:
    """The first of ``replies`` that fits the tag, else a text built from it."""
    try:
        tag = json.loads(tag_text)
    except json.JSONDecodeError as exc:
        raise StructuralTagError(f"structural_tag is not JSON: {exc}") from None
    shape = _shape(tag)
    for reply in replies or ():
        if _fits(reply, shape):
            return reply
    try:
        return _build(shape)
    except SchemaError as exc:
        raise StructuralTagError(f"structural_tag is not usable: {exc}") from None


def _shape(tag: Any) -> dict[str, Any]:
    if not isinstance(tag, dict):
        raise StructuralTagError("structural_tag must be a JSON object")
    if "structures" in tag:  # SGLang's older shape
        tags = [
            {
                "type": "tag",
                "begin": s.get("begin", ""),
                "content": {"type": "json_schema", "json_schema": s.get("schema", {})},
                "end": s.get("end", ""),
            }
            for s in tag["structures"]
        ]
        return {"type": "triggered_tags", "triggers": tag.get("triggers", []), "tags": tags}
    shape = tag.get("format")
    if not isinstance(shape, dict):
        raise StructuralTagError("structural_tag needs a 'format' object")
    return shape


def _fits(text: str, shape: dict[str, Any]) -> bool:
    """Whether ``text`` as a whole is valid under ``shape``."""
    return _match(text, 0, shape) == len(text) or _free_text_fits(text, shape)


def _free_text_fits(text: str, shape: dict[str, Any]) -> bool:
    kind = shape.get("type")
    if kind == "or":
        return any(_fits(text, element) for element in shape.get("elements", []))
    if kind != "triggered_tags":
        return False
    triggers = [t for t in shape.get("triggers", []) if t]
    tags = shape.get("tags", [])
    count, at = 0, 0
    while True:
        found = [(text.find(t, at), t) for t in triggers if text.find(t, at) != -1]
        if not found:
            break
        start = min(found)[0]
        ends = [_match(text, start, tag) for tag in tags]
        end = next((e for e in ends if e is not None), None)
        if end is None:
            return False
        count += 1
        at = end
    if shape.get("stop_after_first") and count > 1:
        return False
    return count > 0 or not shape.get("at_least_one")


def _match(text: str, at: int, shape: dict[str, Any]) -> int | None:
    """Where a piece valid under ``shape`` starting at ``at`` ends (None: no such piece)."""
    kind = shape.get("type")
    if kind == "const_string":
        value = str(shape.get("value", ""))
        return at + len(value) if text.startswith(value, at) else None
    if kind == "json_schema":
        stripped = len(text) - len(text[at:].lstrip())
        try:
            value, end = json.JSONDecoder().raw_decode(text, stripped)
        except json.JSONDecodeError:
            return None
        return end if conforms(value, shape.get("json_schema", True)) else None
    if kind == "tag":
        begin, end_text = str(shape.get("begin", "")), str(shape.get("end", ""))
        if not text.startswith(begin, at):
            return None
        inner = _match(text, at + len(begin), shape.get("content") or {})
        if inner is None or not text.startswith(end_text, inner):
            return None
        return inner + len(end_text)
    if kind == "sequence":
        for element in shape.get("elements", []):
            found = _match(text, at, element)
            if found is None:
                return None
            at = found
        return at
    if kind == "or":
        for element in shape.get("elements", []):
            found = _match(text, at, element)
            if found is not None:
                return found
    return None


def _build(shape: dict[str, Any]) -> str:
    kind = shape.get("type")
    if kind == "const_string":
        return str(shape.get("value", ""))
    if kind == "json_schema":
        return json.dumps(instance_for(shape.get("json_schema", True)))
    if kind == "tag":
        content = _build(shape.get("content") or {"type": "const_string"})
        return f"{shape.get('begin', '')}{content}{shape.get('end', '')}"
    if kind == "sequence":
        return "".join(_build(element) for element in shape.get("elements", []))
    if kind == "or":
        elements = shape.get("elements") or []
        if not elements:
            raise StructuralTagError("an 'or' format needs elements")
        return _build(elements[0])
    if kind == "triggered_tags":
        tags = shape.get("tags") or []
        return _build(tags[0]) if tags and shape.get("at_least_one") else ""
    raise StructuralTagError(f"format type {kind!r} is not one the simulator reads")
