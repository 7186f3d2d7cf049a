"""The ``contention`` scenario's phases against a real router and sim: the bulk load runs from
the start of a phase (its head start before the interactive trickle), and the workers' own
counters are read per phase. No timing assertions."""

from __future__ import annotations

from typing import Any

from bench.contention import _phase
from bench.run import build_parser
from tests.server.harness import run_router


def _args(*flags: str) -> Any:
    return build_parser().parse_args(["--scenarios", "contention", *flags])


async def test_bulk_runs_during_its_head_start_and_engines_are_counted() -> None:
    args = _args(
        "--contention-phase-s",
        "2",  # a head start of 0.5 s
        "--contention-bulk-clients",
        "2",
        "--contention-bulk-prompt-tokens",
        "40",
        "--contention-bulk-max-tokens",
        "1",
        "--contention-interactive-rps",
        "4",
    )
    with run_router(sims=1) as router:
        sim = router.sims[0]
        phase = await _phase(router.base_url, [sim.url], args, interactive=True, bulk=True)
        summary = phase.summary()
        assert summary["interactive_requests"] > 0
        assert summary["bulk_requests_per_s"] > 0
        assert phase.first_bulk_s is not None
        assert phase.first_interactive_s is not None
        # The bulk load starts at once; the trickle after its head start.
        assert phase.first_interactive_s - phase.first_bulk_s > 0.3
        assert summary["engine_calls"] > 0
        assert summary["engine_slot_seconds"] > 0
        assert summary["engine_cancelled"] == 0
