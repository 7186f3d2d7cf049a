"""Detect whether a chat template wants message content as a string or as OpenAI-style parts.

The template's syntax tree is walked once. A template that loops over ``message.content``, or
indexes into it (``content[0]``, ``content['type']``), reads *parts*; unless it also tests
``content is string``, it cannot take a plain string, so the format is ``"openai"``. Every other
template gets ``"string"`` content — including templates that accept both, because their
string branches are the ones that cover every role (Kimi K2 prints an assistant's or a tool's
``content`` directly, which would show a list's Python repr).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import jinja2
from jinja2 import nodes

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


def detect_content_format(source: str) -> ContentFormat:
    """``"openai"`` when the template needs content parts, else ``"string"``."""
    try:
        tree = template_environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return "string"
    return content_format_of(tree)
