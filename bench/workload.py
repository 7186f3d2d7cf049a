"""The benchmark workload: prompts, request bodies per scenario, and reading the answers.

Every router gets byte-identical request bodies. Output lengths are pinned with ``ignore_eos``
and a token limit, so each request asks the worker for exactly ``max_tokens`` tokens (the parser
scenarios excepted: their scripted answer ends with EOS). Scenarios are in ``bench.scenarios``.
"""

from __future__ import annotations

import json
import random
import re
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.scenarios import SCENARIOS, TOOLS, Scenario

__all__ = [
    "ConversationPool",
    "GapLog",
    "Outcome",
    "PromptPool",
    "make_body",
    "make_conversation_body",
    "read_json_answer",
    "read_sse_answer",
]

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


class PromptPool:
    """``size`` distinct user prompts of about ``tokens`` tokens each (deterministic).

    With ``groups`` > 0, prompt ``i`` is a system prompt shared by its group (three quarters of
    the tokens) and a distinct user turn (the rest): a conversation prefix that a cache-aware
    router should keep on one worker. A group is a run of consecutive prompts of the pool, so
    that the clients of a closed loop (client ``k`` of ``c`` sends prompts ``k, k + c, …``) all
    send every group, over their own connections (a group per client would let each serving
    process of a router see only the groups of the clients it holds). ``ids(i)`` are the token
    ids of prompt ``i`` as a templated ChatML conversation, for the direct-to-worker baseline
    (what a router would send after templating).
    """

    def __init__(self, tokens: int, size: int = 256, seed: int = 7, groups: int = 0) -> None:
        from tokenizers import Tokenizer

        from turnout import demo_model

        self._tokenizer = Tokenizer.from_file(str(Path(demo_model.path()) / "tokenizer.json"))
        rng = random.Random(seed)
        self.groups = groups
        shared = tokens * 3 // 4 if groups else 0
        self.systems = [self._words(rng, f"Context {g}:", shared) for g in range(groups)]
        self.texts = [self._words(rng, f"Request {i}:", tokens - shared) for i in range(size)]
        self._ids: dict[int, list[int]] = {}

    def _words(self, rng: random.Random, head: str, tokens: int) -> str:
        # a word is 1-2 tokens in this vocabulary: start short, top up until long enough
        text = " ".join([head, *rng.choices(_WORDS, k=max(tokens // 2, 1))])
        while self._count(text) < tokens:
            text += " " + " ".join(rng.choices(_WORDS, k=4))
        return text

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def __len__(self) -> int:
        return len(self.texts)

    def group(self, i: int) -> int | None:
        """The prefix group of prompt ``i`` (None without groups)."""
        return (i % len(self.texts)) * self.groups // len(self.texts) if self.groups else None

    def system(self, i: int) -> str | None:
        """The shared system prompt of prompt ``i`` (None without groups)."""
        group = self.group(i)
        return None if group is None else self.systems[group]

    def text(self, i: int) -> str:
        """User turn of prompt ``i`` (modulo the pool size)."""
        return self.texts[i % len(self.texts)]

    def ids(self, i: int) -> list[int]:
        """Token ids of prompt ``i`` as a templated ChatML conversation."""
        i %= len(self.texts)
        if i not in self._ids:
            system = self.system(i)
            head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
            wrapped = f"{head}<|im_start|>user\n{self.texts[i]}<|im_end|>\n<|im_start|>assistant\n"
            self._ids[i] = list(self._tokenizer.encode(wrapped, add_special_tokens=False).ids)
        return self._ids[i]


class ConversationPool:
    """Multi-turn conversations and agent loops whose turns share system prompts and histories
    (the ``kv_cache`` scenario; deterministic, no tokenizer).

    Request ``i`` is turn ``t`` of conversation ``c = i % conversations``: the system prompt of
    its group (``c % groups``, about ``system_tokens`` tokens), then the ``t`` earlier turns
    (a user message and the assistant's reply each), then the new user message; so each turn's
    prompt extends the previous turn's. Even conversations chat (user and assistant messages of
    about ``turn_tokens``), odd ones are agent loops (a long observation, a short action). After
    ``turns`` turns a conversation starts over with new content (its next *epoch*), so nothing
    but the system prompt repeats. With ``conversations`` a multiple of a closed loop's clients,
    client ``k`` (prompts ``k, k + c, …``) always sends the same conversations, one turn after
    the other.
    """

    def __init__(
        self,
        conversations: int,
        *,
        groups: int,
        turns: int,
        system_tokens: int,
        turn_tokens: int,
        seed: int = 7,
    ) -> None:
        if min(conversations, groups, turns, system_tokens, turn_tokens) < 1:
            raise ValueError("conversations, groups, turns and token counts must be >= 1")
        self.conversations = conversations
        self.groups = groups
        self.turns = turns
        self.turn_tokens = turn_tokens
        self.seed = seed
        rng = random.Random(seed)
        self.systems = [_filler(rng, f"System {g}:", system_tokens) for g in range(groups)]

    def locate(self, i: int) -> tuple[int, int, int]:
        """(conversation, epoch, turn) of request ``i``."""
        conversation = i % self.conversations
        step = i // self.conversations
        return conversation, step // self.turns, step % self.turns

    def group(self, i: int) -> int:
        """The system-prompt group of request ``i``."""
        return (i % self.conversations) % self.groups

    def is_agent(self, conversation: int) -> bool:
        """True for an agent loop (odd conversations), False for a chat."""
        return conversation % 2 == 1

    def _turn(self, conversation: int, epoch: int, turn: int) -> tuple[str, str]:
        rng = random.Random(f"{self.seed}/{conversation}/{epoch}/{turn}")
        if self.is_agent(conversation):
            user = _filler(rng, f"Observation {turn}:", self.turn_tokens * 3)
            reply = _filler(rng, f"Action {turn}:", max(self.turn_tokens // 2, 1))
        else:
            user = _filler(rng, f"Question {turn}:", self.turn_tokens)
            reply = _filler(rng, f"Answer {turn}:", self.turn_tokens)
        return user, reply

    def messages(self, i: int) -> list[dict[str, str]]:
        """The chat messages of request ``i``."""
        conversation, epoch, turn = self.locate(i)
        out = [{"role": "system", "content": self.systems[self.group(i)]}]
        for t in range(turn):
            user, reply = self._turn(conversation, epoch, t)
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        out.append({"role": "user", "content": self._turn(conversation, epoch, turn)[0]})
        return out


def _filler(rng: random.Random, head: str, tokens: int) -> str:
    """``head`` and about ``tokens`` tokens of the bench vocabulary (a word is 1.75 tokens on
    average in the demo model's vocabulary)."""
    return " ".join([head, *rng.choices(_WORDS, k=max(tokens * 4 // 7, 1))])


def make_conversation_body(model: str, messages: list[dict[str, str]], max_tokens: int) -> bytes:
    """A streamed chat completion of ``messages`` with usage, output pinned (``kv_cache``)."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(body, separators=(",", ":")).encode()


def make_body(
    scenario: str | Scenario, model: str, prompt: str, max_tokens: int, system: str | None = None
) -> bytes:
    """The JSON request body of ``scenario`` (identical for every router).

    Outputs are pinned with ``ignore_eos`` except in the parser scenarios, whose scripted answer
    ends with EOS (repeating it would repeat the tool calls); those offer ``TOOLS``.
    """
    if isinstance(scenario, str):
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        scenario = SCENARIOS[scenario]
    pin = scenario.env != "parsers"
    body: dict[str, Any]
    if scenario.request.startswith("chat"):
        messages = [{"role": "user", "content": prompt}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        body = {"model": model, "messages": messages, "max_tokens": max_tokens}
        if pin:
            body["ignore_eos"] = True
        body["temperature"] = 0
        if scenario.env == "parsers":
            body["tools"] = TOOLS
        if scenario.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
    else:
        params: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": 0}
        if pin:
            params["ignore_eos"] = True
        text = f"{system}\n\n{prompt}" if system else prompt
        body = {"model": model, "text": text, "sampling_params": params}
        if scenario.streaming:
            body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class Outcome:
    """What one request produced: output tokens, first-token time, or an error."""

    tokens: int = 0
    first_token_at: float | None = None
    error: str | None = None
    #: Events that carried output (SSE ``data:`` events, or the worker's messages for direct).
    events: int = 0
    #: The worker that answered, when the answer names it (the ``routing`` environment).
    worker: str | None = None


class GapLog:
    """Inter-token gaps seen by the client: (arrival time, seconds since the previous output
    event of the same request), in ``time.perf_counter`` seconds."""

    __slots__ = ("at", "gap")

    def __init__(self) -> None:
        self.at = array("d")
        self.gap = array("d")

    def add(self, at: float, gap: float) -> None:
        """One output event that followed another one of its request."""
        self.at.append(at)
        self.gap.append(gap)

    def __len__(self) -> int:
        return len(self.at)


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


_WORKER_TAG: Final = re.compile(r"\bworker-\d+\b")


def _answer_text(value: Any) -> str:
    """Text of the first choice of a chat completion or ``/generate`` answer ("" if none)."""
    if isinstance(value, list):
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return ""
    if isinstance(value.get("text"), str):
        return str(value["text"])
    choices = value.get("choices") or [{}]
    message = choices[0].get("message") or {}
    return str(message.get("content") or choices[0].get("text") or "")


def _parsed_parts(value: Any) -> tuple[bool, bool]:
    """(has reasoning_content, has tool_calls) of a non-streaming chat completion."""
    try:
        message = value["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return False, False
    return bool(message.get("reasoning_content")), bool(message.get("tool_calls"))


def read_json_answer(
    status: int, body: bytes, *, parsed: bool = False, tagged: bool = False
) -> Outcome:
    """Outcome of a non-streaming answer (chat completion or ``/generate`` object/array).

    ``parsed``: the answer must carry reasoning and tool calls (the parser scenarios);
    ``tagged``: read which worker answered from the text (the ``routing`` environment).
    """
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
    outcome = Outcome(tokens=tokens, events=1)
    if parsed and _parsed_parts(value) != (True, True):
        outcome.error = "answer lacks reasoning_content or tool_calls (parsers not applied?)"
    if tagged:
        found = _WORKER_TAG.search(_answer_text(value))
        outcome.worker = found.group(0) if found else None
    return outcome


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


#: An SSE payload that carries output, without parsing it: a non-empty text field or tool calls.
_OUTPUT: Final = re.compile(
    rb'"(?:content|reasoning_content|text)"\s*:\s*"[^"]|"tool_calls"\s*:\s*\[\s*\{'
)
_REASONING_DELTA: Final = re.compile(rb'"reasoning_content"\s*:\s*"[^"]')
_TOOL_DELTA: Final = re.compile(rb'"tool_calls"\s*:\s*\[\s*\{')


async def read_sse_answer(
    pieces: AsyncIterator[bytes], *, gaps: GapLog | None = None, parsed: bool = False
) -> Outcome:
    """Outcome of a streamed answer; only the first events and the last two are parsed.

    ``gaps`` collects the time between consecutive output events; ``parsed``: the stream must
    carry reasoning and tool-call deltas (the parser scenarios).
    """
    outcome = Outcome()
    buffer = b""
    tail: list[bytes] = []
    content_events = 0
    done = False
    last_output: float | None = None
    saw_reasoning = saw_tools = False
    async for piece in pieces:
        buffer += piece
        if b"\n" not in piece:
            continue
        now = time.perf_counter()
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
                    outcome.first_token_at = now
                    last_output = now
                else:
                    content_events -= 1  # the role chunk
            elif _OUTPUT.search(payload):
                if gaps is not None and last_output is not None:
                    gaps.add(now, now - last_output)
                last_output = now
            if parsed:
                saw_reasoning = saw_reasoning or bool(_REASONING_DELTA.search(payload))
                saw_tools = saw_tools or bool(_TOOL_DELTA.search(payload))
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
    elif parsed and not (saw_reasoning and saw_tools):
        outcome.error = "stream lacks reasoning_content or tool_calls deltas (parsers not applied?)"
    outcome.tokens = tokens
    outcome.events = content_events
    return outcome
