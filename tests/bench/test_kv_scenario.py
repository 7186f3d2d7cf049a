"""The ``kv_cache`` benchmark scenario: the conversation workload, the hit-rate arithmetic over
the sims' counters, and the environment's workers and targets. No timing assertions."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from bench.analysis import cache_use
from bench.report import render_results
from bench.run import _check_args, build_parser
from bench.scenarios import (
    DEFAULT_SCENARIOS,
    SCENARIOS,
    load_plan,
    router_specs,
    sim_args,
    turnout_has_kv_events,
)
from bench.workload import ConversationPool, make_conversation_body


def _args(*flags: str) -> Any:
    return build_parser().parse_args(list(flags))


def _chatml(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def test_each_turn_extends_the_previous_one_and_groups_share_system_prompts() -> None:
    pool = ConversationPool(8, groups=2, turns=3, system_tokens=40, turn_tokens=8)
    assert [pool.locate(i) for i in (0, 7, 8, 16, 24, 25)] == [
        (0, 0, 0),
        (7, 0, 0),
        (0, 0, 1),
        (0, 0, 2),
        (0, 1, 0),
        (1, 1, 0),
    ]
    for conversation in range(8):
        turns = [pool.messages(conversation + 8 * t) for t in range(3)]
        for before, after in itertools.pairwise(turns):
            # the earlier turn, then the assistant's reply and the new user message
            assert after[: len(before)] == before
            assert [m["role"] for m in after[len(before) :]] == ["assistant", "user"]
            assert _chatml(after).startswith(_chatml(before))
        assert turns[0][0]["content"] == pool.systems[conversation % 2]
        # the next epoch starts over with new content behind the same system prompt
        again = pool.messages(conversation + 8 * 3)
        assert len(again) == 2
        assert again[0] == turns[0][0]
        assert again[1] != turns[0][1]
    assert pool.systems[0] != pool.systems[1]
    assert [pool.group(i) for i in range(10)] == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    # agent loops (odd conversations) add long observations and short actions
    chat, agent = pool.messages(8 * 2), pool.messages(1 + 8 * 2)
    assert len(agent[1]["content"]) > 2 * len(chat[1]["content"])
    assert len(agent[2]["content"]) < len(chat[2]["content"])
    # deterministic: a second pool (another load-generator process) sends the same bytes
    twin = ConversationPool(8, groups=2, turns=3, system_tokens=40, turn_tokens=8)
    assert twin.messages(21) == pool.messages(21)


def test_closed_loop_clients_keep_their_conversations_in_turn_order() -> None:
    pool = ConversationPool(8, groups=4, turns=4, system_tokens=16, turn_tokens=4)
    clients = 4
    for k in range(clients):
        sent = [pool.locate(k + n * clients) for n in range(16)]
        assert {c for c, _, _ in sent} == {k, k + 4}
        for conversation in (k, k + 4):
            steps = [(e, t) for c, e, t in sent if c == conversation]
            assert steps == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]


def test_conversation_body_is_a_pinned_stream_with_usage() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    body = json.loads(make_conversation_body("m", messages, 16))
    assert body["messages"] == messages
    assert body["max_tokens"] == 16
    assert body["ignore_eos"] is True
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def _counters(*workers: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """get_counters answers: per worker, per rank (requests, prompt_tokens, cached_tokens)."""
    return [
        {
            "tokens_out": 0,
            "ranks": [
                {"requests": r, "prompt_tokens": p, "cached_tokens": c, "generated_tokens": 0}
                for r, p, c in ranks
            ],
        }
        for ranks in workers
    ]


def test_hit_rate_is_cached_over_prompt_tokens_inside_the_window() -> None:
    before = _counters([(10, 5000, 1000)], [(4, 2000, 0), (6, 3000, 500)])
    after = _counters([(30, 15000, 8000)], [(14, 7000, 3000), (16, 8000, 4000)])
    use = cache_use(before, after)
    # inside the window: 10000 + 5000 + 5000 prompt tokens, 7000 + 3000 + 3500 cached
    assert use["prompt_tokens"] == 20000
    assert use["cached_tokens"] == 13500
    assert use["hit_rate"] == 0.675
    # the second worker's two ranks are summed
    assert use["workers"] == [
        {"requests": 20, "prompt_tokens": 10000, "cached_tokens": 7000},
        {"requests": 20, "prompt_tokens": 10000, "cached_tokens": 6500},
    ]
    assert use["requests_max_over_mean"] == 1.0
    assert use["prompt_max_over_mean"] == 1.0
    lopsided = cache_use(
        _counters([(0, 0, 0)], [(0, 0, 0)]), _counters([(30, 900, 0)], [(10, 300, 0)])
    )
    assert lopsided["hit_rate"] == 0.0
    assert lopsided["requests_max_over_mean"] == 1.5
    assert lopsided["prompt_max_over_mean"] == 1.5
    idle = cache_use(_counters([(0, 0, 0)]), _counters([(0, 0, 0)]))
    assert idle["hit_rate"] is None
    assert idle["requests_max_over_mean"] is None


def test_kv_environment_is_opt_in_with_cache_on_and_prefill_cost(tmp_path: Path) -> None:
    assert "kv_cache" not in DEFAULT_SCENARIOS
    assert "kv_cache" not in _args().scenarios
    args = _args("--scenarios", "kv_cache", "--kv-cache-tokens", "5000")
    assert _check_args(args) is None
    flags = sim_args("kv", args, 0, tmp_path)
    assert flags[flags.index("--kv-cache-tokens") + 1] == "5000"
    assert float(flags[flags.index("--prefill-tokens-per-s") + 1]) > 0
    specs = router_specs("kv", args, ["turnout", "smg"])
    if turnout_has_kv_events():  # cache_aware also without the events, as a baseline
        assert specs.pop(1).kv_events is False
    assert [(s.target, s.kind, s.policy, s.processes) for s in specs] == [
        ("turnout-rr", "turnout", "round_robin", 1),
        ("turnout-cache", "turnout", "cache_aware", 1),
        ("turnout-cache-p2", "turnout", "cache_aware", 2),
        ("turnout-cache-x2", "turnout", "cache_aware", 1),
        ("smg-rr", "smg", "round_robin", 1),
        ("smg-cache", "smg", "cache_aware", 1),
    ]
    assert [s.replicas for s in specs] == [1, 1, 1, 2, 1, 1]
    alone = router_specs("kv", _args("--kv-replicas", "1"), ["turnout"])
    assert [s.target for s in alone if s.kv_events is None] == [
        "turnout-rr",
        "turnout-cache",
        "turnout-cache-p2",
    ]
    picked = _args("--kv-targets", "turnout-cache-x2,smg-cache")
    assert [s.target for s in router_specs("kv", picked, ["turnout", "smg"])] == [
        "turnout-cache-x2",
        "smg-cache",
    ]
    plan = load_plan(SCENARIOS["kv_cache"], args)
    assert (plan.conversations, plan.groups, plan.max_tokens) == (64, 8, 16)
    assert SCENARIOS["kv_cache"].streaming  # TTFT needs a stream
    bad = _args("--scenarios", "kv_cache", "--kv-conversations", "40")
    assert "multiple of --concurrency" in (_check_args(bad) or "")


def test_report_shows_the_cache_table() -> None:
    data = {
        "requests_per_s": 50.0,
        "output_tokens_per_s": 800.0,
        "ttft_ms": {"p50": 120.0, "p99": 900.0},
        "errors": 0,
        "kv_cache": {"hit_rate": 0.8126, "requests_max_over_mean": 1.25},
    }
    text = render_results({"results": {"kv_cache": {"turnout-cache": data}}})
    assert "prefix cache: hit rate" in text
    line = next(row for row in text.splitlines() if "0.813" in row)
    assert "turnout-cache" in line
    assert "1.250" in line
