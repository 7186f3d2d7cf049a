"""Config reload without a restart: workers leave and join, policies change, nothing drops."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .harness import MODEL, Router, run_router

WANTED: dict[str, Any] = {"keep_workers": 2, "policy": "round_robin"}


def edit(data: dict[str, Any]) -> dict[str, Any]:
    data["workers"] = data["workers"][: WANTED["keep_workers"]]
    data.setdefault("defaults", {})["policy"] = WANTED["policy"]
    return data


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(reload_data=edit) as running:
        yield running


def worker_ids(router: Router) -> list[str]:
    return [w["id"] for w in httpx.get(f"{router.base_url}/workers").json()["workers"]]


def test_reload_drains_removed_workers_and_adds_them_back(router: Router) -> None:
    before = worker_ids(router)
    assert len(before) == 2
    WANTED.update(keep_workers=1, policy="least_load")
    answer = httpx.post(f"{router.base_url}/admin/reload", timeout=10)
    assert answer.status_code == 200
    assert answer.json()["drained"] == [before[1]]
    router.wait_until(lambda: worker_ids(router) == [before[0]])
    for _ in range(4):
        reply = httpx.post(
            f"{router.base_url}/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "still here"}]},
            timeout=10,
        )
        assert reply.status_code == 200
    WANTED.update(keep_workers=2, policy="round_robin")
    again = httpx.post(f"{router.base_url}/admin/reload", timeout=10).json()
    assert again["added"] == [before[1]]
    router.wait_until(lambda: sorted(worker_ids(router)) == sorted(before))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("no_such_policy", "no_such_policy"),
        (
            {"name": "random", "params": {"sed": 1}},
            "defaults.policy.params: policy 'random' takes seed, got sed",
        ),
    ],
)
def test_a_bad_new_config_is_rejected_and_the_old_one_stays(
    router: Router, policy: Any, expected: str
) -> None:
    WANTED.update(policy=policy)
    try:
        answer = httpx.post(f"{router.base_url}/admin/reload", timeout=10)
    finally:
        WANTED.update(policy="round_robin")
    assert answer.status_code == 400
    assert expected in answer.json()["error"]["message"]
    reply = httpx.post(
        f"{router.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "fine"}]},
        timeout=10,
    )
    assert reply.status_code == 200


def test_model_discovered_from_workers_becomes_ready_without_traffic() -> None:
    # run_router waits for /readiness: it only turns 200 once the discovered model's tokenizer
    # was loaded in the background, before any request.
    with run_router(discover_model=True, sims=1) as running:
        models = httpx.get(f"{running.base_url}/v1/models").json()["data"]
        assert [m["id"] for m in models] == [MODEL]
        ready = httpx.get(f"{running.base_url}/readiness").json()
        assert ready == {"status": "ready", "models": [MODEL]}
