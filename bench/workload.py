"""The benchmark workload: prompts, request bodies per scenario, and reading the answers.

Every router gets byte-identical request bodies. Output lengths are pinned with ``ignore_eos``
and a token limit, so each request asks the worker for exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "SCENARIOS",
    "STREAMING",
    "Outcome",
    "PromptPool",
    "make_body",
    "path_for",
    "read_json_answer",
    "read_sse_answer",
]

#: Scenario name -> (HTTP path, streaming?). ``mix`` (soak) cycles through the first three.
SCENARIOS: Final = {
    "chat": ("/v1/chat/completions", False),
    "chat_stream": ("/v1/chat/completions", True),
    "generate": ("/generate", False),
    "generate_stream": ("/generate", True),
}
DEFAULT_SCENARIOS: Final = ("chat", "chat_stream", "generate")
STREAMING: Final = frozenset(name for name, (_, stream) in SCENARIOS.items() if stream)

_WORDS: Final = (
    "router",
    "worker",
    "token",
    "stream",
    "latency",
    "model",
    "gateway",
    "request",
    "answer",
    "prompt",
    "cluster",
    "schedule",
    "batch",
    "cache",
    "prefix",
    "policy",
    "health",
    "circuit",
    "retry",
    "budget",
    "queue",
    "window",
    "the",
    "a",
    "of",
    "to",
    "in",
    "and",
    "for",
    "with",
    "on",
    "at",
    "by",
    "from",
    "as",
    "is",
    "was",
    "be",
    "are",
    "this",
    "that",
    "it",
)


def path_for(scenario: str) -> str:
    """HTTP path of ``scenario``."""
    return SCENARIOS[scenario][0]


class PromptPool:
    """``size`` distinct user prompts of about ``tokens`` tokens each (deterministic).

    ``ids(i)`` are the token ids of prompt ``i`` wrapped as one ChatML user turn, for the
    direct-to-worker baseline (what a router would send after templating).
    """

    def __init__(self, tokens: int, size: int = 256, seed: int = 7) -> None:
        from tokenizers import Tokenizer

        from turnout import demo_model

        self._tokenizer = Tokenizer.from_file(str(Path(demo_model.path()) / "tokenizer.json"))
        rng = random.Random(seed)
        self.texts: list[str] = []
        for i in range(size):
            words = [f"Request {i}:"]
            # a word is 1-2 tokens in this vocabulary: start short, top up until long enough
            words += rng.choices(_WORDS, k=max(tokens // 2, 1))
            text = " ".join(words)
            while self._count(text) < tokens:
                text += " " + " ".join(rng.choices(_WORDS, k=4))
            self.texts.append(text)
        self._ids: dict[int, list[int]] = {}

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def __len__(self) -> int:
        return len(self.texts)

    def text(self, i: int) -> str:
        """Prompt ``i`` (modulo the pool size)."""
        return self.texts[i % len(self.texts)]

    def ids(self, i: int) -> list[int]:
        """Token ids of prompt ``i`` as a templated ChatML user turn."""
        i %= len(self.texts)
        if i not in self._ids:
            wrapped = f"<|im_start|>user\n{self.texts[i]}<|im_end|>\n<|im_start|>assistant\n"
            self._ids[i] = list(self._tokenizer.encode(wrapped, add_special_tokens=False).ids)
        return self._ids[i]


def make_body(scenario: str, model: str, prompt: str, max_tokens: int) -> bytes:
    """The JSON request body of ``scenario`` (identical for every router)."""
    body: dict[str, Any]
    if scenario.startswith("chat"):
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
        if scenario == "chat_stream":
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
    elif scenario.startswith("generate"):
        body = {
            "model": model,
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0},
        }
        if scenario == "generate_stream":
            body["stream"] = True
    else:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class Outcome:
    """What one request produced: output tokens, first-token time, or an error."""

    tokens: int = 0
    first_token_at: float | None = None
    error: str | None = None
    #: Events that carried output (SSE ``data:`` events, or the worker's messages for direct).
    events: int = 0


def _completion_tokens(value: Any) -> int | None:
    """``usage.completion_tokens`` or ``meta_info.completion_tokens`` of a response object."""
    if isinstance(value, list):
        counts = [_completion_tokens(item) for item in value]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None
    if not isinstance(value, dict):
        return None
    for holder in ("usage", "meta_info"):
        inner = value.get(holder)
        if isinstance(inner, dict) and isinstance(inner.get("completion_tokens"), int):
            return int(inner["completion_tokens"])
    return None


def _error_of(value: Any) -> str | None:
    if isinstance(value, dict) and "error" in value:
        error = value["error"]
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return None


def read_json_answer(status: int, body: bytes) -> Outcome:
    """Outcome of a non-streaming answer (chat completion or ``/generate`` object/array)."""
    try:
        value = json.loads(body)
    except ValueError:
        return Outcome(error=f"HTTP {status}: body is not JSON: {body[:200]!r}")
    if status != 200:
        return Outcome(error=f"HTTP {status}: {_error_of(value) or repr(body[:200])}")
    error = _error_of(value)
    if error:
        return Outcome(error=error)
    tokens = _completion_tokens(value)
    if tokens is None:
        return Outcome(error="answer has no usage/meta_info.completion_tokens")
    return Outcome(tokens=tokens, events=1)


def _has_output(event: Any) -> bool:
    """True when a parsed SSE event carries generated text (not just the role chunk)."""
    if not isinstance(event, dict):
        return False
    if event.get("text") or event.get("output_ids"):
        return True
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
        if choice.get("text"):
            return True
    return False


async def read_sse_answer(pieces: AsyncIterator[bytes]) -> Outcome:
    """Outcome of a streamed answer; only the first events and the last two are parsed."""
    outcome = Outcome()
    buffer = b""
    tail: list[bytes] = []
    content_events = 0
    done = False
    async for piece in pieces:
        buffer += piece
        if b"\n" not in piece:
            continue
        lines = buffer.split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                continue
            if payload.startswith(b'{"error"'):
                outcome.error = _error_of(json.loads(payload)) or "error event"
                continue
            content_events += 1
            if outcome.first_token_at is None:
                if _has_output(json.loads(payload)):
                    outcome.first_token_at = time.perf_counter()
                else:
                    content_events -= 1  # the role chunk
            tail.append(payload)
            if len(tail) > 2:
                del tail[0]
    if outcome.error:
        return outcome
    tokens = None
    for payload in reversed(tail):
        tokens = _completion_tokens(json.loads(payload))
        if tokens is not None:
            break
    if tokens is None:
        tokens = content_events  # no usage: one event per token is the best guess
    if outcome.first_token_at is None:
        outcome.error = "stream carried no output"
    elif not done:
        outcome.error = "stream ended without [DONE]"
    outcome.tokens = tokens
    outcome.events = content_events
    return outcome
