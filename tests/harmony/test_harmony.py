"""gpt-oss through openai-harmony, offline: the vocabulary from a PyPI package, a conversation
rendered, an output (reasoning, a tool call on the commentary channel, a final answer) parsed —
streamed in any chunking or at once, with the same result."""

from __future__ import annotations

import gzip
import itertools
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.plugins.harmony import (
    HarmonyCall,
    HarmonyOutput,
    HarmonyStream,
    HarmonyUnavailable,
    load_gpt_oss_encoding,
    o200k_vocab_dir,
    parse_output,
    render_chat,
    vocab,
)
from turnout.tokenizer import ChatTemplateError

from .samples import ANSWER, CALL, WEATHER


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: any connection attempt (openai-harmony's download) fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    offline(monkeypatch)


@pytest.fixture(scope="module")
def encoding(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        offline(patch)
        return load_gpt_oss_encoding(tmp_path_factory.mktemp("vocab"))


def tokens(encoding: Any, text: str) -> list[int]:
    return list(encoding.encode(text, allowed_special="all"))


def test_vocabulary_is_written_from_the_package_and_verified(tmp_path: Path) -> None:
    directory = o200k_vocab_dir(tmp_path / "cache")
    written = directory / vocab.O200K_FILE
    assert vocab._sha256(written) == vocab.O200K_SHA256
    assert written.read_bytes().startswith(b"IQ== 0\n")
    assert o200k_vocab_dir(tmp_path / "cache") == directory  # found again, not rewritten
    assert not list(directory.glob(".o200k-*"))  # no temporary left


def test_a_corrupt_cached_copy_is_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / vocab.O200K_FILE).write_bytes(b"IQ== 0\n")
    o200k_vocab_dir(cache)
    assert vocab._sha256(cache / vocab.O200K_FILE) == vocab.O200K_SHA256


def test_a_wrong_bundled_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "o200k_base.tiktoken.gz"
    fake.write_bytes(gzip.compress(b"IQ== 0\n"))
    monkeypatch.setattr(vocab, "_bundled_copy", lambda: fake)
    with pytest.raises(HarmonyUnavailable, match="does not hold the o200k_base vocabulary"):
        o200k_vocab_dir(tmp_path / "cache")
    assert not (tmp_path / "cache" / vocab.O200K_FILE).exists()


def test_without_the_package_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vocab, "_bundled_copy", lambda: None)
    with pytest.raises(HarmonyUnavailable, match=r"turnout\[harmony\].*TIKTOKEN_ENCODINGS_BASE"):
        o200k_vocab_dir(tmp_path / "empty")


def test_openai_harmony_checks_the_hash_of_an_operator_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / vocab.O200K_FILE).write_bytes(b"IQ== 0\n")
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(tmp_path))
    with pytest.raises(HarmonyUnavailable, match="hash mismatch"):
        load_gpt_oss_encoding(tmp_path / "unused")


def test_an_operator_directory_is_used_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / vocab.O200K_FILE).write_text("placed by the operator")
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(tmp_path))
    assert o200k_vocab_dir(tmp_path / "unused") == tmp_path


def test_renders_a_tool_conversation(encoding: Any) -> None:
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Zürich?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    ids = render_chat(encoding, messages, tools=[WEATHER], reasoning_effort="high")
    prompt = encoding.decode_utf8(ids)
    assert prompt.startswith("<|start|>system<|message|>")
    assert "Reasoning: high" in prompt
    assert "<|start|>developer<|message|># Instructions\n\nAnswer briefly." in prompt
    assert "type get_weather = (_: {\ncity: string,\n}) => any;" in prompt
    assert "<|start|>user<|message|>Weather in Zürich?<|end|>" in prompt
    assert "Calls to these tools must go to the commentary channel: 'functions'." in prompt
    assert (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
        '<|message|>{"city": "Zürich"}<|call|>'
    ) in prompt
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" in prompt
    assert "Need the tool." in prompt  # reasoning before a call is kept for the model
    assert prompt.endswith("<|start|>assistant")


def test_earlier_reasoning_is_dropped_and_bad_input_refused(encoding: Any) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
        {"role": "user", "content": "3+3?"},
    ]
    prompt = encoding.decode_utf8(render_chat(encoding, messages))
    assert "Add them." not in prompt
    assert "<|start|>assistant<|channel|>final<|message|>4<|end|>" in prompt
    for bad, message in [
        ([{"role": "robot", "content": "x"}], "not supported by gpt-oss"),
        ([{"role": "tool", "tool_call_id": "nope", "content": "x"}], "earlier tool call"),
    ]:
        with pytest.raises(ChatTemplateError, match=message):
            render_chat(encoding, bad)
    with pytest.raises(ChatTemplateError, match="reasoning_effort"):
        render_chat(encoding, messages, reasoning_effort="max")


def test_parses_reasoning_a_tool_call_and_a_final_answer(encoding: Any) -> None:
    call = parse_output(encoding, tokens(encoding, CALL))
    assert call.reasoning == "The user wants the weather; call the tool."
    assert call.content == ""
    assert call.calls == [HarmonyCall("get_weather", '{"city": "Zürich"}')]
    assert json.loads(call.calls[0].arguments) == {"city": "Zürich"}
    answer = parse_output(encoding, tokens(encoding, ANSWER))
    assert answer == HarmonyOutput("21 degrees, sunny.", "It is 21 °C and sunny in Zürich. ☀️", [])
    # the stop tokens a worker is given for this model end those outputs
    assert tokens(encoding, CALL)[-1] in encoding.stop_tokens_for_assistant_actions()


def test_cut_off_and_malformed_outputs_keep_their_text(encoding: Any) -> None:
    cut = parse_output(encoding, tokens(encoding, CALL)[:-6])
    assert [c.name for c in cut.calls] == ["get_weather"]
    assert cut.calls[0].arguments.startswith('{"city')
    plain = parse_output(encoding, tokens(encoding, "no harmony header at all"))
    assert plain == HarmonyOutput("", "no harmony header at all", [])
    stray = parse_output(encoding, tokens(encoding, "<|channel|>final<|message|>a<|end|><|end|>b"))
    assert stray.content == "a<|end|>b"
    preamble = parse_output(
        encoding,
        tokens(
            encoding,
            "<|channel|>commentary<|message|>Checking…<|end|><|start|>assistant"
            "<|channel|>commentary to=browser.search<|message|>{}<|call|>",
        ),
    )
    assert preamble.content == "Checking…"
    assert preamble.calls == [HarmonyCall("browser.search", "{}")]  # not a function: whole name


#: A second call after the first, when the worker does not stop at ``<|call|>``.
SECOND_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Bern"}<|call|>'
)


def test_two_calls_in_one_output_stay_two(encoding: Any) -> None:
    both = parse_output(encoding, tokens(encoding, CALL + SECOND_CALL))
    assert both.calls == [
        HarmonyCall("get_weather", '{"city": "Zürich"}'),
        HarmonyCall("get_weather", '{"city": "Bern"}'),
    ]
    assert both.content == ""


def test_a_streamed_call_names_its_function_once(encoding: Any) -> None:
    """Token by token, each call's name comes with its first piece of arguments only (a name
    on every piece would be a new call id on every streamed chunk)."""
    stream = HarmonyStream(encoding)
    pieces = [
        delta
        for token in tokens(encoding, CALL + SECOND_CALL)
        for delta in stream.feed([token])
        if delta.kind == "call"
    ]
    for call in (0, 1):
        names = [piece.name for piece in pieces if piece.call == call]
        assert len(names) > 2  # the arguments came in several pieces
        assert names == ["get_weather"] + [None] * (len(names) - 1)


OUTPUTS = [
    CALL,
    ANSWER,
    CALL + ANSWER,
    CALL + SECOND_CALL,
    "<|channel|>final<|message|>x<|end|><|end|>émoji 😀",
]


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(OUTPUTS), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_streaming_in_any_chunking_equals_one_shot(
    encoding: Any, which: str, cuts: list[int]
) -> None:
    ids = tokens(encoding, which)
    bounds = sorted({0, len(ids), *(c % (len(ids) + 1) for c in cuts)})
    stream = HarmonyStream(encoding)
    folded = HarmonyOutput()
    for start, end in itertools.pairwise(bounds):
        for delta in stream.feed(ids[start:end]):
            folded.add(delta)
    for delta in stream.finish():
        folded.add(delta)
    assert folded == parse_output(encoding, ids)
