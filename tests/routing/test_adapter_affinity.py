"""Adapter affinity: the generic mechanism and how each built-in policy keys on the adapter;
and what workers say about their LoRA adapters (no sockets needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.plugins.policies.hashing import ConsistentHashingPolicy, PrefixHashPolicy
from turnout.plugins.policies.load import LeastLoadPolicy, PowerOfTwoPolicy
from turnout.routing import AdapterAffinity, RoutingRequest, adapter_salt
from turnout.workers.adapters import Adapter, adapters_from_server_args

from ._cands import fleet


def req(adapter: str | None, tokens: tuple[int, ...] = ()) -> RoutingRequest:
    return RoutingRequest(model="m", token_ids=tokens, adapter=adapter)


def test_affinity_remembers_the_last_adapters_of_each_candidate() -> None:
    affinity = AdapterAffinity(slots=2)
    workers = fleet(2)
    for adapter in ("a", "b", "c"):
        affinity.record(adapter, "w0")
    assert affinity.warm("a", workers) == []  # evicted: least recently given
    assert affinity.warm("c", workers) == [workers[0]]
    affinity.record(None, "w1")
    assert affinity.warm(None, workers) == []
    affinity.forget(["w1"])
    assert affinity.warm("c", workers) == []
    with pytest.raises(ValueError, match="slots"):
        AdapterAffinity(slots=0)


def test_choose_prefers_warm_candidates_within_the_slack() -> None:
    affinity = AdapterAffinity()
    workers = fleet(3)
    affinity.record("a", "w2")
    pick = lambda cands: min(cands, key=lambda c: c.load)  # noqa: E731
    workers[2].load = 2
    assert affinity.choose(req("a"), workers, pick, slack=2).id == "w2"
    workers[2].load = 3
    assert affinity.choose(req("a"), workers, pick, slack=2).id == "w0"
    assert affinity.warm("a", workers) == [workers[0], workers[2]]  # the choice was recorded
    assert affinity.choose(req(None), workers, pick, slack=2).id == "w0"


def test_least_load_keeps_an_adapter_together_and_spreads_under_load() -> None:
    policy = LeastLoadPolicy(adapter_slack=1)
    workers = fleet(4)
    first = policy.select(req("a"), workers)
    assert all(policy.select(req("a"), workers) is first for _ in range(5))
    first.load = 2  # more than the slack above the others: another worker takes it
    other = policy.select(req("a"), workers)
    assert other is not first
    assert {c.id for c in policy.affinity.warm("a", workers)} == {first.id, other.id}
    base = Counter(policy.select(req(None), fleet(4)).id for _ in range(8))
    assert set(base) == {"w0", "w1", "w2", "w3"}


def test_power_of_two_samples_a_warm_worker_first() -> None:
    policy = PowerOfTwoPolicy(seed=3)
    workers = fleet(8)
    first = policy.select(req("a"), workers)
    chosen = Counter(policy.select(req("a"), workers).id for _ in range(50))
    assert chosen == Counter({first.id: 50})
    first.load = 10
    assert policy.select(req("a"), workers) is not first


def test_cache_aware_matches_prefixes_of_the_same_adapter_only() -> None:
    policy = CacheAwarePolicy(block_size=4, cache_threshold=0.3)
    workers = fleet(4)
    prompt = tuple(range(64))
    with_a = policy.select(req("a", prompt), workers)
    # The same prompt for the base model does not match the adapter's prefix (another KV).
    assert policy.index.keys_for_tokens(prompt) != policy.index.keys_for_tokens(
        prompt, adapter_salt("a")
    )
    with_a.load = 1
    assert policy.select(req("a", prompt), workers) is with_a  # a hit despite the load
    assert policy.select(req(None, prompt), workers) is not with_a  # a miss: least loaded


def test_prefix_hash_and_consistent_hashing_key_on_the_adapter() -> None:
    prefix = PrefixHashPolicy()
    prompt = tuple(range(300))
    assert prefix.key(req(None, prompt)) != prefix.key(req("a", prompt))
    assert prefix.key(req("a", prompt)) == prefix.key(req("a", prompt))
    assert prefix.key(req(None)) is None
    assert prefix.key(req("a")) == adapter_salt("a")
    consistent = ConsistentHashingPolicy()
    workers = fleet(8)
    owners = {consistent.select(req("a"), workers).id for _ in range(10)}
    assert len(owners) == 1  # without a routing key, an adapter's requests keep together
    spread = {consistent.select(req(f"adapter-{i}"), workers).id for i in range(40)}
    assert len(spread) > 4


def test_adapter_salt_is_stable() -> None:
    assert adapter_salt(None) == 0
    assert adapter_salt("a") == adapter_salt("a") != adapter_salt("b")


@pytest.mark.parametrize(
    ("lora_paths", "expected"),
    [
        (
            ["LoRARef(lora_id=9f2c, lora_name=sql, lora_path=/a, b/sql, pinned=False)"],
            {"sql": Adapter("sql", "9f2c", "/a, b/sql")},
        ),
        (
            [{"lora_id": "77", "lora_name": "poet", "lora_path": "/p", "pinned": None}],
            {"poet": Adapter("poet", "77", "/p")},
        ),
        (
            ["sql=/a/sql", "/b/poet"],
            {"sql": Adapter("sql", "", "/a/sql"), "/b/poet": Adapter("/b/poet", "", "/b/poet")},
        ),
        (['{"lora_name": "x", "lora_path": "/x"}'], {"x": Adapter("x", "", "/x")}),
        ({"sql": "/a/sql"}, {"sql": Adapter("sql", "", "/a/sql")}),
        (None, {}),
        ([], {}),
    ],
)
def test_adapters_from_server_args(lora_paths: object, expected: dict[str, Adapter]) -> None:
    assert adapters_from_server_args({"lora_paths": lora_paths}) == expected


def test_server_args_without_lora_paths_say_nothing() -> None:
    assert adapters_from_server_args({"tp_size": 1}) is None


def test_a_worker_without_a_list_serves_the_configured_adapters() -> None:
    from turnout.wire.proto import sglang_scheduler_pb2 as pb
    from turnout.workers.settings import BreakerSettings, HealthSettings, WorkerSpec
    from turnout.workers.worker import Worker

    worker = Worker(
        WorkerSpec(url="grpc://h:1"),
        connection=None,
        health=HealthSettings(),
        breaker=BreakerSettings(),  # type: ignore[arg-type]
    )
    request = pb.GenerateRequest(lora_id="configured-id")
    assert worker.has_adapter("anything")
    worker.pin_adapter(request, "anything", "configured-id")
    assert request.lora_id == "configured-id"
    worker.adapters = {"sql": Adapter("sql", "worker-id")}
    assert not worker.has_adapter("anything")
    worker.pin_adapter(request, "sql", "configured-id")
    assert request.lora_id == "worker-id"
