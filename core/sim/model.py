"""The simulator's deterministic "model": what token ids it answers a prompt with.

Two modes: *echo* answers with the last user turn of a ChatML prompt (or the whole prompt), and
*scripted* answers with the first rule whose regex matches (see ``Script``). With
``context=True`` (the ``context_answers`` knob) every next token is a function of the last few
token ids of the context instead, so that a request continued on another simulator from the
prompt and the tokens generated so far (turnout's failover) is answered token for token as the
first would have; such an answer runs to its token limit. Under a
``json_schema`` constraint it answers with a JSON value that satisfies the schema. Completions
are tokenized with the model directory's own ``tokenizer.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from tokenizers import Tokenizer

from turnout.sim.schema_instance import SchemaError, conforms, instance_for
from turnout.sim.structural_tag import StructuralTagError, structural_answer
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = [
    "ChoicePlan",
    "InvalidRequest",
    "ModelFiles",
    "Rule",
    "Script",
    "ScriptError",
    "SimModel",
    "synthetic_logprob",
    "top_logprobs",
    "wanted_logprob",
]

#: Token ids of the context that choose the next token of a context answer.
CONTEXT_WINDOW = 4
#: The words context answers are made of (those that are one token of the vocabulary).
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "and",
    "then",
    "runs",
    "far",
    "away",
    "from",
    "home",
    "into",
    "green",
    "fields",
    "where",
    "rivers",
    "flow",
    "under",
    "old",
    "stone",
    "bridges",
    "near",
    "small",
    "towns",
]

_LAST_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)


class ScriptError(ValueError):
    """A script file is malformed; the message names the file and the rule."""


@dataclass(frozen=True, slots=True)
class Rule:
    """Answer ``replies`` when ``pattern`` is found in the prompt (or in its last user turn).

    ``{user}`` in a reply is replaced by the last user turn. With n > 1, choice i answers
    ``replies[i % len(replies)]``.
    """

    pattern: re.Pattern[str]
    replies: tuple[str, ...]
    match_on: Literal["last_user", "prompt"] = "last_user"


@dataclass(frozen=True, slots=True)
class Script:
    """Ordered rules; the first match wins, no match falls back to echo (or ``default``).

    File format (YAML or JSON)::

        rules:
          - match: "weather in (Paris|Tokyo)"   # regex, searched (re.DOTALL)
            reply: "<tool_call>\\n{...}\\n</tool_call>"   # or a list, one per choice
            match_on: last_user                  # or: prompt (the whole decoded prompt)
        default: "I don't know."                 # optional; otherwise echo
    """

    rules: tuple[Rule, ...] = ()
    default: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a YAML/JSON script file; ``ScriptError`` names what is wrong."""
        where = str(path)
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ScriptError(f"{where}: cannot read script: {exc}") from None
        return cls.from_data(data, where=where)

    @classmethod
    def from_data(cls, data: Any, *, where: str = "script") -> Script:
        """Build from parsed data (a mapping with ``rules`` or a bare list of rules)."""
        if isinstance(data, list):
            data = {"rules": data}
        if not isinstance(data, dict):
            raise ScriptError(
                f"{where}: expected a mapping with 'rules', got {type(data).__name__}"
            )
        unknown = set(data) - {"rules", "default"}
        if unknown:
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")
        rules = []
        for i, raw in enumerate(data.get("rules") or []):
            at = f"{where}: rules[{i}]"
            if not isinstance(raw, dict) or "match" not in raw or "reply" not in raw:
                raise ScriptError(f"{at}: each rule needs 'match' and 'reply'")
            extra = set(raw) - {"match", "reply", "match_on"}
            if extra:
                raise ScriptError(f"{at}: unknown keys {sorted(extra)}")
            try:
                pattern = re.compile(str(raw["match"]), re.DOTALL)
            except re.error as exc:
                raise ScriptError(f"{at}: bad regex {raw['match']!r}: {exc}") from None
            reply = raw["reply"]
            replies = tuple(str(r) for r in reply) if isinstance(reply, list) else (str(reply),)
            if not replies:
                raise ScriptError(f"{at}: 'reply' is an empty list")
            match_on = raw.get("match_on", "last_user")
            if match_on not in ("last_user", "prompt"):
                raise ScriptError(f"{at}: match_on must be 'last_user' or 'prompt'")
            rules.append(Rule(pattern, replies, match_on))
        default = data.get("default")
        return cls(tuple(rules), None if default is None else str(default))

    def replies_for(self, prompt: str, last_user: str) -> tuple[str, ...] | None:
        """The matching rule's replies (``{user}`` filled in), the default, or None (echo)."""
        for rule in self.rules:
            text = last_user if rule.match_on == "last_user" else prompt
            if rule.pattern.search(text):
                return tuple(r.replace("{user}", last_user) for r in rule.replies)
        return None if self.default is None else (self.default,)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """What the simulator reads from a model directory."""

    path: Path
    tokenizer: Tokenizer
    served_model_name: str
    eos_token_ids: tuple[int, ...]
    context_length: int
    config: dict[str, Any]
    generation_config: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path, served_model_name: str | None = None) -> ModelFiles:
        """Load ``tokenizer.json`` and the config files; ``FileNotFoundError`` if absent."""
        root = Path(path)
        tok_file = root / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"{root}: no tokenizer.json (is this a model directory?)")
        tokenizer = Tokenizer.from_file(str(tok_file))
        config = _read_json(root / "config.json")
        gen = _read_json(root / "generation_config.json")
        tok_config = _read_json(root / "tokenizer_config.json")
        eos: list[int] = []
        for source in (gen.get("eos_token_id"), config.get("eos_token_id")):
            if source is not None and not eos:
                eos = [int(x) for x in (source if isinstance(source, list) else [source])]
        if not eos and isinstance(tok_config.get("eos_token"), str):
            found = tokenizer.token_to_id(tok_config["eos_token"])
            eos = [] if found is None else [found]
        context = config.get("max_position_embeddings") or tok_config.get("model_max_length")
        context_length = int(context) if isinstance(context, int) and context < 10**7 else 8192
        name = served_model_name or str(config.get("_name_or_path") or root.resolve().name)
        return cls(root, tokenizer, name, tuple(eos), context_length, config, gen)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


@dataclass(slots=True)
class ChoicePlan:
    """The whole answer of one choice, decided up front; the servicer streams it."""

    token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    matched_token_id: int | None = None
    #: Tokens up to and including ``</think>`` (0 when the answer has no reasoning block).
    reasoning_tokens: int = 0


class InvalidRequest(ValueError):
    """The request cannot be served (the servicer answers INVALID_ARGUMENT)."""


class SimModel:
    """Deterministic answers for GenerateRequests, as token ids."""

    def __init__(self, files: ModelFiles, script: Script | None = None) -> None:
        self.files = files
        self.script = script or Script()
        self.vocab_size = files.tokenizer.get_vocab_size()
        self._think_end = files.tokenizer.token_to_id("</think>")
        space = files.tokenizer.encode(" ", add_special_tokens=False).ids
        self._filler = space[:1] or [0]
        words = [self.encode(f" {word}") for word in _WORDS]
        self._words = [ids[0] for ids in words if len(ids) == 1] or self._filler

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (markup such as ``<tool_call>`` maps to its added token)."""
        return list(self.files.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens kept."""
        return str(self.files.tokenizer.decode(ids, skip_special_tokens=False))

    def answer_texts(self, request: pb.GenerateRequest) -> list[str]:
        """The text of each of the request's ``n`` choices, before EOS/limits are applied."""
        params = request.sampling_params
        n = max(params.n, 1)
        _prompt, last_user, scripted = self._scripted(request)
        if params.WhichOneof("constraint") == "json_schema":
            try:
                schema = json.loads(params.json_schema)
                value = _scripted_instance(scripted, schema)
                text = json.dumps(instance_for(schema) if value is _NONE else value)
            except (json.JSONDecodeError, SchemaError) as exc:
                raise InvalidRequest(f"json_schema constraint is not usable: {exc}") from None
            return [text] * n  # constrained choices stay valid, so they may coincide
        if params.WhichOneof("constraint") == "structural_tag":
            try:
                text = structural_answer(params.structural_tag, scripted or (last_user,))
            except StructuralTagError as exc:
                raise InvalidRequest(str(exc)) from None
            return [text] * n
        replies = scripted or (last_user,)
        return [_choice_text(replies, i) for i in range(n)]

    def _scripted(self, request: pb.GenerateRequest) -> tuple[str, str, tuple[str, ...] | None]:
        """The decoded prompt, its last user turn and the script's replies to it (None: no
        rule and no default matched)."""
        prompt = self.decode(list(request.tokenized.input_ids))
        users = _LAST_USER.findall(prompt)
        last_user = users[-1] if users else prompt
        return prompt, last_user, self.script.replies_for(prompt, last_user)

    def _resumed(self, input_ids: list[int], replies: tuple[str, ...], choice: int) -> list[int]:
        """Choice ``choice``'s scripted answer, or its rest when the input already ends with
        the start of one of the replies (a continuation of it from another worker)."""
        best: list[int] | None = None
        longest = 0
        for reply in replies:
            body = self.encode(reply)
            for done in range(min(len(body), len(input_ids)), longest, -1):
                if input_ids[-done:] == body[:done]:
                    best, longest = body[done:], done
                    break
        return best if best is not None else self.encode(_choice_text(replies, choice))

    def check_vocabulary(self, input_ids: Iterable[int]) -> None:
        """Refuse token ids past the vocabulary, as SGLang does (Generate and Embed)."""
        bad = next((t for t in input_ids if t >= self.vocab_size), None)
        if bad is not None:
            raise InvalidRequest(f"token id {bad} is out of range (vocab size {self.vocab_size})")

    def plan(self, request: pb.GenerateRequest, *, context: bool = False) -> list[ChoicePlan]:
        """Decide every choice's tokens and finish reason, honouring the sampling limits
        (``context``: the tokens follow from the context, see the module doc)."""
        input_ids = list(request.tokenized.input_ids)
        if not input_ids:
            raise InvalidRequest("input_ids must not be empty")
        self.check_vocabulary(input_ids)
        room = self.files.context_length - len(input_ids)
        if room <= 0:
            raise InvalidRequest(
                f"the input ({len(input_ids)} tokens) is longer than the model's context "
                f"length ({self.files.context_length} tokens)"
            )
        params = request.sampling_params
        if list(params.stop):
            raise InvalidRequest(
                "stop strings need a tokenizer, which this worker does not run; "
                "send stop_token_ids and match stop strings in the router"
            )
        limit = min(params.max_new_tokens, room) if params.HasField("max_new_tokens") else room
        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            stops.update(self.files.eos_token_ids)
        eos = self.files.eos_token_ids[0] if self.files.eos_token_ids else None
        if context and params.WhichOneof("constraint") is None:
            scripted = self._scripted(request)[2]
            if scripted is not None:
                return [
                    self._limit(
                        self._resumed(input_ids, scripted, index),
                        limit,
                        params.min_new_tokens,
                        stops,
                        None if params.ignore_eos else eos,
                    )
                    for index in range(max(params.n, 1))
                ]
            return [
                self._limit(self.continuation(input_ids, limit, index), limit, 0, stops, None)
                for index in range(max(params.n, 1))
            ]
        plans = []
        for text in self.answer_texts(request):
            body = self.encode(text)
            plans.append(
                self._limit(
                    body, limit, params.min_new_tokens, stops, None if params.ignore_eos else eos
                )
            )
        return plans

    def continuation(self, context: list[int], count: int, choice: int = 0) -> list[int]:
        """``count`` tokens after ``context``, each chosen by the last ``CONTEXT_WINDOW`` ids
        before it (and the choice's index), from words of the vocabulary."""
        words = self._words
        ids = context[-CONTEXT_WINDOW:]
        out: list[int] = []
        for _ in range(count):
            h = choice + 1
            for token in ids[-CONTEXT_WINDOW:]:
                h = (h * 1_000_003 + token) % 2_147_483_647
            token = words[h % len(words)]
            out.append(token)
            ids.append(token)
        return out

    def _limit(
        self, body: list[int], limit: int, min_new: int, stops: set[int], eos: int | None
    ) -> ChoicePlan:
        filler = body or self._filler
        sequence = list(body)
        if eos is not None:
            while len(sequence) < min_new - 1:
                sequence.append(filler[len(sequence) % len(filler)])
            sequence.append(eos)
        else:  # no EOS: a real model goes on until the limit, so repeat ourselves
            while len(sequence) < limit:
                sequence.append(filler[len(sequence) % len(filler)])
        out: list[int] = []
        for token in sequence:
            if len(out) >= limit:
                return self._finish(out, "length", None)
            out.append(token)
            if token in stops and len(out) >= min_new:
                return self._finish(out, "stop", token)
        return self._finish(out, "length", None)

    def _finish(
        self, tokens: list[int], reason: Literal["stop", "length"], matched: int | None
    ) -> ChoicePlan:
        reasoning = 0
        if self._think_end is not None and self._think_end in tokens:
            reasoning = tokens.index(self._think_end) + 1
        return ChoicePlan(tokens, reason, matched, reasoning)


_NONE = object()


def _choice_text(replies: tuple[str, ...], choice: int) -> str:
    """Choice ``choice``'s reply: ``replies`` in turn, numbered past the first round so that
    choices stay distinct."""
    text = replies[choice % len(replies)]
    return f"{text} ({choice + 1})" if choice >= len(replies) else text


def _scripted_instance(replies: tuple[str, ...] | None, schema: Any) -> Any:
    """What a scripted reply says, where it satisfies the constraint: the reply as JSON, or
    the calls it makes (``{"name", "arguments"}`` objects, as an array of ``{name,
    parameters}`` or as one call's arguments); ``_NONE`` when nothing fits."""
    for reply in replies or ():
        found = _json_values(reply)
        calls = [v for v in found if isinstance(v, dict) and {"name", "arguments"} <= v.keys()]
        shaped = [{"name": c["name"], "parameters": c["arguments"]} for c in calls]
        options = [*found, shaped, shaped[:1], *(c["arguments"] for c in calls)]
        for value in options:
            if value != [] and conforms(value, schema):
                return value
    return _NONE


def _json_values(text: str) -> list[Any]:
    """The text as one JSON value, else the JSON objects found in it (outermost only)."""
    decoder = json.JSONDecoder()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    values, at = [], text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            end = at + 1
        else:
            values.append(value)
        at = text.find("{", end)
    return values


def synthetic_logprob(token_id: int, position: int) -> float:
    """A made-up but plausible log-probability in [-2.75, -0.3] for a sampled token."""
    return -(0.3 + ((token_id * 7 + position * 13) % 50) / 20)


def top_logprobs(
    token_id: int, position: int, k: int, vocab_size: int
) -> tuple[list[float], list[int]]:
    """``k`` alternatives, best first: the sampled token, then others 1.5 nats apart each.

    Probabilities sum to at most ``e^-0.3 / (1 - e^-1.5) < 1``.
    """
    best = synthetic_logprob(token_id, position)
    values = [best - 1.5 * j for j in range(k)]
    ids = [token_id] + [(token_id + 1 + j) % vocab_size for j in range(k - 1)]
    return values, ids


def wanted_logprob(token_id: int, position: int, wanted: int, vocab_size: int) -> float:
    """The logprob of ``wanted`` where ``token_id`` was sampled, consistent with
    :func:`top_logprobs`: the sampled token's own value, the others 1.5 nats apart by their
    distance after it in the vocabulary."""
    distance = (wanted - token_id) % max(vocab_size, 1)
    return synthetic_logprob(token_id, position) - 1.5 * distance
