"""Tenants in pieces: config validation, keys, model patterns, the retry-time arithmetic of the
sliding window, reservation sizes, and the admission queue's priorities."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from turnout.config import build_config, config_warnings, substitute_env
from turnout.errors import ApiError, ConfigError
from turnout.server.auth import Access, KeyRing
from turnout.server.limits import AdmissionGate
from turnout.tenants import TenantTable
from turnout.tenants.limiter import TenantLimiter, reservation_size
from turnout.tenants.refusal import WindowState, duration
from turnout.wire.proto import sglang_scheduler_pb2 as pb


def config(**sections: Any) -> Any:
    return build_config(sections)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# -- config ------------------------------------------------------------------------------------


def test_tenants_and_limits_are_read_with_their_defaults() -> None:
    cfg = config(
        tenants={"team-a": {"keys": ["ka"], "requests_per_minute": 10, "priority": 5}},
        limits={"storage": "redis://127.0.0.1:6379/0"},
    )
    tenant = cfg.tenants["team-a"]
    assert tenant.requests_per_minute == 10
    assert tenant.tokens_per_minute is None
    assert tenant.models is None
    assert tenant.priority == 5
    assert tenant.limited
    assert cfg.limits.on_storage_error == "open"
    assert cfg.limits.window_s == 60


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"tenants": {"bad name": {}}}, "tenants"),
        ({"tenants": {"a": {"requests_per_minute": 0}}}, "tenants.a.requests_per_minute"),
        ({"tenants": {"a": {"key_sha256": ["abc"]}}}, "tenants.a.key_sha256"),
        ({"tenants": {"a": {"keys": [" "]}}}, "tenants.a.keys"),
        ({"tenants": {"a": {"models": [""]}}}, "tenants.a.models"),
        ({"tenants": {"a": {"keys": ["k"]}, "b": {"keys": ["k"]}}}, "tenants.b.keys"),
        ({"tenants": {"a": {"keys": ["k"]}, "b": {"key_sha256": [sha("k")]}}}, "tenants.b"),
        (
            {"server": {"api_keys": ["k"]}, "tenants": {"a": {"key_sha256": [sha("k").upper()]}}},
            "server.api_keys",
        ),
        ({"limits": {"storage": "memcached://x"}}, "limits.storage"),
        ({"limits": {"on_storage_error": "maybe"}}, "limits.on_storage_error"),
    ],
)
def test_bad_tenant_config_names_the_key(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build_config(sections)


def test_tenant_keys_without_an_admin_key_are_warned_about() -> None:
    warned = config_warnings(config(tenants={"a": {"keys": ["k"]}}))
    assert any("admin_api_key" in w for w in warned)
    assert not config_warnings(config(server={"admin_api_key": "x"}, tenants={"a": {}}))


# -- keys and models ---------------------------------------------------------------------------


def test_keys_name_their_tenant_and_tenant_keys_never_open_admin_routes() -> None:
    cfg = config(
        server={"api_keys": ["plain"]},
        tenants={"a": {"keys": ["ka"]}, "b": {"key_sha256": [sha("kb")]}},
    )
    keys = KeyRing.from_config(cfg.server, TenantTable.from_config(cfg))
    tenant_a = keys.check(Access.SERVING, "Bearer ka")
    tenant_b = keys.check(Access.SERVING, "bearer kb")
    assert tenant_a is not None
    assert tenant_a.name == "a"
    assert tenant_b is not None
    assert tenant_b.name == "b"
    assert keys.check(Access.SERVING, "Bearer plain") is None
    assert keys.check(Access.ADMIN, "Bearer plain") is None  # no admin key: untenanted keys
    for key in ("ka", "kb"):
        with pytest.raises(ApiError) as refused:
            keys.check(Access.ADMIN, f"Bearer {key}")
        assert refused.value.status == 401
    with pytest.raises(ApiError):
        keys.check(Access.SERVING, "Bearer nobody")


def test_admin_routes_close_when_only_tenants_have_keys() -> None:
    cfg = config(tenants={"a": {"keys": ["ka"]}})
    keys = KeyRing.from_config(cfg.server, TenantTable.from_config(cfg))
    with pytest.raises(ApiError):
        keys.check(Access.ADMIN, "Bearer ka")
    with pytest.raises(ApiError):
        keys.check(Access.ADMIN, None)
    assert keys.check(Access.PUBLIC, None) is None
    open_ring = KeyRing.from_config(config().server, TenantTable.from_config(config()))
    assert open_ring.check(Access.ADMIN, None) is None


def test_model_patterns_match_ids_and_aliases() -> None:
    cfg = config(
        models={"org/big-model": {"aliases": ["big"]}},
        tenants={
            "glob": {"models": ["org/*"]},
            "unlisted": {"models": ["other/*"]},
            "alias": {"models": ["big"]},
            "none": {"models": []},
            "all": {},
        },
    )
    table = TenantTable.from_config(cfg)
    # other/m is not under `models:` (its workers serve it): a glob still matches its id.
    allows = {t.name: (t.allows("org/big-model"), t.allows("other/m")) for t in table}
    assert allows == {
        "glob": (True, False),
        "unlisted": (False, True),
        "alias": (True, False),
        "none": (False, False),
        "all": (True, True),
    }


# -- retry arithmetic --------------------------------------------------------------------------


def test_window_state_of_a_fresh_window() -> None:
    state = WindowState(limit=10, window_s=60, previous=0, previous_ttl=0, current=0, current_ttl=0)
    assert state.remaining == 10
    assert state.reset_s == 0
    assert state.wait_s(10) == 0
    assert state.wait_s(11) is None


def test_a_full_current_window_waits_for_its_shift_and_ageing() -> None:
    # 10 taken in the current window, which becomes the previous one in 20 s.
    state = WindowState(10, 60, previous=0, previous_ttl=0, current=10, current_ttl=80)
    assert state.remaining == 0
    assert state.reset_s == 80  # shift in 20 s, then a whole window to age out
    assert state.wait_s(1) == pytest.approx(20.0)  # right after the shift: floor(10*~1) = 9
    assert state.wait_s(5) == pytest.approx(20 + 60 * (1 - 6 / 10))


def test_a_previous_window_ages_out_linearly() -> None:
    # 10 in the previous window with 30 s of it left weigh floor(10 * 30/60) = 5.
    state = WindowState(10, 60, previous=10, previous_ttl=30, current=4, current_ttl=90)
    assert state.remaining == 1
    assert state.wait_s(1) == 0
    # 3 more need the weighted previous count at 3: 10 * (30 - t) / 60 < 4 -> t > 6.
    assert state.wait_s(3) == pytest.approx(6.0)
    # A previous window never weighs more than its count, whatever time to live is reported.
    assert WindowState(10, 60, previous=6, previous_ttl=90, current=0, current_ttl=0).remaining == 4


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0ms"),
        (0.0204, "21ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (360.0, "6m0s"),
        (61.25, "1m1.25s"),
    ],
)
def test_reset_durations_are_written_like_openai(seconds: float, text: str) -> None:
    assert duration(seconds) == text


# -- reservations ------------------------------------------------------------------------------


def worker_request(prompt: int, max_tokens: int | None, n: int = 1) -> pb.GenerateRequest:
    params = pb.SamplingParams(n=n)
    if max_tokens is not None:
        params.max_new_tokens = max_tokens
    return pb.GenerateRequest(
        tokenized=pb.TokenizedInput(input_ids=list(range(prompt))), sampling_params=params
    )


def test_reservation_is_prompt_plus_max_tokens_per_choice() -> None:
    assert reservation_size(worker_request(10, 20), None, 4096) == 30
    assert reservation_size(worker_request(10, 20, n=3), None, 4096) == 70
    assert reservation_size(worker_request(10, 20), 25, 4096) == 25  # the context caps it
    assert reservation_size(worker_request(10, None), 100, 4096) == 100
    assert reservation_size(worker_request(10, None), None, 50) == 60


async def test_a_reservation_of_exactly_the_whole_budget_fits_once() -> None:
    """60 tokens a minute in 60 s windows: 60 fit (then nothing more does), 61 never do."""
    cfg = config(tenants={"t": {"keys": ["k"], "tokens_per_minute": 60}})
    tenant = TenantTable.from_config(cfg).get("t")
    assert tenant is not None
    limiter = TenantLimiter(cfg.limits, request_timeout_s=60)
    try:
        with pytest.raises(ApiError) as caught:
            await limiter.reserve(await limiter.admit(tenant), 61)
        assert caught.value.code == "request_too_large_for_limit"
        assert await limiter.reserve(await limiter.admit(tenant), 60) is not None
        with pytest.raises(ApiError) as caught:
            await limiter.reserve(await limiter.admit(tenant), 1)
        assert caught.value.code == "rate_limit_exceeded"
    finally:
        await limiter.aclose()


# -- admission priority ------------------------------------------------------------------------


async def waiting(gate: AdmissionGate, count: int) -> None:
    for _ in range(500):
        if gate.waiting >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} requests never waited")


async def test_waiting_requests_of_a_higher_priority_go_first() -> None:
    gate = AdmissionGate(limit=1, queue_size=10, queue_timeout_s=5)
    holder = await gate.acquire()
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        permit = await gate.acquire(priority=priority)
        order.append(name)
        permit.release()

    tasks = [
        asyncio.create_task(wait("low-1", 0)),
        asyncio.create_task(wait("high", 10)),
        asyncio.create_task(wait("low-2", 0)),
        asyncio.create_task(wait("mid", 5)),
    ]
    await waiting(gate, 4)
    # One that gives up leaves the queue without disturbing the others' order.
    quitter = asyncio.create_task(gate.acquire(priority=20))
    await waiting(gate, 5)
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert gate.waiting == 4
    holder.release()
    await asyncio.gather(*tasks)
    assert order == ["high", "mid", "low-1", "low-2"]
    assert gate.active == 0


def test_the_documented_example_config_is_valid() -> None:
    text = (Path(__file__).parents[2] / "docs" / "tenants.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert block is not None
    data = yaml.safe_load(block.group(1))
    env = {name: f"value-of-{name}" for name in re.findall(r"\$\{(\w+)\}", block.group(1))}
    cfg = build_config(substitute_env(data, environ=env))
    assert set(cfg.tenants) == {"search-team", "batch-jobs"}
    assert cfg.limits.storage.startswith("redis://")
