"""Detect whether a chat template wants message content as a string or as OpenAI-style parts.

The template's syntax tree is walked once. A template that loops over ``message.content``, or
indexes into it (``content[0]``, ``content['type']``), reads *parts*; unless it also tests
``content is string``, it cannot take a plain string, so the format is ``"openai"``. Every other
template gets ``"string"`` content — including templates that accept both, because their
string branches are the ones that cover every role (Kimi K2 prints an assistant's or a tool's
``content`` directly, which would show a list's Python repr).

Separately, :func:`media_parts_of` finds the media a template renders from *typed parts*: a
loop over the content whose part is tested for an image (``part['type'] == 'image'``,
``'image_url' in part``, ``part.type in ['image', 'image_url']``). Such a template (Qwen2-VL,
Mistral Small 3.2, Kimi K2) gets a user message with images as parts even when its format is
``"string"``, and prints its placeholder (``<|vision_start|><|image_pad|><|vision_end|>``) per
image (see :mod:`turnout.tokenizer.content_parts`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import jinja2
from jinja2 import nodes

from turnout.tokenizer.content_parts import MEDIA_TYPES
from turnout.tokenizer.template_env import template_environment

ContentFormat = Literal["string", "openai"]


def is_field_expr(node: nodes.Node, field: str, aliases: set[str]) -> bool:
    """``x.field``, ``x['field']``, a variable set from one, or a filter applied to one."""
    if isinstance(node, nodes.Getattr):
        return node.attr == field
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and node.arg.value == field
    if isinstance(node, nodes.Name):
        return node.name in aliases
    if isinstance(node, nodes.Filter) and node.node is not None:
        return is_field_expr(node.node, field, aliases)
    return False


def field_aliases(tree: nodes.Template, field: str) -> set[str]:
    """Names assigned from a ``field`` expression (``{% set content = message.content %}``)."""
    aliases: set[str] = set()
    assigns = list(tree.find_all(nodes.Assign))
    changed = True
    while changed:
        changed = False
        for assign in assigns:
            target = assign.target
            if (
                isinstance(target, nodes.Name)
                and target.name not in aliases
                and is_field_expr(assign.node, field, aliases)
            ):
                aliases.add(target.name)
                changed = True
    return aliases


def _is_content_expr(node: nodes.Node, aliases: set[str]) -> bool:
    return is_field_expr(node, "content", aliases)


def _reads_parts(tree: nodes.Template, aliases: set[str]) -> Iterator[bool]:
    for loop in tree.find_all(nodes.For):
        yield _is_content_expr(loop.iter, aliases)
    for item in tree.find_all(nodes.Getitem):
        # content[0] or content['type']; not slices (strings slice too) nor message['content']
        yield (
            _is_content_expr(item.node, aliases)
            and isinstance(item.arg, nodes.Const)
            and item.arg.value != "content"
        )


def _accepts_string(tree: nodes.Template, aliases: set[str]) -> bool:
    return any(
        test.name == "string" and _is_content_expr(test.node, aliases)
        for test in tree.find_all(nodes.Test)
    )


def content_format_of(tree: nodes.Template) -> ContentFormat:
    """The content format of a parsed template."""
    aliases = field_aliases(tree, "content")
    if any(_reads_parts(tree, aliases)) and not _accepts_string(tree, aliases):
        return "openai"
    return "string"


def _part_names(tree: nodes.Template, aliases: set[str]) -> set[str]:
    """Loop variables over a message's content (or over a macro argument named ``content``)."""
    names: set[str] = set()
    for loop in tree.find_all(nodes.For):
        over_content = _is_content_expr(loop.iter, aliases) or (
            isinstance(loop.iter, nodes.Name) and loop.iter.name == "content"
        )
        if over_content and isinstance(loop.target, nodes.Name):
            names.add(loop.target.name)
    return names


def _constants(node: nodes.Node) -> list[object]:
    """The value of a constant, or the values of a constant list/tuple."""
    if isinstance(node, nodes.Const):
        return [node.value]
    if isinstance(node, nodes.List | nodes.Tuple):
        return [item.value for item in node.items if isinstance(item, nodes.Const)]
    return []


def _is_part(node: nodes.Node, parts: set[str]) -> bool:
    return isinstance(node, nodes.Name) and node.name in parts


def _is_part_type(node: nodes.Node, parts: set[str]) -> bool:
    """``part.type`` or ``part['type']``."""
    if isinstance(node, nodes.Getattr):
        return node.attr == "type" and _is_part(node.node, parts)
    if isinstance(node, nodes.Getitem):
        return (
            isinstance(node.arg, nodes.Const)
            and node.arg.value == "type"
            and _is_part(node.node, parts)
        )
    return False


def _part_tests(tree: nodes.Template, parts: set[str]) -> Iterator[tuple[str, object]]:
    """What a template tests of a part: ``("type", x)`` for ``part.type == x`` (or ``in
    [...]``), ``("key", x)`` for ``x in part``."""
    for compare in tree.find_all(nodes.Compare):
        left = compare.expr
        for operand in compare.ops:
            right = operand.expr
            if operand.op in ("eq", "ne"):
                if _is_part_type(left, parts):
                    yield from (("type", value) for value in _constants(right))
                elif _is_part_type(right, parts):
                    yield from (("type", value) for value in _constants(left))
            elif operand.op in ("in", "notin"):
                if _is_part_type(left, parts):
                    yield from (("type", value) for value in _constants(right))
                elif _is_part(right, parts):
                    yield from (("key", value) for value in _constants(left))
            left = right


def media_parts_of(tree: nodes.Template) -> dict[str, dict[str, str]]:
    """Media kind (``image``, ``video``, ``audio``) → the part that makes a parsed template
    render it: ``{"type": "image"}`` (transformers' convention) when the template recognises
    that type, else the type or key it does test (``{"type": "image_url"}``,
    ``{"type": "image", "image_url": ""}``). Empty for a template without media branches."""
    parts = _part_names(tree, field_aliases(tree, "content"))
    if not parts:
        return {}
    types: dict[str, list[str]] = {}
    keys: dict[str, list[str]] = {}
    for mode, name in _part_tests(tree, parts):
        if isinstance(name, str) and name in MEDIA_TYPES:
            found = types if mode == "type" else keys
            found.setdefault(MEDIA_TYPES[name], []).append(name)
    forms: dict[str, dict[str, str]] = {}
    for kind in sorted({*types, *keys}):
        type_names = types.get(kind, [])
        if kind in type_names or not type_names:
            forms[kind] = {"type": kind}
            if not type_names:  # only keys are tested: give the part the first one
                forms[kind][keys[kind][0]] = ""
        else:
            forms[kind] = {"type": type_names[0]}
    return forms


def detect_content_format(source: str) -> ContentFormat:
    """``"openai"`` when the template needs content parts, else ``"string"``."""
    try:
        tree = template_environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return "string"
    return content_format_of(tree)
