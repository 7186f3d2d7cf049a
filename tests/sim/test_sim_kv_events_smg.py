"""smg's event-driven cache-aware routing runs on the simulator's KV event stream.

Only the event stream can tell smg that a worker holds a prefix that smg never routed there: the
test warms one sim's cache behind smg's back, and smg sends that prefix group to it.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bench.services import find_smg, start_smg
from tests.support import eventually
from turnout.sim import SimWorker
from turnout.wire import WorkerClient, build_generate_request, build_sampling_params

from ..wire._helpers import fold, tokenizer

pytestmark = [
    pytest.mark.slow,  # an smg process of its own
    pytest.mark.skipif(find_smg() is None, reason="smg is not installed (pip install smg)"),
]

#: Prefix groups: a long shared system prompt each, and the sim whose cache is warmed with it.
_GROUPS = {
    f"group {g}": " ".join(f"{g} rule {i}: keep the answer short and kind." for i in range(12))
    for g in ("alpha", "beta", "gamma")
}


def _complete(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "turnout-demo", "prompt": prompt, "max_tokens": 4}
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


async def _warm(sim: SimWorker, prompt: str) -> list[int]:
    """Serve ``prompt`` on ``sim`` directly (behind smg's back); its token ids."""
    ids = list(tokenizer().encode(prompt, add_special_tokens=False).ids)
    async with WorkerClient(sim.url) as client:
        await fold(
            client.generate(
                build_generate_request(
                    request_id=f"warm-{len(sim.requests)}",
                    input_ids=ids,
                    sampling_params=build_sampling_params(max_new_tokens=2),
                )
            )
        )
    return ids


@pytest.mark.parametrize(
    "warm_before_smg",
    [pytest.param(False, id="live-events"), pytest.param(True, id="snapshot")],
)
async def test_smg_routes_prefix_groups_to_the_sims_whose_events_announced_them(
    tmp_path: Path, warm_before_smg: bool
) -> None:
    """Each group is warmed on one sim directly: smg never routed these prefixes, only the
    events tell it where they are (live, or in the snapshot of a sim warmed before smg)."""
    command = find_smg()
    assert command is not None
    async with SimWorker(port=0) as first, SimWorker(port=0) as second:
        owner = dict(zip(_GROUPS, (second, first, second), strict=True))
        warmed: dict[str, list[int]] = {}

        async def warm_up() -> None:
            for group, prompt in _GROUPS.items():
                warmed[group] = await _warm(owner[group], prompt + " warm-up")

        if warm_before_smg:
            await warm_up()
        router = await asyncio.to_thread(
            start_smg, [first.url, second.url], tmp_path, policy="cache_aware", command=command
        )
        try:
            await eventually(
                lambda: bool(first.records.kv_subscriptions and second.records.kv_subscriptions),
                what="smg subscribes to both sims' KV events",
                every=0.1,
            )
            if not warm_before_smg:
                await warm_up()
            await asyncio.sleep(0.5)  # the stored blocks reach smg
            sims = {sim.url: sim for sim in (first, second)}
            landed: dict[str, set[str]] = {}
            for i in range(4):
                for group, prompt in _GROUPS.items():
                    counts = {url: len(sim.requests) for url, sim in sims.items()}
                    answer = await asyncio.to_thread(_complete, router.url, f"{prompt} q{i}")
                    assert answer["choices"]
                    landed.setdefault(group, set()).update(
                        url for url, sim in sims.items() if len(sim.requests) != counts[url]
                    )
        finally:
            await asyncio.to_thread(router.stop)
    assert landed == {g: {owner[g].url} for g in _GROUPS}
    # smg tokenized as the warm-up did, and the sims served the groups from cache.
    last = owner["group gamma"].requests[-1]
    assert list(last.tokenized.input_ids)[:32] == warmed["group gamma"][:32]
