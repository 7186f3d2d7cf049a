"""Chat template environment, content formats, message preparation and error mapping."""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.tokenizer.helpers import TEMPLATES
from turnout.tokenizer import ChatTemplate, ChatTemplateError, detect_content_format
from turnout.tokenizer.chat_template import prepare_messages
from turnout.tokenizer.message_shape import MessageShape, detect_message_shape
from turnout.tokenizer.template_env import compile_template

USER = [{"role": "user", "content": "hi"}]


def render(source: str, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    return ChatTemplate(source).render(USER if messages is None else messages, **kwargs)


def test_environment_matches_hf_conventions() -> None:
    # trim_blocks / lstrip_blocks
    assert render("  {% if true %}\nA\n  {% endif %}\nB") == "A\nB"
    # tojson keeps non-ASCII and supports indent / separators / sort_keys
    data = {"b": "é", "a": [1]}
    assert render("{{ d|tojson }}", d=data) == '{"b": "é", "a": [1]}'
    assert render("{{ d|tojson(sort_keys=true) }}", d=data) == '{"a": [1], "b": "é"}'
    assert render("{{ d|tojson(indent=2) }}", d={"a": 1}) == '{\n  "a": 1\n}'
    assert render("{{ d|tojson(separators=(',', ':')) }}", d=data) == '{"b":"é","a":[1]}'
    assert render("{{ '<b>'|tojson }}") == '"<b>"'  # no HTML escaping
    # loop controls
    assert (
        render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}")
        == "012"
    )
    assert (
        render(
            "{% for i in range(4) %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}"
        )
        == "02"
    )
    # strftime_now
    assert render("{{ strftime_now('%Y') }}") == str(datetime.datetime.now().year)
    # special tokens and kwargs as variables; kwargs win
    assert render("{{ bos_token }}|{{ x }}", special_tokens={"bos_token": "<s>"}, x=1) == "<s>|1"
    assert render("{{ bos_token }}", special_tokens={"bos_token": "<s>"}, bos_token="B") == "B"
    # the generation tag renders its body
    assert render("{% generation %}G{% endgeneration %}") == "G"
    assert compile_template("{{ 1 }}") is compile_template("{{ 1 }}")  # compiled once


def test_raise_exception_becomes_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match=r"^Roles must alternate$"):
        render("{{ raise_exception('Roles must alternate') }}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages[0].content.missing.deeper }}",  # undefined misuse
        "{{ 1 / 0 }}",
        "{{ messages.__class__.__mro__ }}",  # sandbox
        "{% set ns = namespace(_x=1) %}",
        "{{ messages.append(1) }}",  # immutable sandbox
    ],
)
def test_template_failures_are_chat_template_errors(source: str) -> None:
    with pytest.raises(ChatTemplateError):
        render(source)


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(ChatTemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")


def test_bad_conversations_are_clear_errors() -> None:
    template = ChatTemplate("{{ messages|length }}")
    for bad, message in [
        ([], "must not be empty"),
        ("hello", "must be a list"),
        ([{"content": "x"}], r"messages\[0\]\.role"),
        (["x"], r"messages\[0\] must be an object"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "part type 'image_url'"),
        ([{"role": "assistant", "tool_calls": "x"}], "tool_calls must be a list"),
    ]:
        with pytest.raises(ChatTemplateError, match=message):
            template.render(bad)  # type: ignore[arg-type]
    with pytest.raises(ChatTemplateError, match="may not override"):
        template.render(USER, messages=[])
    with pytest.raises(ChatTemplateError, match="cannot both be set"):
        template.render(USER, continue_final_message=True, add_generation_prompt=True)


def test_content_format_detection() -> None:
    parts_loop = (
        "{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}"
    )
    parts_index = "{% for m in messages %}{{ m.content[0]['text'] }}{% endfor %}"
    via_alias = (
        "{% for m in messages %}{% set c = m.content %}"
        "{% for p in c %}{{ p['text'] }}{% endfor %}{% endfor %}"
    )
    both = (
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
        "{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}"
    )
    plain = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert detect_content_format(parts_loop) == "openai"
    assert detect_content_format(parts_index) == "openai"
    assert detect_content_format(via_alias) == "openai"
    assert detect_content_format(both) == "string"
    assert detect_content_format(plain) == "string"
    assert detect_content_format("{% broken") == "string"


@pytest.mark.skipif(not TEMPLATES.is_dir(), reason=f"shared fixtures not found at {TEMPLATES}")
def test_hub_templates_take_string_content() -> None:
    formats = {p.stem: detect_content_format(p.read_text()) for p in TEMPLATES.glob("*.jinja")}
    assert set(formats.values()) == {"string"}, formats


def test_parts_template_gets_strings_wrapped() -> None:
    source = (
        "{% for m in messages %}{% for p in m.content %}"
        "<{{ p.type }}:{{ p.text }}>{% endfor %}{% endfor %}"
    )
    template = ChatTemplate(source)
    assert template.content_format == "openai"
    messages = [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": [{"type": "text", "text": "part"}]},
    ]
    assert template.render(messages, add_generation_prompt=False) == "<text:plain><text:part>"


def test_prepare_messages_shapes_for_templates() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "why",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
                {"id": "3", "type": "function", "function": {"name": "h", "arguments": "[1]"}},
            ],
        },
    ]
    prepared = prepare_messages(messages)
    assert prepared[0]["content"] == "a\nb"
    assert prepared[1]["content"] == ""
    assert prepared[1]["thinking"] == prepared[1]["reasoning_content"] == "why"
    args = [call["function"]["arguments"] for call in prepared[1]["tool_calls"]]
    assert args == [{"x": 1}, "not json", "[1]"]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # untouched
    assert messages[0]["content"][0] == {"type": "text", "text": "a"}


def test_null_or_missing_content_becomes_empty_text() -> None:
    """As SGLang does: templates read ``content`` of every message, beside tool calls too."""
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [
        {"role": "user", "content": None},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1"},
    ]
    assert [m["content"] for m in prepare_messages(messages)] == ["", "", "", ""]
    keeps_none = prepare_messages(messages, MessageShape(null_content_with_calls=True))
    assert [m["content"] for m in keeps_none] == ["", None, None, ""]
    source = "{% for m in messages %}{{ m.role }}:{{ m.content + '|' }}{% endfor %}"
    rendered = ChatTemplate(source).render(messages[:2], add_generation_prompt=False)
    assert rendered == "user:|assistant:|"


def test_arguments_as_text_for_templates_that_concatenate_them() -> None:
    calls = [
        {"function": {"name": "f", "arguments": '{"x": "é"}'}},
        {"function": {"name": "g", "arguments": {"y": 2}}},
    ]
    messages = [{"role": "assistant", "tool_calls": calls}]
    prepared = prepare_messages(messages, MessageShape(arguments_as_text=True))
    assert [c["function"]["arguments"] for c in prepared[0]["tool_calls"]] == [
        '{"x": "é"}',
        '{"y": 2}',
    ]
    source = (
        "{% for m in messages %}{% for c in m.tool_calls %}"
        "{{ c.function.name + '(' + c.function.arguments + ')' }}{% endfor %}{% endfor %}"
    )
    assert ChatTemplate(source).render(messages, add_generation_prompt=False) == (
        'f({"x": "é"})g({"y": 2})'
    )


@pytest.mark.parametrize(
    ("source", "as_text"),
    [
        ("{{ m.tool_calls[0].function.arguments | tojson }}", False),
        ("{% for k, v in c.arguments | items %}{{ k }}{% endfor %}", False),
        ("{{ '<sep>' + c['function']['arguments'] }}", True),
        ("{{ c.arguments ~ '!' }}", True),
        ("{% set a = c.function.arguments %}{{ 'x' + a }}", True),
        ("{{ c.arguments }}", True),
        ("{% if c.arguments is string %}{{ c.arguments }}{% else %}{{ c.arguments | tojson }}"
         "{% endif %}", False),
    ],
)  # fmt: skip
def test_arguments_shape_detection(source: str, as_text: bool) -> None:
    assert detect_message_shape(source).arguments_as_text is as_text


def test_null_content_branch_detection() -> None:
    def branches(source: str) -> bool:
        return detect_message_shape(source).null_content_with_calls

    assert branches("{% if m['content'] is none %}{% endif %}")
    assert branches("{% if m.content is not none %}{% endif %}")
    assert not branches("{% if m.thinking is none %}{% endif %}")
    assert detect_message_shape("{% broken") == MessageShape()


@pytest.mark.skipif(not TEMPLATES.is_dir(), reason=f"shared fixtures not found at {TEMPLATES}")
def test_hub_templates_message_shapes() -> None:
    shapes = {p.stem: detect_message_shape(p.read_text()) for p in TEMPLATES.glob("*.jinja")}
    as_text = {name for name, shape in shapes.items() if shape.arguments_as_text}
    none_branch = {name for name, shape in shapes.items() if shape.null_content_with_calls}
    deepseek = {"deepseek-ai-DeepSeek-V3.1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"}
    assert as_text == deepseek
    assert none_branch == {*deepseek, "moonshotai-Kimi-K2"}


def test_documents_and_tools_reach_the_template() -> None:
    source = "{{ tools[0].function.name }}|{{ documents[0].title }}|{{ tools is none }}"
    template = ChatTemplate(source)
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert template.render(USER, tools=tools, documents=[{"title": "T"}]) == "f|T|False"
    assert ChatTemplate("{{ tools is none }}/{{ tools is defined }}").render(USER) == "True/True"


QWEN = TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"


@pytest.mark.skipif(not QWEN.is_file(), reason=f"shared fixture not found: {QWEN}")
@pytest.mark.parametrize(
    "final",
    [
        {"role": "assistant", "content": "The answer is"},
        {"role": "assistant", "content": "Trailing space "},
        {"role": "assistant", "content": [{"type": "text", "text": "In parts"}]},
        {"role": "user", "content": "continue the user"},
    ],
)
def test_continue_final_message_matches_transformers(
    final: dict[str, Any], small_tokenizer_file: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    source = QWEN.read_text(encoding="utf-8")
    messages = [{"role": "user", "content": "Say something"}, final]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.PreTrainedTokenizerFast(
            tokenizer_file=str(small_tokenizer_file), eos_token="<|im_end|>"
        )
    hf_messages = [
        m if isinstance(m["content"], str) else {**m, "content": m["content"][0]["text"]}
        for m in messages
    ]
    expected = hf.apply_chat_template(
        hf_messages, chat_template=source, tokenize=False, continue_final_message=True
    )
    ours = ChatTemplate(source).render(
        messages,
        add_generation_prompt=False,
        continue_final_message=True,
        special_tokens={"eos_token": "<|im_end|>"},
    )
    assert ours == expected
    assert not ours.endswith("<|im_end|>\n")


def test_continue_final_message_errors() -> None:
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ChatTemplateError, match="no 'content' to continue"):
        template.render(
            [{"role": "assistant"}], add_generation_prompt=False, continue_final_message=True
        )
    with pytest.raises(ChatTemplateError, match="does not use the field 'reasoning_content'"):
        template.render(
            [{"role": "assistant", "content": "x", "reasoning_content": "r"}],
            add_generation_prompt=False,
            continue_final_message="reasoning_content",
        )
    dropping = ChatTemplate("{% for m in messages %}{{ m.content[:2] }}{% endfor %}")
    with pytest.raises(ChatTemplateError, match="cannot be continued"):
        dropping.render(
            [{"role": "assistant", "content": "long text"}],
            add_generation_prompt=False,
            continue_final_message=True,
        )


def test_a_template_starts_each_render_from_one_plain_dict_of_globals() -> None:
    """Jinja chains a template's globals to the environment's by default, and every render
    copies them: a plain dict, made once at compile time, is copied much faster."""
    template = compile_template("{{ raise_exception is defined }} {{ namespace(a=1).a }}")
    assert type(template.globals) is dict
    assert template.render() == "True 1"


@pytest.mark.parametrize(
    "name", ["role", "content", "missing", "items", "get", "__class__", "keys"]
)
def test_dict_attributes_read_as_in_the_plain_sandbox(name: str) -> None:
    """Templates read message fields as ``message.role``: read straight from the key, with the
    sandbox's answers (dict's own attributes first, undefined for a missing key)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    message = {"role": "user", "content": "hi", "items": "shadowed"}
    source = f"{{{{ m.{name} is defined }}}}|{{{{ (m.{name} if m.{name} is string else '') }}}}"
    plain = ImmutableSandboxedEnvironment().from_string(source).render(m=message)
    assert compile_template(source).render(m=message) == plain


@pytest.mark.parametrize(
    "expression",
    [
        "ns.found",
        "ns.count + 1",
        "ns.missing is defined",
        "ns.items",
        "ns._hidden is defined",
        "ns.__class__ is defined",
        "ns._Namespace__attrs is defined",
        "ns.fmt(ns)",
        "ns.nested.role",
    ],
)
def test_namespace_reads_and_calls_as_in_the_plain_sandbox(expression: str) -> None:
    """``namespace(...)`` is built and its attributes read without the sandbox's generic
    checks (they pass for any namespace attribute): the same answers as the plain sandbox, in
    and out of loops, and a ``str.format`` kept in a namespace is still sandboxed."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source = (
        "{% set ns = namespace(found=false, count=1, nested={'role': 'user'}, fmt=fmt) %}"
        "{% for i in [1, 2] %}{% set inner = namespace(k=i) %}{% set ns.found = inner.k %}"
        f"{{% endfor %}}{{{{ {expression} }}}}"
    )
    fmt = "{0.__class__}".format
    try:
        plain = ImmutableSandboxedEnvironment().from_string(source).render(fmt=fmt)
    except Exception as exc:  # the sandbox refuses it: so must ours
        with pytest.raises(type(exc)):
            compile_template(source).render(fmt=fmt)
        return
    assert compile_template(source).render(fmt=fmt) == plain
