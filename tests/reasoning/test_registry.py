"""Built-in reasoning parsers: registration, names, aliases, model patterns, API conformance."""

from __future__ import annotations

import pytest

from turnout import hookimpl, load_plugins
from turnout.errors import PluginError
from turnout.hookspecs import Register
from turnout.plugins.reasoning_parsers import BUILTIN_REASONING_PARSERS
from turnout.reasoning import MarkerReasoningParser, ReasoningParser

from ._helpers import REGISTRY

BRIEF_NAMES = {
    "deepseek_r1", "qwen3", "qwen3_thinking", "deepseek_v31", "glm45", "kimi", "kimi_k2", "step3",
    "minimax", "minimax_append_think", "mistral", "cohere_cmd", "granite", "nano_v3", "seed_oss",
    "gpt_oss",
}  # fmt: skip


def test_every_builtin_name_and_alias_is_registered() -> None:
    assert set(REGISTRY.names()) == BRIEF_NAMES == {row[0] for row in BUILTIN_REASONING_PARSERS}
    for name, _target, aliases, _models, description in BUILTIN_REASONING_PARSERS:
        assert description
        registration = REGISTRY.get(name)
        assert registration.distribution == "turnout"
        for alias in aliases:
            assert REGISTRY.canonical(alias) == name
            assert REGISTRY.canonical(alias.upper()) == name


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("deepseek-r1", "deepseek_r1"),
        ("qwen3-thinking", "qwen3_thinking"),
        ("glm47", "glm45"),
        ("minimax-m2", "minimax"),
        ("minimax-append-think", "minimax_append_think"),
        ("nemotron-3", "nano_v3"),
        ("gpt-oss", "gpt_oss"),
        ("seed-oss", "seed_oss"),
    ],
)
def test_aliases_from_the_brief(alias: str, name: str) -> None:
    assert REGISTRY.canonical(alias) == name


@pytest.mark.parametrize("name", sorted(BRIEF_NAMES))
def test_created_parsers_follow_the_protocol(name: str) -> None:
    factory = REGISTRY.factory(name)
    parser = REGISTRY.create(name, start_in_reasoning=None)
    assert isinstance(parser, ReasoningParser)
    assert isinstance(factory.start_marker, str)
    assert factory.start_marker
    assert isinstance(factory.needs_special_tokens, bool)
    assert REGISTRY.create(name) is not parser
    with pytest.raises(TypeError, match="start_in_reasoning"):
        REGISTRY.create(name, start_in_reasoning="yes")


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("deepseek-ai/DeepSeek-R1", "deepseek_r1"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek_r1"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1"),
        ("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "deepseek_r1"),
        ("Qwen/QwQ-32B", "deepseek_r1"),
        ("Qwen/Qwen3-8B", "qwen3"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3"),
        ("Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3_thinking"),
        ("Qwen/Qwen3-VL-8B-Thinking", "qwen3_thinking"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek_v31"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v31"),
        ("zai-org/GLM-4.5", "glm45"),
        ("zai-org/GLM-4.5-Air", "glm45"),
        ("zai-org/GLM-4.7", "glm45"),
        ("moonshotai/Kimi-K2-Thinking", "kimi_k2"),
        ("moonshotai/Kimi-K2.5", "kimi_k2"),
        ("moonshotai/Kimi-K2-Instruct-0905", None),  # does not think: no reasoning parser
        ("moonshotai/Kimi-VL-A3B-Thinking-2506", "kimi"),
        ("stepfun-ai/step3", "step3"),
        ("MiniMaxAI/MiniMax-M2", "minimax"),
        ("mistralai/Magistral-Small-2509", "mistral"),
        ("CohereLabs/command-a-reasoning-08-2025", "cohere_cmd"),
        ("ibm-granite/granite-3.2-8b-instruct", "granite"),
        ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nano_v3"),
        ("ByteDance-Seed/Seed-OSS-36B-Instruct", "seed_oss"),
        ("openai/gpt-oss-120b", "gpt_oss"),
        ("openai/gpt-oss-20b", "gpt_oss"),
        ("meta-llama/Llama-3.1-8B-Instruct", None),
        ("mistralai/Mistral-7B-Instruct-v0.3", None),
    ],
)
def test_for_model_picks_the_family(model: str, name: str | None) -> None:
    assert REGISTRY.for_model(model) == name


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(PluginError, match="did you mean 'qwen3'"):
        REGISTRY.get("qwen4")


def test_marker_sets_that_streaming_cannot_split_are_rejected() -> None:
    with pytest.raises(ValueError, match="occurs inside"):

        class Prefixed(MarkerReasoningParser):
            end_markers = ("</think>", "</think>!")

    with pytest.raises(ValueError, match="occurs inside"):

        class Infix(MarkerReasoningParser):
            end_markers = ("<end>", "x<end>y")

    with pytest.raises(ValueError, match="whitespace"):

        class Spaced(MarkerReasoningParser):
            start_marker = " <think>"

    with pytest.raises(TypeError, match="non-empty"):

        class Empty(MarkerReasoningParser):
            end_markers = ("",)


def test_a_plugin_family_needs_only_class_attributes() -> None:
    class Reason(MarkerReasoningParser):
        start_marker = "<reason>"
        end_markers = ("</reason>",)

    result = Reason().parse_complete("<reason>why</reason>what")
    assert (result.reasoning_text, result.normal_text) == ("why", "what")
    assert (
        Reason(start_in_reasoning=True).parse_complete("why</reason>what").reasoning_text == "why"
    )


class _ThirdParty:
    """An in-process plugin registering a family built on the generic marker parser."""

    class Bracket(MarkerReasoningParser):
        start_marker = "[[think]]"
        end_markers = ("[[/think]]",)

    @hookimpl
    def turnout_register_reasoning_parsers(self, register: Register) -> None:
        register("bracket", self.Bracket, models=["*bracket-model*"], aliases=["brk"])


def test_a_third_party_family_registers_like_the_builtins() -> None:
    plugins = load_plugins(extra=[(_ThirdParty(), "turnout-bracket", "0.1")])
    registry = plugins.reasoning_parsers
    assert "brk" in registry
    assert registry.for_model("acme/Bracket-Model-7B") == "bracket"
    result = registry.create("brk", start_in_reasoning=None).parse_complete("[[think]]a[[/think]]b")
    assert (result.reasoning_text, result.normal_text) == ("a", "b")
    assert registry.get("bracket").distribution == "turnout-bracket"


def test_end_markers_are_part_of_the_protocol() -> None:
    """The pipeline reads ``end_markers`` of every reasoning parser: one without them is not
    a :class:`ReasoningParser`."""

    class WithoutEnd:
        start_marker = "<think>"
        needs_special_tokens = False

        def parse_complete(self, text: str) -> None: ...
        def parse_incremental(self, delta: str) -> None: ...
        def finish(self) -> None: ...

    class WithEnd(WithoutEnd):
        end_markers = ("</think>",)

    assert not isinstance(WithoutEnd(), ReasoningParser)
    assert isinstance(WithEnd(), ReasoningParser)
