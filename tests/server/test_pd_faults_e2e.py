"""A prefill-decode fleet losing workers under load: with two of each role, a dead prefill or
a dead decode worker costs no request (failures before the answer retry the pair without the
dead worker); with none of a role left, a clear 503 naming the role."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from turnout.sim import SimWorker

from .harness import MODEL, Router, run_router

#: Clients sending one-shot requests at once.
CLIENTS = 4


@pytest.fixture
def fleet() -> Iterator[Router]:
    config = {
        "defaults": {"policy": {"name": "round_robin", "prefill": "round_robin"}},
        "retry": {"initial_backoff_ms": 10},
        # Without failover (test_migration_e2e has it): an echo sim cannot continue an answer.
        "migration": {"enabled": False},
    }
    sim_kwargs = {"delay_ms": 5.0, "ttft_ms": 20.0, "bootstrap_timeout_s": 20.0}
    with run_router(
        config=config, roles=["prefill", "prefill", "decode", "decode"], sim_kwargs=sim_kwargs
    ) as running:
        yield running


def chat(router: Router, text: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 12}
    return httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=60)


class Load:
    """``CLIENTS`` threads sending requests until stopped; counts outcomes by status."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def _run(self, client: int) -> None:
        sent = 0
        while not self._stop.is_set():
            response = chat(self.router, f"client {client} request {sent} under load")
            sent += 1
            with self._lock:
                self.statuses[response.status_code] += 1
                if response.status_code != 200:
                    self.errors.append(response.text)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def wait_for(self, answers: int) -> None:
        self.router.wait_until(lambda: sum(self.statuses.values()) >= answers, timeout=60)


def role_sims(router: Router, role: str) -> list[SimWorker]:
    return [s for s in router.sims if (s.bootstrap is not None) == (role == "prefill")]


def worker_states(router: Router) -> dict[str, tuple[str, str]]:
    listing = httpx.get(f"{router.base_url}/workers", timeout=10).json()["workers"]
    return {w["url"]: (w["role"], w["state"]) for w in listing}


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_dead_worker_under_load_costs_no_request_until_none_is_left(
    fleet: Router, role: str
) -> None:
    first, second = role_sims(fleet, role)
    with Load(fleet) as load:
        load.wait_for(8)
        fleet.call(first.stop_serving)
        before = sum(load.statuses.values())
        load.wait_for(before + 24)
    assert load.statuses[200] >= 32
    assert set(load.statuses) == {200}, load.errors[:3]
    # The router took the dead worker out of rotation (and still shows its role).
    fleet.wait_until(lambda: worker_states(fleet)[first.url][1] != "ready")
    assert worker_states(fleet)[first.url][0] == role

    fleet.call(second.stop_serving)
    # Before the router noticed: the attempt fails, and no other worker of the role is left.
    answer = chat(fleet, "anyone left?")
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert f"no other {role} worker is left" in message or f"no {role} worker can" in message
    # Once it knows: at once, without trying.
    fleet.wait_until(lambda: worker_states(fleet)[second.url][1] != "ready")
    answer = chat(fleet, "anyone left?")
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert f"no {role} worker can take the request" in error["message"]
    assert error["code"] == "no_available_workers"


def test_readiness_names_the_missing_role(fleet: Router) -> None:
    for sim in role_sims(fleet, "decode"):
        fleet.call(sim.stop_serving)

    def missing() -> bool:
        answer = httpx.get(f"{fleet.base_url}/readiness", timeout=10)
        return answer.status_code == 503 and answer.json()["models"] == {
            MODEL: "no healthy decode worker"
        }

    fleet.wait_until(missing)


def test_a_decode_worker_dying_mid_answer_is_retried_when_the_client_saw_nothing(
    fleet: Router,
) -> None:
    """A one-shot answer with a stop string (the decode worker streams it to turnout): the
    decode worker dies after its first chunk, and the request starts over on another pair."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a reply of several tokens here"}],
        "stop": ["never in the answer"],
    }
    url = f"{fleet.base_url}/v1/chat/completions"
    healthy = httpx.post(url, json=body, timeout=60)
    assert healthy.status_code == 200, healthy.text
    expected = healthy.json()["choices"][0]["message"]["content"]
    dying = role_sims(fleet, "decode")[0]
    dying.knobs.update(
        {"fail_after_tokens": 2, "fail_after_status": "UNAVAILABLE", "fault_budget": 1}
    )
    for i in range(2):  # round robin: one of them starts on the dying worker
        answer = httpx.post(url, json=body, headers={"x-request-id": f"pd-dies-{i}"}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == expected
    outcomes = dying.records.outcomes.items()
    assert [o for rid, o in outcomes if rid.startswith("pd-dies-")].count("error") == 1
