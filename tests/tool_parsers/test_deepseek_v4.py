"""DeepSeek V4 DSML: ``<｜DSML｜tool_calls><｜DSML｜invoke name=…>…``."""

from __future__ import annotations

from .harness import Call, assert_calls, assert_stream_matches_complete, check_rendered
from .test_deepseek_v32 import TOOLS, render_dsml

P = "deepseek_v4"


def render(calls: list[Call]) -> str:
    """DeepSeek V4 output for ``calls``."""
    return render_dsml(calls, "tool_calls")


def test_single_and_parallel() -> None:
    check_rendered(P, render, [("get_weather", {"city": "1", "days": 1})], tools=TOOLS)
    calls: list[Call] = [("a", {"x": [1, {"y": "中"}]}), ("b", {})]
    check_rendered(P, render, calls, before="ok\n", after="\nthen")


def test_v32_block_is_text_here_and_v4_block_is_not_text_for_v32() -> None:
    v32 = render_dsml([("get_weather", {"city": "x"})], "function_calls")
    result = assert_stream_matches_complete(P, v32, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], v32)
    v4 = render([("get_weather", {"city": "x"})])
    assert_calls(assert_stream_matches_complete(P, v4, TOOLS), [("get_weather", {"city": "x"})])


def test_unknown_function() -> None:
    text = render([("zap", {})])
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)
