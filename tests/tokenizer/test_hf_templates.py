"""Differential tests: real Hub chat templates rendered by turnout and by ``transformers``.

turnout receives conversations as OpenAI clients send them (tool-call arguments as JSON text,
``content: null`` or no ``content`` beside tool calls); transformers receives the same
conversations in the shape each template expects, written out here per template: arguments as
dicts (as JSON text for DeepSeek's templates, which concatenate them), a null or missing content
as ``""`` (SGLang's normalisation; as ``None`` beside tool calls for the templates that branch on
it). The rendered prompts must be identical, and where a template refuses a conversation both
must refuse it.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tokenizer.conftest import MakeModelDir
from tests.tokenizer.helpers import TEMPLATES
from turnout.tokenizer import ChatTemplateError, ModelTokenizer

pytestmark = [
    pytest.mark.needs_shared,
    pytest.mark.skipif(
        not TEMPLATES.is_dir(), reason=f"shared chat template fixtures not found at {TEMPLATES}"
    ),
]

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

# Special tokens each model's tokenizer_config.json declares (the templates read them).
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
SPECIAL_TOKENS: dict[str, dict[str, str]] = {
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "Qwen-Qwen2.5-7B-Instruct": QWEN,
    "Qwen-Qwen3-0.6B": QWEN,
    "Qwen-Qwen2-VL-7B-Instruct": QWEN,
    "deepseek-ai-DeepSeek-V3.1": DEEPSEEK,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": DEEPSEEK,
    "moonshotai-Kimi-K2": {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]"},
    "Mistral-Small-3.2-24B-Instruct-2506": {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    },
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {**LLAMA3, "eos_token": "<|im_end|>"},
    "ByteDance-Seed-OSS": {
        "bos_token": "<seed:bos>",
        "eos_token": "<seed:eos>",
        "pad_token": "<seed:pad>",
    },
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo actuelle — current weather for a city (城市)",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CALL_ID = "abc123XYZ"  # Mistral requires 9 alphanumeric characters
CALL_ID_2 = "def456UVW"
ARGS = {"city": "Zürich", "unit": "celsius"}
ARGS_2 = {"city": "東京"}
ABSENT = object()  # a message without the key

# Templates that concatenate tool-call arguments into the prompt: they need the JSON text.
ARGUMENTS_AS_TEXT = {"deepseek-ai-DeepSeek-V3.1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"}
# Templates with a branch for `content is none` beside tool calls (R1-Distill renders the calls
# only there).
NONE_CONTENT_BESIDE_CALLS = {
    "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "moonshotai-Kimi-K2",
}


def _call(call_id: str, arguments: object) -> dict[str, Any]:
    function = {"name": "get_weather", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


def _tool_call_turns(arguments: object, content: object = None) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": [_call(CALL_ID, arguments)]}
    if content is not ABSENT:
        assistant["content"] = content
    return [
        {"role": "user", "content": "What's the weather in Zürich?"},
        assistant,
        {"role": "tool", "tool_call_id": CALL_ID, "content": '{"temperature": 21, "sky": "☀️"}'},
    ]


# name -> (OpenAI-style messages, render kwargs)
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "plain": ([{"role": "user", "content": "Hello! 你好 😀"}], {}),
    "system_multi_turn": (
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?\n  Explain."},
        ],
        {},
    ),
    "no_generation_prompt": (
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        {"add_generation_prompt": False},
    ),
    "tools_declared": (
        [{"role": "user", "content": "Weather in Paris?"}],
        {"tools": [WEATHER_TOOL]},
    ),
    "tool_call_and_result": (
        [
            {"role": "system", "content": "Use tools when useful."},
            *_tool_call_turns(json.dumps(ARGS, ensure_ascii=False)),
        ],
        {"tools": [WEATHER_TOOL]},
    ),
    # Templates that read message.content beside tool calls need it present ("").
    "tool_call_empty_content": (
        _tool_call_turns(json.dumps(ARGS), content=""),
        {"tools": [WEATHER_TOOL]},
    ),
    "tool_call_content_absent": (
        _tool_call_turns(json.dumps(ARGS), content=ABSENT),
        {"tools": [WEATHER_TOOL]},
    ),
    "tool_call_with_text": (
        _tool_call_turns(json.dumps(ARGS), content="Let me check."),
        {"tools": [WEATHER_TOOL]},
    ),
    # An agent's loop: two calls in one turn, their results, the answer, the next question.
    "agent_loop": (
        [
            {"role": "user", "content": "Weather in Zürich and Tokyo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _call(CALL_ID, json.dumps(ARGS)),
                    _call(CALL_ID_2, json.dumps(ARGS_2, ensure_ascii=False)),
                ],
            },
            {"role": "tool", "tool_call_id": CALL_ID, "content": "21 degrees"},
            {"role": "tool", "tool_call_id": CALL_ID_2, "content": "18 degrees"},
            {"role": "assistant", "content": "Zürich: 21 degrees, Tokyo: 18 degrees."},
            {"role": "user", "content": "Thanks! And tomorrow?"},
        ],
        {"tools": [WEATHER_TOOL]},
    ),
    "thinking_on": (
        [{"role": "user", "content": "Think about 17*23."}],
        {"enable_thinking": True, "thinking": True, "reasoning_effort": "high"},
    ),
    "thinking_off": (
        [{"role": "user", "content": "Just answer: 17*23?"}],
        {"enable_thinking": False, "thinking": False, "reasoning_effort": "low"},
    ),
    "reasoning_in_history": (
        [
            {"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "2", "reasoning_content": "Trivial sum."},
            {"role": "user", "content": "2+2?"},
        ],
        {},
    ),
    "continue_final_message": (
        [
            {"role": "user", "content": "Write a haiku."},
            {"role": "assistant", "content": "Autumn moonlight —"},
        ],
        {"continue_final_message": True, "add_generation_prompt": False},
    ),
    "consecutive_users": (
        [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
        {},
    ),
}


# Every template renders every tool conversation, except where its own rules refuse one.
TOOL_CONVERSATIONS = {name for name in CONVERSATIONS if "tool" in name or "agent" in name}
TEMPLATE_REFUSES = {("meta-llama-Llama-3.1-8B-Instruct", "agent_loop")}  # one call per turn


def _hf_shape(messages: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """What a transformers user passes to template ``name`` (see the module docstring)."""
    shaped = copy.deepcopy(messages)
    for message in shaped:
        if message.get("content") is None:
            keep_none = name in NONE_CONTENT_BESIDE_CALLS and message.get("tool_calls")
            message["content"] = None if keep_none else ""
        for call in message.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            if isinstance(arguments, str) and name not in ARGUMENTS_AS_TEXT:
                call["function"]["arguments"] = json.loads(arguments)
    return shaped


def _template_names() -> list[str]:
    if not TEMPLATES.is_dir():
        return []
    return sorted(path.stem for path in TEMPLATES.glob("*.jinja"))


@pytest.fixture(scope="module")
def hf_tokenizers(small_tokenizer_file: Path) -> Callable[[str], Any]:
    cache: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tok = transformers.PreTrainedTokenizerFast(
                    tokenizer_file=str(small_tokenizer_file), **SPECIAL_TOKENS[name]
                )
            tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
            cache[name] = tok
        return cache[name]

    return get


def _render_hf(
    tok: Any, messages: list[dict[str, Any]], kwargs: dict[str, Any], name: str
) -> str | Exception:
    options = {"add_generation_prompt": True, **kwargs}
    shaped = _hf_shape(messages, name)
    keeps_none = any("content" in m and m["content"] is None for m in shaped)
    # apply_chat_template drops None values; the renderer it calls takes them as they are.
    render_jinja_template = getattr(
        transformers.utils.chat_template_utils, "render_jinja_template", None
    )
    if keeps_none and render_jinja_template is None:
        pytest.skip("this transformers has no render_jinja_template to render a None content")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if keeps_none:
                rendered, _ = render_jinja_template(
                    [shaped], chat_template=tok.chat_template, **tok.special_tokens_map, **options
                )
                out: str = rendered[0]
            else:
                out = tok.apply_chat_template(shaped, tokenize=False, **options)
    except Exception as exc:
        return exc
    return out


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", _template_names())
def test_render_matches_transformers(
    name: str,
    conversation: str,
    make_model_dir: MakeModelDir,
    hf_tokenizers: Callable[[str], Any],
) -> None:
    messages, kwargs = CONVERSATIONS[conversation]
    model_dir = make_model_dir(
        tokenizer_config=SPECIAL_TOKENS[name],
        chat_template__jinja=(TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"),
    )
    ours = ModelTokenizer.from_dir(model_dir)
    expected = _render_hf(hf_tokenizers(name), messages, kwargs, name)
    original = copy.deepcopy(messages)
    if conversation in TOOL_CONVERSATIONS and (name, conversation) not in TEMPLATE_REFUSES:
        assert not isinstance(expected, Exception), expected
    if isinstance(expected, Exception):
        with pytest.raises(ChatTemplateError):
            ours.apply_chat_template(copy.deepcopy(messages), **kwargs)
        return
    assert ours.apply_chat_template(messages, **kwargs) == expected
    assert messages == original, "the caller's messages must not be modified"


@pytest.mark.parametrize("name", _template_names())
def test_text_parts_render_like_strings(
    name: str, make_model_dir: MakeModelDir, hf_tokenizers: Callable[[str], Any]
) -> None:
    """Text-only content parts reach every template joined, matching transformers on strings.

    Templates that render typed (image) parts get them joined too: their string branches cover
    every role, their parts branches do not (Kimi K2 prints a tool message's content as is).
    """
    model_dir = make_model_dir(
        tokenizer_config=SPECIAL_TOKENS[name],
        chat_template__jinja=(TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"),
    )
    ours = ModelTokenizer.from_dir(model_dir)
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    messages = [{"role": "system", "content": parts}, {"role": "user", "content": parts}]
    expected = _render_hf(
        hf_tokenizers(name),
        [
            {"role": "system", "content": "first\nsecond"},
            {"role": "user", "content": "first\nsecond"},
        ],
        {},
        name,
    )
    assert ours.content_format == "string"
    if isinstance(expected, Exception):  # Hermes' tool_use template needs tools
        with pytest.raises(ChatTemplateError):
            ours.apply_chat_template(messages)
        return
    assert ours.apply_chat_template(messages) == expected


def test_deepseek_tokens_match_transformers(
    deepseek_dir: Path, make_model_dir: MakeModelDir
) -> None:
    """The real DeepSeek tokenizer with the V3.1 template: same prompt text and same token ids."""
    template = (TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja").read_text(encoding="utf-8")
    ours = ModelTokenizer.from_dir(deepseek_dir, chat_template=template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoTokenizer.from_pretrained(str(deepseek_dir))
    hf.chat_template = template
    for conversation in ("plain", "system_multi_turn", "reasoning_in_history", "thinking_on"):
        messages, kwargs = CONVERSATIONS[conversation]
        options = {"add_generation_prompt": True, **kwargs}
        shaped = _hf_shape(messages, "deepseek-ai-DeepSeek-V3.1")
        expected_ids = hf.apply_chat_template(shaped, tokenize=True, return_dict=False, **options)
        text, ids = ours.encode_chat(messages, **kwargs)
        assert ids == list(expected_ids), conversation
        assert text == hf.apply_chat_template(shaped, tokenize=False, **options)


# A data URI or any URL: templates never see it, they get {"type": "image"} per image.
IMAGE_URL = "data:image/png;base64,iVBORw0KGgo="  # never decoded here
IMAGE_PART = {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "auto"}}
IMAGE_CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "one_image": [
        {"role": "user", "content": [IMAGE_PART, {"type": "text", "text": "What is this?"}]},
    ],
    "images_over_turns": [
        {"role": "system", "content": "You describe pictures."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Compare"}, IMAGE_PART, IMAGE_PART],
        },
        {"role": "assistant", "content": "Two cats."},
        {
            "role": "user",
            "content": [
                {"type": "input_image", "image_url": IMAGE_URL},  # the Responses API's part
                {"type": "input_text", "text": "And this one?"},
            ],
        },
    ],
}
# The templates with an image branch in their content loop.
IMAGE_TEMPLATES = {
    "Qwen-Qwen2-VL-7B-Instruct",
    "Mistral-Small-3.2-24B-Instruct-2506",
    "moonshotai-Kimi-K2",
}


def _hf_image_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What transformers users pass: text parts, and {"type": "image"} per image."""
    shaped = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {"type": "text", "text": part["text"]} if "text" in part else {"type": "image"}
                for part in content
            ]
        shaped.append({**message, "content": content})
    return shaped


@pytest.mark.parametrize("conversation", sorted(IMAGE_CONVERSATIONS))
@pytest.mark.parametrize("name", _template_names())
def test_images_render_as_the_templates_placeholders(
    name: str,
    conversation: str,
    make_model_dir: MakeModelDir,
    hf_tokenizers: Callable[[str], Any],
) -> None:
    """Image parts render through the template exactly as transformers renders its image parts;
    a template without an image branch refuses them."""
    messages = IMAGE_CONVERSATIONS[conversation]
    model_dir = make_model_dir(
        tokenizer_config=SPECIAL_TOKENS[name],
        chat_template__jinja=(TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"),
    )
    ours = ModelTokenizer.from_dir(model_dir)
    assert ("image" in ours.media_kinds) == (name in IMAGE_TEMPLATES)
    if name not in IMAGE_TEMPLATES:
        with pytest.raises(ChatTemplateError, match="takes no image"):
            ours.apply_chat_template(copy.deepcopy(messages))
        return
    expected = _render_hf(hf_tokenizers(name), _hf_image_parts(messages), {}, name)
    assert not isinstance(expected, Exception), expected
    original = copy.deepcopy(messages)
    rendered = ours.apply_chat_template(messages)
    assert rendered == expected
    assert messages == original, "the caller's messages must not be modified"
    if name == "Qwen-Qwen2-VL-7B-Instruct":
        images = sum(1 for m in messages for p in m["content"] if "image_url" in p)
        assert rendered.count("<|vision_start|><|image_pad|><|vision_end|>") == images
