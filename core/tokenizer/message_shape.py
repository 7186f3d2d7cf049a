"""What shape of messages a chat template expects, read once from its syntax tree.

Clients send messages as the OpenAI API defines them; Hub templates were written for whatever
their authors fed them. Three things differ between templates:

* content as a string or as parts, and which media parts (images) it renders (see
  :mod:`turnout.tokenizer.content_format`);
* tool-call ``arguments``: most templates want the decoded object (``| tojson``, ``| items``),
  but some concatenate them into the prompt (DeepSeek's ``'<｜tool▁sep｜>' + arguments``) and
  need the JSON text. A template that tests ``arguments is string`` takes both and gets the
  object, as ``transformers`` users pass it;
* a ``content: null`` beside tool calls: most templates need a string there (SGLang passes
  ``""``), but some branch on ``content is none`` to render the calls (DeepSeek-R1's renders
  them only then) and must see ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jinja2
from jinja2 import nodes

from turnout.tokenizer.content_format import (
    ContentFormat,
    content_format_of,
    field_aliases,
    is_field_expr,
    media_parts_of,
)
from turnout.tokenizer.template_env import template_environment


@dataclass(frozen=True, slots=True)
class MessageShape:
    """How one chat template wants messages."""

    content_format: ContentFormat = "string"
    #: Tool-call arguments reach the template as JSON text rather than as an object.
    arguments_as_text: bool = False
    #: A null ``content`` beside tool calls reaches the template as ``None`` (not ``""``).
    null_content_with_calls: bool = False
    #: Media kind (``image``…) the template renders from content parts → the part it takes.
    media: dict[str, dict[str, str]] = field(default_factory=dict)


def _tests(tree: nodes.Template, name: str, field: str, aliases: set[str]) -> bool:
    """The template applies the test ``is <name>`` (or ``is not <name>``) to the field."""
    return any(
        test.name == name and is_field_expr(test.node, field, aliases)
        for test in tree.find_all(nodes.Test)
    )


def _uses_arguments_as_text(tree: nodes.Template, aliases: set[str]) -> bool:
    """Arguments concatenated (``+``, ``~``) or printed bare, with no ``is string`` test."""
    if _tests(tree, "string", "arguments", aliases):
        return False

    def bare(node: nodes.Node) -> bool:  # not through a filter such as tojson
        return not isinstance(node, nodes.Filter) and is_field_expr(node, "arguments", aliases)

    for add in tree.find_all(nodes.Add):
        if bare(add.left) or bare(add.right):
            return True
    for concat in tree.find_all(nodes.Concat):
        if any(bare(node) for node in concat.nodes):
            return True
    return any(bare(node) for output in tree.find_all(nodes.Output) for node in output.nodes)


def detect_message_shape(source: str) -> MessageShape:
    """The shape ``source`` expects (the defaults when it does not parse)."""
    try:
        tree = template_environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return MessageShape()
    return MessageShape(
        content_format=content_format_of(tree),
        arguments_as_text=_uses_arguments_as_text(tree, field_aliases(tree, "arguments")),
        null_content_with_calls=_tests(tree, "none", "content", field_aliases(tree, "content")),
        media=media_parts_of(tree),
    )
