"""The benchmark's scenarios: what is sent, by which simulated workers it is answered, through
which routers, and how the load is shaped.

A scenario belongs to an *environment* (``plain``, ``paced``, ``parsers``, ``routing``, ``dp``,
``pd``, ``kv``, ``http``): the workers' flags and the routers' flags it needs. ``bench/run.py``
starts one set of workers and routers per environment and runs that environment's scenarios
against them in turn.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DEFAULT_SCENARIOS",
    "ENVS",
    "PARSER_REPLY",
    "PD_ROLES",
    "SCENARIOS",
    "TOOLS",
    "TRACED",
    "LoadPlan",
    "RouterSpec",
    "Scenario",
    "by_env",
    "load_plan",
    "max_tokens_for",
    "parse_delay_range",
    "router_specs",
    "sim_args",
    "worker_tag",
]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One measured workload."""

    name: str
    #: Request shape: ``chat``, ``chat_stream``, ``generate`` or ``generate_stream``.
    request: str
    #: Environment: ``plain``, ``paced``, ``parsers``, ``routing``, ``dp``, ``pd``, ``kv`` or
    #: ``http``.
    env: str
    about: str

    @property
    def streaming(self) -> bool:
        """True when the client asks for a stream."""
        return self.request.endswith("_stream")

    @property
    def path(self) -> str:
        """HTTP path of the request."""
        return "/v1/chat/completions" if self.request.startswith("chat") else "/generate"


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario("chat", "chat", "plain", "POST /v1/chat/completions, non-streaming"),
        Scenario("chat_stream", "chat_stream", "plain", "the same, streamed, include_usage"),
        Scenario("generate", "generate", "plain", "SGLang POST /generate, non-streaming"),
        Scenario("generate_stream", "generate_stream", "plain", "the same, streamed"),
        Scenario(
            "paced_stream",
            "chat_stream",
            "paced",
            "--paced-streams streamed chats, workers pacing tokens like a GPU, long answers",
        ),
        Scenario(
            "parse_chat",
            "chat",
            "parsers",
            "reasoning and two tool calls through the qwen3 and qwen parsers, non-streaming",
        ),
        Scenario("parse_chat_stream", "chat_stream", "parsers", "the same, streamed"),
        Scenario(
            "processes",
            "chat",
            "routing",
            "turnout with 1 and 2 serving processes; prompts share per-group prefixes",
        ),
        Scenario(
            "pd",
            "chat",
            "pd",
            "turnout on a prefill-decode pair (1 prefill + 1 decode sim) vs turnout on 1 regular "
            "sim, non-streaming chat",
        ),
        Scenario("pd_stream", "chat_stream", "pd", "the same, streamed"),
        Scenario(
            "dp_ranks",
            "chat",
            "dp",
            "workers with --dp-size ranks; 1 prompt in 8 asks for 8x the tokens; turnout routing "
            "per rank vs ranks summed",
        ),
        Scenario(
            "kv_cache",
            "chat_stream",
            "kv",
            "multi-turn chats and agent loops sharing system prompts and histories on sims with "
            "a prefix cache smaller than the working set and a prefill cost; hit rate, TTFT",
        ),
        Scenario(
            "http_passthrough",
            "chat_stream",
            "http",
            "turnout and smg as plain balancers of two OpenAI-compatible HTTP servers (each a "
            "turnout in front of one sim): streamed chats passed through; router CPU per request "
            "and per chunk",
        ),
    )
}
DEFAULT_SCENARIOS: Final = ("chat", "chat_stream", "generate")
ENVS: Final = ("plain", "paced", "parsers", "routing", "dp", "pd", "kv", "http")
#: The ``pd`` environment's workers, by index: one regular, one prefill, one decode.
PD_ROLES: Final = ("regular", "prefill", "decode")

#: In ``dp_ranks`` one prompt in ``LONG_EVERY`` asks for ``LONG_FACTOR`` times the tokens (with a
#: closed loop, the same clients keep sending the long ones).
LONG_EVERY: Final = 8
LONG_FACTOR: Final = 8


def max_tokens_for(scenario: str, i: int, max_tokens: int) -> int:
    """Output tokens prompt ``i`` of ``scenario`` asks for."""
    if SCENARIOS[scenario].env == "dp" and i % LONG_EVERY == 0:
        return max_tokens * LONG_FACTOR
    return max_tokens


#: Tools offered in the parser scenarios (the answer calls both).
TOOLS: Final = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "filters": {"type": "object"}},
                "required": ["query"],
            },
        },
    },
]

_REASONING: Final = (
    "The user asks about the weather in San Francisco for the next days and wants a place to "
    "eat ramen nearby. I should not guess the forecast: the get_weather tool gives it for a "
    "city, in celsius or fahrenheit, for a number of days. Three days covers the question. "
    "For the restaurant I can use the search tool with a query and a few filters, only places "
    "that are open now and at most ten results. Both calls are independent, so I can make "
    "them in one turn and then combine the answers: first the forecast, then the list of "
    "places with their distance. I will tell the user what I am doing before calling."
)
#: What the parser scenarios' workers answer: qwen3 reasoning, some text, two qwen tool calls.
PARSER_REPLY: Final = (
    f"<think>\n{_REASONING}\n</think>\n\n"
    "Let me check the forecast and look for ramen places near you.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "San Francisco", '
    '"unit": "celsius", "days": 3}}\n</tool_call>\n'
    '<tool_call>\n{"name": "search", "arguments": {"query": "best ramen near Union Square, '
    'San Francisco", "filters": {"open_now": true, "max_results": 10}}}\n</tool_call>'
)
#: The target of turnout with tracing on (``--tracing``), beside ``turnout`` with it off.
TRACED: Final = "turnout-traced"
#: Parsers given to each router in the ``parsers`` environment (same names in both).
REASONING_PARSER: Final = "qwen3"
TOOL_PARSER: Final = "qwen"


def worker_tag(index: int) -> str:
    """The word the ``routing`` environment's worker ``index`` starts every answer with."""
    return f"worker-{index}"


def parse_delay_range(text: str) -> tuple[float, float]:
    """``"20-40"`` -> (20.0, 40.0); ``"30"`` -> (30.0, 30.0). ``ValueError`` when malformed."""
    low, sep, high = text.partition("-")
    lo = float(low)
    hi = float(high) if sep else lo
    if lo < 0 or hi < lo:
        raise ValueError(f"bad delay range {text!r}: want LOW-HIGH with 0 <= LOW <= HIGH")
    return lo, hi


def sim_args(env: str, args: argparse.Namespace, index: int, script_dir: Path) -> list[str]:
    """Flags of ``turnout sim`` for worker ``index`` of ``env`` (scripts written to
    ``script_dir``)."""
    flags = ["--tokens-per-chunk", str(args.tokens_per_chunk)]
    engine = getattr(args, "engine", "sglang")
    if engine != "sglang":
        flags += ["--engine", engine]
    if env == "paced":
        low, high = parse_delay_range(args.paced_delay_ms)
        flags += ["--delay-ms", f"{low:g}", "--delay-jitter-ms", f"{high - low:g}"]
        # 1,000 paced streams: grpc.aio would take ~1.2 of the 2 cores from the routers measured
        # (docs/simulator.md); the native server costs well under half of that.
        flags += ["--transport", "native"]
    elif env == "parsers":
        path = script_dir / "parsers-script.json"
        path.write_text(json.dumps({"rules": [{"match": "", "reply": PARSER_REPLY}]}))
        flags += ["--script", str(path)]
    elif env == "routing":
        path = script_dir / f"routing-script-{index}.json"
        rule = {"match": "", "reply": worker_tag(index) + " {user}"}
        path.write_text(json.dumps({"rules": [rule]}))
        flags += ["--script", str(path)]
    elif env == "dp":
        flags += ["--dp-size", str(args.dp_size), "--delay-ms", f"{args.dp_delay_ms:g}"]
        flags += ["--max-running", str(args.dp_max_running)]
    elif env == "pd" and PD_ROLES[index] != "regular":
        flags += ["--role", PD_ROLES[index]]
    elif env == "kv":
        flags += ["--block-size", str(args.kv_block_size)]
        flags += ["--kv-cache-tokens", str(args.kv_cache_tokens)]
        flags += ["--prefill-tokens-per-s", f"{args.kv_prefill_tokens_per_s:g}"]
        flags += ["--delay-ms", f"{args.kv_delay_ms:g}"]
    return flags


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """One router target of an environment: ``kind`` is ``turnout`` or ``smg``."""

    target: str
    kind: str
    policy: str
    processes: int = 1
    extra: tuple[str, ...] = field(default=())
    #: turnout only: the ``dp_size`` given to every worker in its config (None: as reported).
    worker_dp_size: int | None = None
    #: turnout only: routes to the environment's prefill-decode pair (else its regular workers).
    pd: bool = False
    #: turnout only: trace every request (sampling ratio 1.0) and export the spans over
    #: OTLP/gRPC to this endpoint (None: tracing off).
    tracing_endpoint: str | None = None
    #: turnout only: False turns its KV-event subscriptions off (``health.kv_events``), so that
    #: ``cache_aware`` learns prefixes from its own requests (None: the default).
    kv_events: bool | None = None
    #: turnout only: this many independent routers side by side, each load-generator client
    #: on one of them (a connection-level balancer in front of router replicas).
    replicas: int = 1


def router_specs(env: str, args: argparse.Namespace, kinds: list[str]) -> list[RouterSpec]:
    """The routers to start for ``env``, in the order of ``kinds`` (``turnout``/``smg``); with
    ``args.tracing_endpoint`` set, turnout also once more with tracing on (``turnout-traced``,
    except in the ``routing``, ``dp`` and ``pd`` environments)."""
    specs: list[RouterSpec] = []
    for kind in kinds:
        if env == "routing":
            policy = args.routing_policy
            if kind == "turnout":
                for n in args.process_counts:
                    name = "turnout" if n == 1 else f"turnout-p{n}"
                    specs.append(RouterSpec(name, kind, policy, processes=n))
            else:
                specs.append(RouterSpec(kind, kind, policy))
            continue
        if env == "dp":
            # turnout twice: routing to each rank, and with every worker's ranks summed (what a
            # DP-unaware router does). smg is left out: its --dp-aware is untried on the sims.
            if kind == "turnout":
                specs.append(RouterSpec("turnout", kind, args.dp_policy))
                specs.append(RouterSpec("turnout-summed", kind, args.dp_policy, worker_dp_size=1))
            continue
        if env == "kv":
            wanted = getattr(args, "kv_targets", None)
            specs += [s for s in _kv_specs(kind, args) if not wanted or s.target in wanted]
            continue
        if env == "pd":
            # The same turnout on one regular worker and on a prefill-decode pair. smg is left
            # out: its PD mode over gRPC is untried on the sims.
            if kind == "turnout":
                specs.append(RouterSpec("turnout", kind, args.policy))
                specs.append(RouterSpec("turnout-pd", kind, args.policy, pd=True))
            continue
        extra: tuple[str, ...] = ()
        if env == "parsers":
            tool_flag = "--tool-parser" if kind == "turnout" else "--tool-call-parser"
            extra = (tool_flag, TOOL_PARSER, "--reasoning-parser", REASONING_PARSER)
        processes = args.turnout_processes if kind == "turnout" else 1
        specs.append(RouterSpec(kind, kind, args.policy, processes, extra))
        endpoint = getattr(args, "tracing_endpoint", None)
        if kind == "turnout" and endpoint:
            specs.append(
                RouterSpec(TRACED, kind, args.policy, processes, extra, tracing_endpoint=endpoint)
            )
    return specs


def turnout_has_kv_events() -> bool:
    """True when this turnout can route on its workers' KV events (``health.kv_events``)."""
    from turnout.workers.settings import HealthSettings

    return "kv_events" in HealthSettings.__struct_fields__


def _kv_specs(kind: str, args: argparse.Namespace) -> list[RouterSpec]:
    """The ``kv`` environment's targets of ``kind``: round robin, then cache-aware (turnout
    at each of ``args.process_counts`` and as ``args.kv_replicas`` replicas; smg's cache_aware
    subscribes to the sims' KV events)."""
    if kind != "turnout":
        return [
            RouterSpec("smg-rr", kind, "round_robin"),
            RouterSpec("smg-cache", kind, "cache_aware"),
        ]
    specs = [RouterSpec("turnout-rr", kind, "round_robin")]
    if turnout_has_kv_events():
        specs.append(RouterSpec("turnout-cache-noev", kind, "cache_aware", kv_events=False))
    for n in args.process_counts:
        name = "turnout-cache" if n == 1 else f"turnout-cache-p{n}"
        specs.append(RouterSpec(name, kind, "cache_aware", processes=n))
    if args.kv_replicas > 1:
        name = f"turnout-cache-x{args.kv_replicas}"
        specs.append(RouterSpec(name, kind, "cache_aware", replicas=args.kv_replicas))
    return specs


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How the load generators drive one scenario."""

    concurrency: int
    max_tokens: int
    warmup: float
    #: Seconds over which the tasks start (so long streams do not all end together).
    ramp: float
    #: Load-generator processes sharing the concurrency.
    processes: int
    #: Prompt groups sharing a system prompt (0: every prompt distinct).
    groups: int
    #: Seconds between progress events (RSS samples); 0: none.
    progress_every: float
    #: ``kv_cache``: conversations, turns per conversation, system and turn tokens (0: none).
    conversations: int = 0
    turns: int = 0
    system_tokens: int = 0
    turn_tokens: int = 0
    #: Random pause before each request, up to this many ms (outside its latency).
    think_ms: float = 0.0


#: Open streams one load-generator process drives at most (when --loadgen-processes is auto).
STREAMS_PER_LOADGEN: Final = 250
#: Output limit of the parser scenarios: the scripted answer (about 300 tokens) ends with EOS.
PARSER_MAX_TOKENS: Final = 2048


def load_plan(scenario: Scenario, args: argparse.Namespace) -> LoadPlan:
    """The load of ``scenario`` under the command line ``args``."""
    concurrency, max_tokens, warmup, ramp = args.concurrency, args.max_tokens, args.warmup, 0.0
    groups, progress = 0, 0.0
    if scenario.env == "paced":
        concurrency, max_tokens = args.paced_streams, args.paced_max_tokens
        low, high = parse_delay_range(args.paced_delay_ms)
        ramp = max_tokens * (low + high) / 2 / 1000  # one answer's length: starts spread evenly
        warmup = max(warmup, ramp)
        progress = 1.0
    elif scenario.env == "parsers":
        max_tokens = PARSER_MAX_TOKENS
    elif scenario.env == "routing":
        groups = args.prefix_groups
    elif scenario.env == "kv":
        groups, max_tokens = args.kv_groups, args.kv_max_tokens
    processes = args.loadgen_processes or max(1, math.ceil(concurrency / STREAMS_PER_LOADGEN))
    return LoadPlan(
        concurrency=concurrency,
        max_tokens=max_tokens,
        warmup=warmup,
        ramp=ramp,
        processes=min(processes, concurrency),
        groups=groups,
        progress_every=progress,
        **(_kv_load(args) if scenario.env == "kv" else {}),
    )


def _kv_load(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "think_ms": args.kv_think_ms,
        "conversations": args.kv_conversations,
        "turns": args.kv_turns,
        "system_tokens": args.kv_system_tokens,
        "turn_tokens": args.kv_turn_tokens,
    }


def by_env(names: list[str]) -> list[tuple[str, list[str]]]:
    """Scenario names grouped by environment, environments in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(SCENARIOS[name].env, []).append(name)
    return list(groups.items())
