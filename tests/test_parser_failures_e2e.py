"""A third-party parser that raises: the answer degrades to unparsed text (chat) or a 500 naming
the parser (``/parse/*``), and ``turnout_parser_errors_total`` counts it under its kind and
registered name. Real router, real simulated worker, a real installed plugin distribution."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.ops.helpers import chat, scrape
from tests.server.harness import MODEL, Router, run_router
from tests.support import sse_events

from .plugin_fixtures import make_distribution

#: A plugin whose parsers raise once their output contains a trigger word.
BROKEN_PLUGIN = """
from turnout import hookimpl
from turnout.reasoning import ReasoningResult, ReasoningStep
from turnout.tool_calls import ToolParseResult, ToolParseStep


class Touchy:
    call_id_style = "openai"
    needs_special_tokens = False

    def __init__(self):
        self.seen = ""

    def parse_complete(self, text, tools):
        if "BOOM" in text:
            raise RuntimeError("tool parser exploded")
        return ToolParseResult(text)

    def parse_incremental(self, delta, tools):
        self.seen += delta
        if "BOOM" in self.seen:
            raise RuntimeError("tool parser exploded")
        return ToolParseStep(delta)

    def finish(self, truncated=False):
        return ToolParseStep()


class Brooding:
    start_marker = "<think>"
    needs_special_tokens = False

    def __init__(self, start_in_reasoning=None):
        self.seen = ""

    def parse_complete(self, text):
        if "GLOOM" in text:
            raise ValueError("reasoning parser exploded")
        return ReasoningResult("", text)

    def parse_incremental(self, delta):
        self.seen += delta
        return ReasoningStep("", delta)

    def finish(self):
        if "GLOOM" in self.seen:
            raise ValueError("reasoning parser exploded")
        return ReasoningStep()


@hookimpl
def turnout_register_tool_parsers(register):
    register("touchy", Touchy)


@hookimpl
def turnout_register_reasoning_parsers(register):
    register("brooding", Brooding)
"""

CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    site = tmp_path_factory.mktemp("site")
    make_distribution(site, "turnout-touchy", "turnout_touchy", BROKEN_PLUGIN, version="3.1")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        patch.delenv("TURNOUT_PLUGINS", raising=False)
        model = {"tool_parser": "touchy", "reasoning_parser": "brooding"}
        with run_router(model=model, sims=1) as running:
            yield running
    sys.modules.pop("turnout_touchy", None)


def _errors(router: Router, kind: str, name: str) -> float:
    """Requests counted under this parser, over every model label."""
    wanted = {("kind", kind), ("name", name)}
    samples = scrape(router.base_url).items()
    return sum(v for (n, ls), v in samples if n == "turnout_parser_errors_total" and wanted <= ls)


def test_a_raising_tool_parser_is_counted_by_name_and_the_text_passes_through(
    router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    before = _errors(router, "tool", "touchy")
    text = "all fine until BOOM and after"
    with caplog.at_level(logging.ERROR, logger="turnout.server"):
        reply = httpx.post(f"{router.base_url}{CHAT}", json=chat(text, tools=TOOLS), timeout=20)
    # The parser's defect does not fail the request: the rest of the output is plain text.
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == text
    assert _errors(router, "tool", "touchy") == before + 1
    assert "tool parser 'touchy' failed: RuntimeError" in caplog.text


def test_a_streamed_answer_is_counted_once_per_request(router: Router) -> None:
    before = _errors(router, "tool", "touchy")
    body = chat("BOOM BOOM BOOM", stream=True, tools=TOOLS, n=2)
    reply = httpx.post(f"{router.base_url}{CHAT}", json=body, timeout=20)
    assert reply.status_code == 200
    assert sse_events(reply.text)[-1] == "[DONE]"
    assert "error" not in reply.text
    assert _errors(router, "tool", "touchy") == before + 1


def test_a_raising_reasoning_parser_is_counted_by_name(router: Router) -> None:
    before = _errors(router, "reasoning", "brooding")
    reply = httpx.post(f"{router.base_url}{CHAT}", json=chat("a GLOOM mood"), timeout=20)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "a GLOOM mood"
    assert _errors(router, "reasoning", "brooding") == before + 1


@pytest.mark.parametrize(
    ("path", "body", "kind", "name"),
    [
        ("/parse/function_call", {"text": "BOOM", "parser": "touchy"}, "tool", "touchy"),
        ("/parse/reasoning", {"text": "GLOOM", "model": MODEL}, "reasoning", "brooding"),
    ],
)
def test_parse_endpoints_answer_500_naming_the_parser(
    router: Router, path: str, body: dict[str, str], kind: str, name: str
) -> None:
    before = _errors(router, kind, name)
    reply = httpx.post(f"{router.base_url}{path}", json=body, timeout=20)
    assert reply.status_code == 500
    error = reply.json()["error"]
    assert error["code"] == "parser_error"
    assert error["message"].startswith(f"{kind} parser {name!r} failed: ")
    assert _errors(router, kind, name) == before + 1
