"""Per-family examples: one-shot, streamed one character at a time, and in realistic chunks."""

from __future__ import annotations

import pytest

from turnout.reasoning import ReasoningResult, ReasoningStep
from turnout.testing import run_reasoning_parser as stream

from ._helpers import make

# (parser, start_in_reasoning, output, expected reasoning, expected normal)
CASES: list[tuple[str, bool | None, str, str, str]] = [
    # DeepSeek-R1: the prompt opened <think>; bytes after </think> are kept as they are.
    ("deepseek_r1", None, "Let me think.\n</think>\n\nThe answer is 4.",
     "Let me think.\n", "\n\nThe answer is 4."),
    ("deepseek_r1", None, "<think>\nhmm</think>ok", "\nhmm", "ok"),
    ("deepseek_r1", None, "cut off by max_tokens", "cut off by max_tokens", ""),
    ("deepseek_r1", None, "", "", ""),
    ("deepseek_r1", False, "plain answer", "", "plain answer"),
    ("deepseek_r1", False, "<think>r</think>a", "r", "a"),
    # Qwen3 hybrid: explicit tags; no tags means plain content.
    ("qwen3", None, "<think>foo</think> hello", "foo", " hello"),
    ("qwen3", None, "\n\n<think>\nplan\n</think>\n\nanswer", "\nplan\n", "\n\n\n\nanswer"),
    ("qwen3", None, "just an answer", "", "just an answer"),
    ("qwen3", None, "<think>never closed", "never closed", ""),
    # A start marker after normal text still opens reasoning (SGLang streaming, smg).
    ("qwen3", None, "normal text <think>reasoning", "reasoning", "normal text "),
    ("qwen3", None, "Use <think>tags</think> like this.", "tags", "Use  like this."),
    ("qwen3", None, "a<think>b</think>c<think>d</think>", "b", "ac<think>d</think>"),
    ("qwen3", None, "</think>stray", "", "</think>stray"),
    ("qwen3", True, "prompt opened it</think>answer", "prompt opened it", "answer"),
    ("qwen3", True, "  <think>r</think>a", "  r", "a"),
    ("qwen3", None, "<think>a<think>b</think>c</think>d", "a<think>b", "c</think>d"),
    # Qwen3: a tool call inside unterminated reasoning ends it; the call stays in the text.
    ("qwen3", None, "<think>I will call it.\n<tool_call>\n{}\n</tool_call>",
     "I will call it.\n", "<tool_call>\n{}\n</tool_call>"),
    ("qwen3", None, "<think>r</think>text<tool_call>{}", "r", "text<tool_call>{}"),
    ("qwen3", None, "<tool_call>{}</tool_call>", "", "<tool_call>{}</tool_call>"),
    ("qwen3_thinking", None, "step 1, step 2\n</think>\n\n42", "step 1, step 2\n", "\n\n42"),
    ("qwen3_thinking", None, "plan<tool_call>{}", "plan", "<tool_call>{}"),
    ("qwen3_thinking", False, "42", "", "42"),
    ("deepseek_v31", None, "no thinking here", "", "no thinking here"),
    ("deepseek_v31", True, "thinking</think>answer", "thinking", "answer"),
    ("glm45", None, "<think>Let me see.</think>\nSunny.", "Let me see.", "\nSunny."),
    ("glm45", None, "<think></think>Direct.", "", "Direct."),
    # Plain text is content (as in SGLang and smg); GLM-4.7/5 templates open <think> in the
    # prompt (the pipeline then passes True): a lone </think> ends that reasoning.
    ("glm45", None, "Plain answer.", "", "Plain answer."),
    ("glm45", True, "The user wants weather.</think>Sunny.", "The user wants weather.", "Sunny."),
    ("glm45", None, "<tool_call>get_weather\n<arg_key>city</arg_key>",
     "", "<tool_call>get_weather\n<arg_key>city</arg_key>"),
    ("glm45", False, "Direct answer.", "", "Direct answer."),
    ("glm45", False, "no prompt think</think>x", "", "no prompt think</think>x"),
    ("kimi", None, "◁think▷look at the image◁/think▷A cat.", "look at the image", "A cat."),
    ("kimi", None, "<think>not kimi markers</think>", "", "<think>not kimi markers</think>"),
    # Kimi-K2: the tool section ends reasoning and stays in the normal text.
    ("kimi_k2", None, "<think>call it<|tool_calls_section_begin|><|tool_call_begin|>x",
     "call it", "<|tool_calls_section_begin|><|tool_call_begin|>x"),
    ("kimi_k2", None, "<think>r</think>text<|tool_calls_section_begin|>y",
     "r", "text<|tool_calls_section_begin|>y"),
    ("kimi_k2", True, "<|tool_calls_section_begin|>z", "", "<|tool_calls_section_begin|>z"),
    ("kimi_k2", None, "opened by the prompt</think>answer", "opened by the prompt", "answer"),
    ("kimi_k2", False, "answer", "", "answer"),
    ("deepseek_r1", None, "no start marker</think>answer", "no start marker", "answer"),
    ("step3", None, "reason</think>answer", "reason", "answer"),
    ("minimax", None, "I should greet.</think>\n\nHello!", "I should greet.", "\n\nHello!"),
    ("minimax_append_think", None, "I should greet.</think>\n\nHello!",
     "", "<think>I should greet.</think>\n\nHello!"),
    ("minimax_append_think", None, "<think>r</think>a", "", "<think>r</think>a"),
    ("minimax_append_think", None, "<thi", "", "<think><thi"),
    ("minimax_append_think", None, "", "", ""),
    ("minimax_append_think", False, "r</think>a", "", "r</think>a"),
    ("mistral", None, "[THINK]Reason.[/THINK]Answer.", "Reason.", "Answer."),
    ("mistral", None, "Answer only.", "", "Answer only."),
    ("mistral", True, "Reason.[/THINK]Answer.", "Reason.", "Answer."),
    ("mistral", None, "Sure. [THINK]Reason.[/THINK]Answer.", "Reason.", "Sure. Answer."),
    ("cohere_cmd", None, "<|START_THINKING|>plan<|END_THINKING|>result", "plan", "result"),
    ("granite", None, "Here is my thought process:\nfoo\nHere is my response:\nbar",
     "\nfoo\n", "\nbar"),
    ("granite", None, "Here's my thought process: a Here's my response: b", " a ", " b"),
    ("granite", None, "Here is my response: no thoughts", "", "Here is my response: no thoughts"),
    ("granite", None, "Here is my thought process: truncated Here is",
     " truncated Here is", ""),
    ("nano_v3", None, "<think>r</think>a", "r", "a"),
    ("nano_v3", True, "r</think>a", "r", "a"),
    ("seed_oss", None,
     "<seed:think>x<seed:cot_budget_reflect>used 10</seed:cot_budget_reflect>y</seed:think>z",
     "x<seed:cot_budget_reflect>used 10</seed:cot_budget_reflect>y", "z"),
]  # fmt: skip


def _ids(case: tuple[str, bool | None, str, str, str]) -> str:
    return f"{case[0]}-{case[1]}-{case[2][:20]!r}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_example(case: tuple[str, bool | None, str, str, str]) -> None:
    name, start, text, reasoning, normal = case
    expected = ReasoningResult(reasoning, normal)
    assert make(name, start).parse_complete(text) == expected
    assert stream(make(name, start), list(text)) == expected
    assert stream(make(name, start), [text[i : i + 3] for i in range(0, len(text), 3)]) == expected


HARMONY_FINAL = (
    "<|channel|>analysis<|message|>User greets; answer briefly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
)
HARMONY_TOOL = (
    "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)


@pytest.mark.parametrize(
    ("text", "reasoning", "normal"),
    [
        (HARMONY_FINAL, "User greets; answer briefly.",
         "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>"),
        (HARMONY_TOOL, "Need the weather tool.",
         "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
         '<|message|>{"city":"Paris"}<|call|>'),
        # Several analysis messages, with a commentary preamble in between.
        ("<|channel|>analysis<|message|>one<|end|>"
         "<|start|>assistant<|channel|>commentary<|message|>Checking…<|end|>"
         "<|start|>assistant<|channel|>analysis<|message|>two<|end|>"
         "<|start|>assistant<|channel|>final<|message|>done",
         "onetwo",
         "<|start|>assistant<|channel|>commentary<|message|>Checking…<|end|>"
         "<|start|>assistant<|channel|>final<|message|>done"),
        # An analysis message with a recipient is a (built-in) tool call: it passes through.
        ("<|channel|>analysis to=python code<|message|>print(1)<|call|>",
         "", "<|channel|>analysis to=python code<|message|>print(1)<|call|>"),
        # Truncated analysis: all of it is reasoning.
        ("<|channel|>analysis<|message|>still thinking", "still thinking", ""),
        # Analysis that runs into the next message without <|end|>.
        ("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b",
         "a", "<|start|>assistant<|channel|>final<|message|>b"),
        # No harmony markup at all: plain content.
        ("plain text", "", "plain text"),
    ],
)  # fmt: skip
def test_gpt_oss_harmony(text: str, reasoning: str, normal: str) -> None:
    expected = ReasoningResult(reasoning, normal)
    assert make("gpt_oss").parse_complete(text) == expected
    assert stream(make("gpt_oss"), list(text)) == expected


def test_gpt_oss_starting_inside_analysis() -> None:
    parser = make("gpt_oss", start_in_reasoning=True)
    result = parser.parse_complete("thinking<|end|><|start|>assistant<|channel|>final<|message|>x")
    assert result == ReasoningResult("thinking", "<|start|>assistant<|channel|>final<|message|>x")


def test_partial_markers_are_held_and_released() -> None:
    parser = make("qwen3", start_in_reasoning=True)
    step = parser.parse_incremental("abc</thi")
    assert (step.reasoning_text, step.normal_text) == ("abc", "")
    step = parser.parse_incremental("nk>def")
    assert (step.reasoning_text, step.normal_text) == ("", "def")
    assert parser.parse_incremental("</").normal_text == "</"  # after reasoning: no scanning

    parser = make("qwen3", start_in_reasoning=True)
    assert parser.parse_incremental("x</").reasoning_text == "x"
    assert parser.parse_incremental("answer").reasoning_text == "</answer"

    parser = make("qwen3", start_in_reasoning=True)
    assert parser.parse_incremental("truncated </thi").reasoning_text == "truncated "
    assert parser.finish().reasoning_text == "</thi"
    assert parser.finish().reasoning_text == ""


def test_start_marker_is_held_only_while_it_can_still_match() -> None:
    parser = make("qwen3")
    assert parser.parse_incremental("<thi").normal_text == ""
    step = parser.parse_incremental("s is html")
    assert (step.reasoning_text, step.normal_text) == ("", "<this is html")

    parser = make("qwen3")
    assert parser.parse_incremental("<th") == parser.parse_incremental("ink")
    step = parser.parse_incremental(">r")
    assert (step.reasoning_text, step.normal_text) == ("r", "")
    assert parser.finish().reasoning_text == ""


@pytest.mark.parametrize(
    ("name", "chunks", "reasoning", "normal"),
    [
        # Magistral: each marker is one control token, so it arrives as a chunk of its own.
        ("mistral", ["[THINK]", "Reason", "ing.", "[/THINK]", "Answer."], "Reasoning.", "Answer."),
        ("mistral", ["[THINK]Reasoning.", "[/THINK]", "Answer."], "Reasoning.", "Answer."),
        ("mistral", ["[THINK]", "Reasoning.", "[/THINK]"], "Reasoning.", ""),
        ("mistral", ["[THINK]", "Reasoning.", "[/", "THINK]", "Answer."], "Reasoning.", "Answer."),
        ("qwen3", ["normal text ", "<think>", "reasoning"], "reasoning", "normal text "),
        ("qwen3", ["normal text <th", "ink>reasoning"], "reasoning", "normal text "),
        ("qwen3", ["<think>plan", "<tool_", "call>{}"], "plan", "<tool_call>{}"),
        ("glm45", ["<think>thinking", "</th", "ink>", "answer"], "thinking", "answer"),
    ],
)
def test_streamed_chunks(name: str, chunks: list[str], reasoning: str, normal: str) -> None:
    assert stream(make(name), chunks) == ReasoningResult(reasoning, normal)
    assert make(name).parse_complete("".join(chunks)) == ReasoningResult(reasoning, normal)


def test_marker_prefix_at_a_chunk_end_is_held_until_decided() -> None:
    parser = make("qwen3")
    step = parser.parse_incremental("normal text <thi")
    assert (step.reasoning_text, step.normal_text) == ("", "normal text ")
    step = parser.parse_incremental("nk>reasoning")
    assert (step.reasoning_text, step.normal_text) == ("reasoning", "")

    parser = make("qwen3")
    assert parser.parse_incremental("a <thi").normal_text == "a "
    assert parser.parse_incremental("s is html").normal_text == "<this is html"

    parser = make("mistral")
    assert parser.parse_incremental("[THINK]r[/TH") == ReasoningStep("r", "")
    assert parser.finish() == ReasoningStep("[/TH", "")


def test_granite_releases_a_false_response_phrase_as_reasoning() -> None:
    parser = make("granite")
    out = [
        parser.parse_incremental(d) for d in ("Here is my thought process:", " Here is", " Here")
    ]
    assert "".join(s.reasoning_text for s in out) == " Here is "
    assert parser.parse_incremental(" we go").reasoning_text == "Here we go"


def test_in_reasoning_tracks_the_stream() -> None:
    parser = make("deepseek_r1")
    assert parser.in_reasoning  # type: ignore[attr-defined]
    parser.parse_incremental("a</think>b")
    assert not parser.in_reasoning  # type: ignore[attr-defined]
    parser = make("qwen3")
    assert not parser.in_reasoning  # type: ignore[attr-defined]
    parser.parse_incremental("<think>")
    assert parser.in_reasoning  # type: ignore[attr-defined]


def test_parse_complete_does_not_disturb_the_stream() -> None:
    parser = make("qwen3")
    parser.parse_incremental("<think>abc")
    assert parser.parse_complete("plain") == ReasoningResult("", "plain")
    assert parser.parse_incremental("</think>z").normal_text == "z"
