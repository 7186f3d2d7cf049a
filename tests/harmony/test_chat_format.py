"""The ``harmony`` chat format as a plugin: registered through the built-in entry point, chosen
only by config, and read by the choice processor token by token — the folded answer is the same
however the tokens arrive; a reader that fails leaves the rest of the output as plain content."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout
from turnout.chat_formats import ChatFormat, FormatDelta, OutputReader
from turnout.config import build_config
from turnout.demo_model import path as demo_path
from turnout.errors import ApiError
from turnout.generation.choice import ChoiceProcessor
from turnout.generation.events import ChoiceDelta
from turnout.generation.models import ModelTable
from turnout.plugin_choice import choose_plugins
from turnout.plugins.harmony import HarmonyChatFormat
from turnout.wire.proto import sglang_scheduler_pb2 as pb

from ..generation.outputs import TOKENIZER
from .samples import ANSWER, CALL
from .test_harmony import offline

PLUGINS = turnout.load_plugins()


@pytest.fixture(scope="module")
def harmony(tmp_path_factory: pytest.TempPathFactory) -> HarmonyChatFormat:
    with pytest.MonkeyPatch.context() as patch:
        offline(patch)
        return HarmonyChatFormat(tmp_path_factory.mktemp("vocab"))


def test_harmony_is_registered_and_chosen_only_by_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path))
    registry = PLUGINS.chat_formats
    assert registry.canonical("openai_harmony") == "harmony"
    assert isinstance(registry.create("harmony"), HarmonyChatFormat)
    assert registry.for_model("openai/gpt-oss-120b") is None
    config = build_config({"models": {"gpt-oss-120b": {"chat_format": "harmony"}}})
    assert choose_plugins("gpt-oss-120b", config, PLUGINS).chat_format == "harmony"
    assert choose_plugins("gpt-oss-20b", config, PLUGINS).chat_format is None


def test_the_format_follows_the_plugin_api(harmony: HarmonyChatFormat) -> None:
    assert isinstance(harmony, ChatFormat)
    assert isinstance(harmony.reader(), OutputReader)
    prompt = harmony.render(
        [{"role": "user", "content": "Hi"}], tools=None, options={"reasoning_effort": "low"}
    )
    assert "Reasoning: low" in prompt.text
    assert harmony.encoding.decode(prompt.ids) == prompt.text


class _Registers:
    """An in-process plugin registering one chat format."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory

    @turnout.hookimpl
    def turnout_register_chat_formats(self, register: Any) -> None:
        register("broken", self._factory)


def test_a_format_that_cannot_start_makes_its_model_a_503() -> None:
    def broken() -> ChatFormat:
        raise RuntimeError("no vocabulary here")

    plugins = turnout.load_plugins(extra=[(_Registers(broken), "broken-format", "1.0")])
    config = build_config(
        {"models": {"m": {"chat_format": "broken", "tokenizer_path": str(demo_path())}}}
    )
    table = ModelTable(config, plugins, lambda: ["m"])
    with pytest.raises(ApiError) as caught:
        asyncio.run(table.runtime("m"))
    assert caught.value.status == 503
    assert "chat format 'broken' is unavailable: no vocabulary here" in caught.value.message


def _processor(reader: OutputReader, *, calls: bool = True) -> ChoiceProcessor:
    return ChoiceProcessor(
        0,
        decoder=TOKENIZER.incremental_detokenizer(skip_special_tokens=False),
        hidden_stop_ids=TOKENIZER.eos_token_ids,
        reader=reader,
        reader_calls=calls,
        reader_name="harmony",
    )


def _fold(processor: ChoiceProcessor, chunks: Sequence[Sequence[int]]) -> dict[str, Any]:
    deltas: list[ChoiceDelta | None] = [processor.push(chunk) for chunk in chunks]
    last, end = processor.finish("stop", None)
    deltas.append(last)
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}}
    for delta in deltas:
        if delta is None:
            continue
        out["content"] += delta.content
        out["reasoning"] += delta.reasoning
        for piece in delta.tool_calls:
            name, arguments = out["calls"].get(piece.index, (None, ""))
            out["calls"][piece.index] = (name or piece.name, arguments + piece.arguments)
    out["finish"] = end.finish_reason
    return out


def _chunks(tokens: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({c % (len(tokens) + 1) for c in cuts} | {0, len(tokens)})
    return [tokens[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 200), max_size=8), answer=st.booleans())
def test_any_chunking_folds_to_the_one_shot_answer(
    harmony: HarmonyChatFormat, cuts: list[int], answer: bool
) -> None:
    tokens = list(harmony.encoding.encode(ANSWER if answer else CALL, allowed_special="all"))
    whole = _fold(_processor(harmony.reader()), [tokens])
    assert _fold(_processor(harmony.reader()), _chunks(tokens, cuts)) == whole
    if answer:
        assert whole["content"] == "It is 21 °C and sunny in Zürich. ☀️"
        assert whole["finish"] == "stop"
    else:
        assert whole["calls"] == {0: ("get_weather", '{"city": "Zürich"}')}
        assert whole["reasoning"] == "The user wants the weather; call the tool."
        assert whole["finish"] == "tool_calls"


def test_without_tools_a_call_is_content(harmony: HarmonyChatFormat) -> None:
    tokens = list(harmony.encoding.encode(CALL, allowed_special="all"))
    folded = _fold(_processor(harmony.reader(), calls=False), [tokens])
    assert folded["calls"] == {}
    assert folded["content"] == '{"city": "Zürich"}'
    assert folded["finish"] == "stop"


class _Failing:
    def __init__(self) -> None:
        self.fed = 0

    def feed(self, token_ids: Sequence[int]) -> list[FormatDelta]:
        self.fed += 1
        if self.fed > 1:
            raise ValueError("lost track")
        return [FormatDelta("reasoning", "thinking")]

    def finish(self) -> list[FormatDelta]:
        raise AssertionError("a failed reader is not asked again")


def test_a_failing_reader_leaves_plain_content() -> None:
    processor = _processor(_Failing())
    first = TOKENIZER.encode("hello", add_special_tokens=False)
    rest = TOKENIZER.encode(" world", add_special_tokens=False)
    folded = _fold(processor, [first, rest, rest])
    assert folded["reasoning"] == "thinking"
    assert folded["content"] == " world world"


class _FailingAtTheEnd:
    def feed(self, token_ids: Sequence[int]) -> list[FormatDelta]:
        return [FormatDelta("content", "kept")]

    def finish(self) -> list[FormatDelta]:
        raise ValueError("cannot end")


def test_a_reader_failing_at_the_end_keeps_what_it_gave() -> None:
    folded = _fold(_processor(_FailingAtTheEnd()), [[1, 2]])
    assert folded["content"] == "kept"
    assert folded["finish"] == "stop"


def test_the_stop_token_a_reader_reads_has_no_logprob() -> None:
    """A chat format reads the stop token (it ends its messages), but the answer's logprobs
    cover the text's tokens only, as with the parsers."""
    eos = min(TOKENIZER.eos_token_ids)
    ids = [*TOKENIZER.encode("hello", add_special_tokens=False), eos]
    processor = ChoiceProcessor(
        0,
        decoder=TOKENIZER.incremental_detokenizer(skip_special_tokens=False),
        hidden_stop_ids=TOKENIZER.eos_token_ids,
        reader=_FailingAtTheEnd(),
        token_piece=TOKENIZER.pieces.piece,
    )
    logprobs = pb.OutputLogProbs(token_ids=ids, token_logprobs=[-0.5] * len(ids))
    delta = processor.push(ids, logprobs)
    assert delta is not None
    assert [lp.token_id for lp in delta.logprobs or []] == ids[:-1]
