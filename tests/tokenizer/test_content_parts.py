"""Typed content parts: which templates render images, and what reaches them."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.tokenizer import ChatTemplate, ChatTemplateError
from turnout.tokenizer.content_parts import media_kind

IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}

BOTH = (
    "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for p in m.content %}{COND}{% endfor %}{% endif %}|{% endfor %}"
)


def both_with(condition: str) -> str:
    body = "{% if " + condition + " %}<IMG>{% else %}{{ p.text }}{% endif %}"
    return BOTH.replace("{COND}", body)


@pytest.mark.parametrize(
    "condition",
    [
        "p.type == 'image'",
        "p['type'] == 'image_url'",
        "'image' == p.type",
        "p['type'] in ['image', 'image_url']",
        "'image_url' in p",
        "p.type != 'text' and 'image' in p",
    ],
)
def test_image_branches_are_recognised(condition: str) -> None:
    template = ChatTemplate(both_with(condition))
    assert template.content_format == "string"
    assert template.media_kinds == {"image"}
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]}]
    assert template.render(messages, add_generation_prompt=False) == "see<IMG>|"


def test_macro_over_content_is_recognised() -> None:
    source = (
        "{% macro show(content) %}{% for item in content %}"
        "{% if item.type == 'video' %}<VID>{% elif item.type == 'image' %}<IMG>"
        "{% else %}{{ item.text }}{% endif %}{% endfor %}{% endmacro %}"
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
        "{% else %}{{ show(m.content) }}{% endif %}{% endfor %}"
    )
    assert ChatTemplate(source).media_kinds == {"image", "video"}


def test_the_part_takes_the_form_the_template_tests() -> None:
    forms = {
        "p.type == 'image' or 'image_url' in p": {"type": "image"},  # transformers' form first
        "p['type'] == 'image_url'": {"type": "image_url"},
        "'image_url' in p": {"type": "image", "image_url": ""},
    }
    for condition, form in forms.items():
        assert ChatTemplate(both_with(condition)).shape.media == {"image": form}


def test_templates_without_an_image_branch_render_none() -> None:
    for source in (
        "{% for m in messages %}{{ m.content }}{% endfor %}",
        "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
        # a type test outside a content loop says nothing about parts
        "{% for t in tools %}{% if t.type == 'image' %}x{% endif %}{% endfor %}",
    ):
        assert ChatTemplate(source).media_kinds == frozenset()


def test_text_only_parts_are_still_joined() -> None:
    template = ChatTemplate(both_with("p.type == 'image'"))
    parts = [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]
    assert template.render([{"role": "user", "content": parts}], add_generation_prompt=False) == (
        "a\nb|"
    )


def test_strings_stay_strings_beside_image_turns() -> None:
    template = ChatTemplate(both_with("p.type == 'image'"))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [IMAGE, IMAGE, "and text"]},
        {"role": "assistant", "content": None},
    ]
    rendered = template.render(messages, add_generation_prompt=False)
    assert rendered == "sys|<IMG><IMG>and text||"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"role": "system", "content": [IMAGE]}, "only allowed in user messages"),
        ({"role": "assistant", "content": [IMAGE]}, "only allowed in user messages"),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, "no audio"),
        ({"role": "user", "content": [IMAGE, {"type": "file", "file": {}}]}, "'file' is not"),
        ({"role": "user", "content": [IMAGE, 3]}, "parts must be objects"),
    ],
)
def test_media_parts_refused_where_they_cannot_go(message: dict[str, Any], error: str) -> None:
    template = ChatTemplate(both_with("p.type == 'image'"))
    with pytest.raises(ChatTemplateError, match=error):
        template.render([message])


def test_parts_only_templates_get_typed_parts() -> None:
    source = (
        "{% for m in messages %}{% for p in m.content %}"
        "{% if p.type == 'image' %}<IMG>{% else %}<{{ p.type }}:{{ p.text }}>{% endif %}"
        "{% endfor %}{% endfor %}"
    )
    template = ChatTemplate(source)
    assert template.content_format == "openai"
    messages = [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": [{"type": "input_text", "text": "t"}, IMAGE]},
    ]
    assert template.render(messages, add_generation_prompt=False) == "<text:plain><text:t><IMG>"
    text_only = ChatTemplate(
        "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
    )
    with pytest.raises(ChatTemplateError, match="takes no image"):
        text_only.render([{"role": "user", "content": [IMAGE]}])


def test_media_kind_of_request_parts() -> None:
    assert media_kind(IMAGE) == "image"
    assert media_kind({"type": "input_image", "image_url": "data:,"}) == "image"
    assert media_kind({"type": "video_url"}) == "video"
    assert media_kind({"type": "text", "text": "x"}) is None
    assert media_kind("text") is None
