"""Harness logic of the scenarios added for issue 21: paced streams, parsers on the hot path,
serving processes with routing quality, and the merging of several load generators.

No timing assertions: these check the arithmetic and the wiring, not speed.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.analysis import (
    Record,
    added_delay,
    affinity,
    memory_per_stream,
    read_gaps,
    slope_per_minute,
    split_concurrency,
    summarize,
    write_gaps,
)
from bench.loadgen import run_load
from bench.report import check_targets, ratios, render_results
from bench.run import _check_args, _with_paced_delay, build_parser, raise_fd_limit
from bench.scenarios import (
    PARSER_REPLY,
    SCENARIOS,
    by_env,
    load_plan,
    parse_delay_range,
    router_specs,
    sim_args,
    worker_tag,
)
from bench.workload import GapLog, Outcome, PromptPool, make_body, read_json_answer, read_sse_answer


def _args(*flags: str) -> Any:
    return build_parser().parse_args(list(flags))


# -- scenarios and their environments -----------------------------------------------------------


def test_new_scenarios_are_selectable() -> None:
    names = ["paced_stream", "parse_chat", "parse_chat_stream", "processes"]
    args = _args("--scenarios", ",".join(names))
    assert _check_args(args) is None
    assert args.scenarios == names
    assert by_env(["chat", "paced_stream", "parse_chat", "chat_stream", "parse_chat_stream"]) == [
        ("plain", ["chat", "chat_stream"]),
        ("paced", ["paced_stream"]),
        ("parsers", ["parse_chat", "parse_chat_stream"]),
    ]
    assert "--scenarios" in (_check_args(_args("--scenarios", "paced")) or "")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--paced-delay-ms", "40-20"), "--paced-delay-ms"),
        (("--paced-streams", "0"), "--paced-streams"),
        (("--process-counts", "0,2"), "--process-counts"),
        (("--prefix-groups", "0"), "--prefix-groups"),
    ],
)
def test_bad_scenario_flags(flags: tuple[str, ...], message: str) -> None:
    assert message in (_check_args(_args(*flags)) or "")


def test_delay_range() -> None:
    assert parse_delay_range("20-40") == (20.0, 40.0)
    assert parse_delay_range("30") == (30.0, 30.0)
    for bad in ("40-20", "x", "-5"):
        with pytest.raises(ValueError):  # noqa: PT011 - float() and ours both raise ValueError
            parse_delay_range(bad)


def test_paced_plan_spreads_long_streams_over_several_loadgens() -> None:
    args = _args("--paced-streams", "1000", "--paced-max-tokens", "200", "--warmup", "1")
    plan = load_plan(SCENARIOS["paced_stream"], args)
    assert plan.concurrency == 1000
    assert plan.max_tokens == 200
    assert plan.ramp == pytest.approx(200 * 0.030)  # one answer at the mean delay of 20-40 ms
    assert plan.warmup == pytest.approx(plan.ramp)  # the window opens once starts are spread
    assert plan.processes == 4  # 250 streams per load generator
    assert plan.progress_every > 0  # RSS over time
    fixed = load_plan(SCENARIOS["paced_stream"], _args("--loadgen-processes", "2"))
    assert fixed.processes == 2
    plain = load_plan(SCENARIOS["chat_stream"], _args())
    assert (plain.concurrency, plain.processes, plain.ramp, plain.groups) == (32, 1, 0.0, 0)


def test_sim_flags_per_environment(tmp_path: Path) -> None:
    args = _args("--paced-delay-ms", "20-40")
    assert sim_args("plain", args, 0, tmp_path) == ["--tokens-per-chunk", "1"]
    paced = sim_args("paced", args, 0, tmp_path)
    assert paced[paced.index("--delay-ms") + 1] == "20"
    assert paced[paced.index("--delay-jitter-ms") + 1] == "20"
    assert paced[paced.index("--transport") + 1] == "native"  # cheap sims at 1,000 streams
    assert "--transport" not in sim_args("plain", args, 0, tmp_path)
    parsers = sim_args("parsers", args, 1, tmp_path)
    script = json.loads(Path(parsers[parsers.index("--script") + 1]).read_text())
    assert script["rules"][0]["reply"] == PARSER_REPLY
    tagged = [sim_args("routing", args, i, tmp_path) for i in range(2)]
    replies = [
        json.loads(Path(f[f.index("--script") + 1]).read_text())["rules"][0]["reply"]
        for f in tagged
    ]
    assert replies == [f"{worker_tag(0)} {{user}}", f"{worker_tag(1)} {{user}}"]


def test_parser_reply_is_qwen3_reasoning_and_two_qwen_calls() -> None:
    assert PARSER_REPLY.startswith("<think>\n")
    assert PARSER_REPLY.count("</think>") == 1
    calls = PARSER_REPLY.split("<tool_call>\n")[1:]
    assert len(calls) == 2
    names = [json.loads(c.split("\n</tool_call>")[0])["name"] for c in calls]
    assert names == ["get_weather", "search"]


def test_routers_per_environment() -> None:
    args = _args("--turnout-processes", "1", "--process-counts", "1,2")
    parsers = {s.target: s for s in router_specs("parsers", args, ["turnout", "smg"])}
    assert parsers["turnout"].extra == ("--tool-parser", "qwen", "--reasoning-parser", "qwen3")
    assert parsers["smg"].extra == ("--tool-call-parser", "qwen", "--reasoning-parser", "qwen3")
    routing = router_specs("routing", args, ["turnout", "smg"])
    assert [(s.target, s.kind, s.processes, s.policy) for s in routing] == [
        ("turnout", "turnout", 1, "cache_aware"),
        ("turnout-p2", "turnout", 2, "cache_aware"),
        ("smg", "smg", 1, "cache_aware"),
    ]
    plain = router_specs("paced", args, ["turnout"])
    assert [(s.target, s.extra, s.policy) for s in plain] == [("turnout", (), "round_robin")]


def test_fd_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = raise_fd_limit(100)
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        assert soft == hard


# -- request bodies and answers -----------------------------------------------------------------


def test_parser_bodies_offer_tools_and_let_the_answer_end() -> None:
    body = json.loads(make_body("parse_chat_stream", "m", "hi", 2048))
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "search"]
    assert "ignore_eos" not in body
    assert body["stream"] is True
    paced = json.loads(make_body("paced_stream", "m", "hi", 256))
    assert paced["ignore_eos"] is True
    assert paced["stream_options"] == {"include_usage": True}
    routed = json.loads(make_body("processes", "m", "hi", 16, system="shared"))
    assert routed["messages"][0] == {"role": "system", "content": "shared"}


def test_prompt_groups_share_a_system_prompt() -> None:
    pool = PromptPool(80, size=8, groups=4)
    assert [pool.group(i) for i in range(9)] == [0, 0, 1, 1, 2, 2, 3, 3, 0]
    assert pool.system(0) == pool.system(1) != pool.system(2)
    assert pool.text(0) != pool.text(1)
    ids0, ids4 = pool.ids(0), pool.ids(1)
    shared = next(i for i, (a, b) in enumerate(zip(ids0, ids4, strict=False)) if a != b)
    assert shared > 30  # a long common prefix for a cache-aware policy
    plain = PromptPool(80, size=4)
    assert plain.group(1) is None
    assert plain.system(1) is None


def test_every_client_of_a_closed_loop_sends_every_group() -> None:
    """Client k of 8 sends prompts k, k + 8, …: each group reaches the router over all 8
    clients' connections (so over every serving process that holds some)."""
    pool = PromptPool(20, size=64, groups=8)
    clients = {g: {i % 8 for i in range(640) if pool.group(i) == g} for g in range(8)}
    assert clients == {g: set(range(8)) for g in range(8)}


def _chat(message: dict[str, Any]) -> bytes:
    return json.dumps(
        {"choices": [{"message": message}], "usage": {"completion_tokens": 7}}
    ).encode()


def test_parsed_and_tagged_json_answers() -> None:
    full = {"content": "x", "reasoning_content": "think", "tool_calls": [{"id": "1"}]}
    assert read_json_answer(200, _chat(full), parsed=True).error is None
    unparsed = read_json_answer(200, _chat({"content": "<think>x</think>"}), parsed=True)
    assert unparsed.error is not None
    assert "parsers" in unparsed.error
    tagged = read_json_answer(200, _chat({"content": "worker-1 Request 5"}), tagged=True)
    assert (tagged.worker, tagged.tokens) == ("worker-1", 7)
    generate = read_json_answer(
        200, b'{"text": "worker-0 x", "meta_info": {"completion_tokens": 3}}', tagged=True
    )
    assert generate.worker == "worker-0"


async def _pieces(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


async def test_sse_gaps_count_output_events_only() -> None:
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
    token = {"choices": [{"delta": {"content": "a"}}]}
    finish = {"choices": [{"delta": {}, "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"completion_tokens": 3}}
    gaps = GapLog()
    outcome = await read_sse_answer(
        _pieces(
            f"data: {json.dumps(role)}\n\ndata: {json.dumps(token)}\n\n".encode(),
            f"data: {json.dumps(token)}\n\n".encode(),
            f"data: {json.dumps(token)}\n\n".encode(),
            _sse(finish, usage),
        ),
        gaps=gaps,
    )
    assert outcome.error is None
    assert outcome.tokens == 3
    assert len(gaps) == 2  # three output events, the first one is the TTFT, not a gap
    assert all(g >= 0 for g in gaps.gap)


async def test_sse_parsed_streams_need_reasoning_and_tool_deltas() -> None:
    reasoning = {"choices": [{"delta": {"reasoning_content": "hm"}}]}
    call = {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c"}]}}]}
    usage = {"choices": [], "usage": {"completion_tokens": 2}}
    both = await read_sse_answer(_pieces(_sse(reasoning, call, usage)), parsed=True)
    assert both.error is None
    only_text = {"choices": [{"delta": {"content": "<tool_call>"}}]}
    missing = await read_sse_answer(_pieces(_sse(reasoning, only_text, usage)), parsed=True)
    assert missing.error is not None
    assert "tool_calls" in missing.error


# -- merging load generators, and the figures ---------------------------------------------------


def test_concurrency_split_covers_every_task_once() -> None:
    assert split_concurrency(1000, 4) == [(0, 250), (250, 250), (500, 250), (750, 250)]
    assert split_concurrency(10, 3) == [(0, 4), (4, 3), (7, 3)]
    assert split_concurrency(2, 5) == [(0, 1), (1, 1)]


def test_records_and_gaps_survive_the_round_trip(tmp_path: Path) -> None:
    record = Record("chat", 1.0, 2.0, 1.5, 16, None, 3, 2, "worker-1")
    assert Record(*json.loads(json.dumps(record.as_row()))) == record
    logs = []
    for p in range(2):
        log = GapLog()
        log.add(10.0 + p, 0.03)
        log.add(20.0 + p, 0.05)
        write_gaps(tmp_path / f"{p}.itl", log)
        logs.append(log)
    merged = read_gaps([tmp_path / "0.itl", tmp_path / "1.itl", tmp_path / "absent.itl"])
    assert list(merged.at) == [10.0, 20.0, 11.0, 21.0]
    assert list(merged.gap) == [0.03, 0.05, 0.03, 0.05]


def test_summary_counts_only_the_window() -> None:
    records = [
        Record("s", 0.0, 1.0, 0.1, 10, None),  # finished before the window
        Record("s", 1.0, 3.0, 1.2, 10, None),
        Record("s", 2.0, 4.0, 2.5, 10, None),
        Record("s", 2.0, 4.5, None, 0, "HTTP 503: busy"),
        Record("s", 4.0, 9.0, 4.1, 10, None),  # finished after
    ]
    gaps = GapLog()
    for at, gap in ((1.5, 0.010), (3.0, 0.020), (4.0, 0.030), (8.0, 0.5)):
        gaps.add(at, gap)
    summary = summarize(records, 2.0, 6.0, gaps=gaps)
    assert (summary["requests"], summary["errors"], summary["output_tokens"]) == (2, 1, 20)
    assert summary["error_samples"] == ["HTTP 503: busy"]
    assert summary["itl_samples"] == 2
    assert summary["itl_ms"]["p50"] == 20.0
    assert summary["itl_ms"]["max"] == 30.0
    assert summarize(records, 2.0, 6.0)["itl_ms"] is None


def test_affinity_measures_how_often_a_group_stays_on_one_worker() -> None:
    def rec(group: int, worker: str, error: str | None = None) -> Record:
        return Record("processes", 0, 1, None, 1, error, 1, group, worker)

    perfect = [rec(g, f"worker-{g % 2}") for g in range(4) for _ in range(3)]
    assert affinity(perfect) == {
        "requests": 12,
        "groups": 4,
        "same_worker_share": 1.0,
        "workers_per_group": 1.0,
    }
    split = [rec(0, "worker-0"), rec(0, "worker-1"), rec(0, "worker-0"), rec(1, "worker-1")]
    split.append(rec(1, "worker-0", error="HTTP 500"))  # failed requests do not count
    result = affinity(split)
    assert result is not None
    assert result["same_worker_share"] == 0.75
    assert result["workers_per_group"] == 1.5
    assert affinity([Record("chat", 0, 1, None, 1, None)]) is None


def test_memory_growth_and_added_delay() -> None:
    assert memory_per_stream(100.0, [110.0, 112.0, 114.0], 1000) == pytest.approx(12.29, 0.01)
    assert memory_per_stream(None, [1.0], 10) is None
    assert memory_per_stream(1.0, [], 10) is None
    flat = [(float(t), 90.0) for t in range(10)]
    assert slope_per_minute(flat) == 0.0
    growing = [(float(t), 90.0 + t / 60) for t in range(10)]
    assert slope_per_minute(growing) == pytest.approx(1.0)
    added = added_delay({"p50": 31.0, "p99": 45.5}, {"p50": 30.0, "p99": 40.0})
    assert added == {"p50": 1.0, "p99": 5.5}
    assert added_delay(None, {"p50": 1.0}) == {"p50": None, "p99": None}


def test_paced_results_say_whether_the_workers_kept_their_pace() -> None:
    args = _args("--paced-delay-ms", "20-40")
    results: dict[str, dict[str, Any]] = {
        "paced_stream": {
            "direct": {"itl_ms": {"p50": 31.0, "p99": 45.0}},
            "turnout": {"itl_ms": {"p50": 32.0, "p99": 49.0}},
        },
        "chat_stream": {"direct": {"itl_ms": {"p50": 1.0, "p99": 2.0}}, "turnout": {}},
    }
    _with_paced_delay(results, args)
    paced = results["paced_stream"]
    assert paced["direct"]["pace"] == {"planned_ms": 30.0, "direct_itl_p50_ms": 31.0, "kept": True}
    assert paced["turnout"]["itl_added_ms"] == {"p50": 1.0, "p99": 4.0}
    assert "pace" not in results["chat_stream"]["direct"]  # only paced scenarios
    slow = {"paced_stream": {"direct": {"itl_ms": {"p50": 120.0, "p99": 500.0}}}}
    _with_paced_delay(slow, args)
    assert slow["paced_stream"]["direct"]["pace"]["kept"] is False
    slow["paced_stream"]["turnout"] = {"itl_added_ms": {"p50": 1.0, "p99": 2.0}}
    assert "pace NOT kept" in render_results({"results": slow})
    (check,) = check_targets({}, slow, 32)
    assert check["met"] is None  # no verdict on the added delay of a saturated run
    assert "could not keep their pace" in check["target"]


def _m(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "requests_per_s": 10.0,
        "output_tokens_per_s": 100.0,
        "latency_ms": {"p50": 1.0, "p99": 2.0},
        "ttft_ms": {"p50": 1.0, "p99": 2.0},
        "router_cpu": {"ms_per_request": 1.0, "us_per_token": 10.0},
        "errors": 0,
    }
    base.update(fields)
    return base


def test_targets_and_tables_of_the_new_scenarios() -> None:
    results = {
        "paced_stream": {
            "direct": _m(itl_ms={"p50": 30.0, "p99": 40.0}, concurrency=1000),
            "turnout": _m(
                worker_tokens_per_s=800.0,
                itl_ms={"p50": 30.5, "p99": 42.0},
                itl_added_ms={"p50": 0.5, "p99": 2.0},
                memory={"kib_per_stream": 12.0, "slope_mb_per_min": 0.1},
                concurrency=1000,
            ),
            "smg": _m(
                worker_tokens_per_s=1000.0,
                itl_added_ms={"p50": 0.2, "p99": 4.0},
                memory={"kib_per_stream": 8.0},
            ),
        },
        "parse_chat_stream": {
            "turnout": _m(router_cpu={"ms_per_request": 2.0, "us_per_token": 20.0}),
            "smg": _m(),
        },
        "processes": {
            "turnout": _m(routing={"same_worker_share": 0.97, "workers_per_group": 1.03}),
            "turnout-p2": _m(
                requests_per_s=15.0, routing={"same_worker_share": 0.7, "workers_per_group": 1.6}
            ),
            "smg": _m(routing={"same_worker_share": 1.0, "workers_per_group": 1.0}),
        },
    }
    table = ratios(results, "turnout", "smg")
    checks = {c["target"]: c for c in check_targets(table, results, 32)}
    assert checks["cpu per token, parsers, streaming"]["met"] is False
    added = checks["inter-token delay turnout adds at p99 (paced_stream)"]
    assert (added["value"], added["unit"], added["met"]) == (2.0, "ms", True)
    assert checks["throughput (paced_stream)"]["value"] == 0.8  # the workers' token rates
    processes = ratios(results, "turnout-p2", "turnout")
    assert processes["processes"]["requests_per_s"] == 1.5
    text = render_results(
        {
            "results": results,
            "ratios": {"turnout/smg": table, "turnout-p2/turnout": processes},
            "targets": list(checks.values()),
        }
    )
    assert "paced streams" in text
    assert "routing quality" in text
    assert "turnout-p2/turnout (same run" in text
    assert "+2.00 ms (want <= 3.0 ms) met" in text


async def test_load_spreads_tasks_and_prompts_across_processes() -> None:
    seen: list[tuple[int, str]] = []

    def new_sender() -> Any:
        async def send(i: int, scenario: str) -> Outcome:
            seen.append((i, scenario))
            await asyncio.sleep(0.01)
            return Outcome(tokens=1, first_token_at=0.0, worker=f"prompt-{i}")

        return send

    now = time.perf_counter()
    records = await run_load(
        new_sender,
        ["processes"],
        concurrency=2,
        window=(now + 0.05, now + 0.2),
        request_timeout=5,
        offset=2,
        total=4,
        group_of=lambda i: i % 3,
    )
    assert records
    indices = {i for i, _ in seen}
    assert {i % 4 for i in indices} == {2, 3}  # this process owns tasks 2 and 3 of 4
    for record in records:
        assert record.worker is not None
        assert record.group == int(record.worker.removeprefix("prompt-")) % 3


def test_worker_counters_and_jitter_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnout.sim import SimWorker, get_counters
    from turnout.sim import emitter as sim_emitter
    from turnout.sim.ranks import Running
    from turnout.wire import WorkerClient
    from turnout.wire.sampling import build_generate_request, build_sampling_params

    pauses: list[float] = []

    async def pause(_state: Any, seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(Running, "sleep", pause)
    monkeypatch.setattr(sim_emitter.random, "random", lambda: 0.5)

    async def scenario() -> dict[str, int]:
        async with SimWorker(delay_ms=20, delay_jitter_ms=20) as sim:
            client = WorkerClient(sim.url)
            request = build_generate_request(
                request_id="r1",
                input_ids=[5, 6, 7],
                sampling_params=build_sampling_params(max_new_tokens=4, ignore_eos=True),
                stream=True,
            )
            async with client.generate(request) as stream:
                async for _ in stream:
                    pass
            await client.close()
            return await get_counters(sim.url)

    counters = asyncio.run(scenario())
    assert counters["tokens_out"] == 4
    assert counters["requests"] == 1
    assert counters["running"] == 0
    assert pauses[1:] == [pytest.approx(0.030)] * 3  # 20 ms + half of the 20 ms jitter
