"""Distribution and behaviour of the built-in policies (no sockets needed)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import turnout
from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.plugins.policies.hashing import ConsistentHashingPolicy, PrefixHashPolicy
from turnout.plugins.policies.load import LeastLoadPolicy, PowerOfTwoPolicy
from turnout.plugins.policies.manual import ManualPolicy
from turnout.plugins.policies.simple import RandomPolicy, RoundRobinPolicy
from turnout.routing.types import Candidate, RoutingRequest

from ._cands import Cand, fleet

ALL = (
    "random",
    "round_robin",
    "power_of_two",
    "least_load",
    "cache_aware",
    "prefix_hash",
    "consistent_hashing",
    "manual",
)


def req(tokens: list[int] | None = None, key: str | None = None, text: str | None = None):
    return RoutingRequest(model="m", token_ids=tuple(tokens or ()), routing_key=key, text=text)


def test_every_builtin_is_registered_and_selects_a_candidate() -> None:
    policies = turnout.load_plugins().policies
    assert set(ALL) <= set(policies.names())
    workers = fleet(4)
    for name in (*ALL, "sticky"):
        policy = policies.create(name)
        for i in range(20):
            chosen = policy.select(req(list(range(i, i + 40)), key=f"k{i}"), workers)
            assert chosen in workers, name
        single = policy.select(req([1, 2, 3]), workers[:1])
        assert single is workers[0], name


def test_round_robin_is_exact() -> None:
    policy = turnout.load_plugins().policies.create("round_robin")
    workers = fleet(5)
    counts = Counter(policy.select(req(), workers).id for _ in range(500))
    assert counts == {w.id: 100 for w in workers}


# Policies whose choice for a request without a prompt or routing key is "the next worker in
# turn" (round robin itself, or the round-robin tie-break of an idle fleet's least load).
IN_TURN = (
    "round_robin",
    "least_load",
    "cache_aware",
    "prefix_hash",
    "consistent_hashing",
    "manual",
)


@pytest.mark.parametrize("name", IN_TURN)
@pytest.mark.parametrize("n", [2, 3])
def test_exact_pick_sequence_with_few_workers(name: str, n: int) -> None:
    # With 2-3 workers a policy that advances its turn twice per request (or skips one) is
    # visibly wrong; with 5 workers a double step still spreads evenly and hides it.
    policy = turnout.load_plugins().policies.create(name)
    workers = fleet(n)
    changed = getattr(policy, "on_workers_changed", None)
    if changed is not None:
        changed([w.id for w in workers])
    picks = [policy.select(req(), workers).id for _ in range(2 * n + 1)]
    assert picks == [f"w{i % n}" for i in range(2 * n + 1)]


def test_round_robin_sequence_follows_the_candidate_list() -> None:
    policy = RoundRobinPolicy()
    three = fleet(3)
    assert [policy.select(req(), three).id for _ in range(4)] == ["w0", "w1", "w2", "w0"]
    # One worker left rotation: the turn goes on over the remaining two.
    two = [three[0], three[2]]
    assert [policy.select(req(), two).id for _ in range(4)] == ["w0", "w2", "w0", "w2"]


@pytest.mark.parametrize("n", [2, 3])
def test_seeded_random_draws_once_per_pick(n: int) -> None:
    policy = RandomPolicy(seed=11)
    draws = random.Random(11)
    workers = fleet(n)
    expected = [f"w{draws.randrange(n)}" for _ in range(40)]
    assert [policy.select(req(), workers).id for _ in range(40)] == expected


def test_least_load_takes_minimum_and_rotates_ties() -> None:
    policy = LeastLoadPolicy()
    workers = fleet(4)
    for w, load in zip(workers, (5, 2, 9, 2), strict=True):
        w.load = load
    picks = Counter(policy.select(req(), workers).id for _ in range(100))
    assert set(picks) == {"w1", "w3"}
    assert abs(picks["w1"] - picks["w3"]) <= 2
    # Idle fleet: ties must not all land on the first worker.
    idle = fleet(4)
    picks = Counter(policy.select(req(), idle).id for _ in range(400))
    assert picks == {w.id: 100 for w in idle}


def test_power_of_two_never_picks_the_most_loaded() -> None:
    policy = PowerOfTwoPolicy(seed=7)
    workers = fleet(4)
    for w, load in zip(workers, (0, 1, 2, 100), strict=True):
        w.load = load
    picks = Counter(policy.select(req(), workers).id for _ in range(1000))
    assert "w3" not in picks
    assert picks["w0"] > picks["w1"] > picks["w2"] > 0


def _conversation(seed: int, length: int = 200) -> list[int]:
    rnd = random.Random(seed)
    return [rnd.randrange(1, 50_000) for _ in range(length)]


def test_cache_aware_shared_prefix_sticks_and_unrelated_spread() -> None:
    policy = CacheAwarePolicy()
    workers = fleet(4)
    homes: dict[int, str] = {}
    for turn in range(6):
        for conv in range(16):
            history = _conversation(conv, 200 + 40 * turn)  # each turn extends the prefix
            chosen = policy.select(req(history), workers)
            if turn == 0:
                homes[conv] = chosen.id
            else:
                assert chosen.id == homes[conv], (conv, turn)
    # Idle workers: a new conversation goes where its first block hashes to (rendezvous), the
    # same in every process, so unrelated conversations spread like hashed keys.
    spread = Counter(homes.values())
    assert set(spread) == {w.id for w in workers}
    assert max(spread.values()) <= 2 * 16 // len(workers)
    again = CacheAwarePolicy()
    assert {c: again.select(req(_conversation(c, 200)), workers).id for c in homes} == homes


def test_cache_aware_below_threshold_goes_to_least_loaded() -> None:
    policy = CacheAwarePolicy(cache_threshold=0.5)
    workers = fleet(3)
    base = _conversation(1, 64)
    first = policy.select(req(base), workers)
    first_load = {w.id: 0 for w in workers}
    first_load[first.id] = 3
    for w in workers:
        w.load = first_load[w.id]
    # Same 64-token prefix but 4x longer: match rate 0.25 < 0.5 -> least loaded, not affinity.
    chosen = policy.select(req(base + _conversation(2, 192)), workers)
    assert chosen.id != first.id


def test_cache_aware_skips_only_overloaded_holder() -> None:
    policy = CacheAwarePolicy(balance_abs_threshold=4, balance_rel_threshold=1.5)
    workers = fleet(3)
    a = _conversation(10)
    home_a = policy.select(req(a), workers)
    b, home_b = next(
        (b, home)
        for b in map(_conversation, range(11, 40))
        if (home := policy.select(req(b), workers)) is not home_a
    )
    # Overload home_a; home_b is busier than the idle worker but within the thresholds.
    for w in workers:
        w.load = 0
    home_a.load = 20
    home_b.load = 3
    moved = policy.select(req(a + [1] * 16), workers)
    assert moved is not home_a
    kept = policy.select(req(b + [2] * 16), workers)
    assert kept is home_b  # affinity survives the imbalance elsewhere


def test_cache_aware_balance_gap_is_capped_at_the_mean_load() -> None:
    """32 requests in flight: a holder 28 above the idle worker loses its affinity (a fixed
    gap of 64 kept it forever); within the mean load of the other it keeps it."""

    def stays(home_load: int, other_load: int) -> bool:
        policy = CacheAwarePolicy()
        workers = fleet(2)
        prompt = _conversation(21, 320)
        home = policy.select(req(prompt), workers)
        other = next(w for w in workers if w is not home)
        home.load, other.load = home_load, other_load
        return policy.select(req(prompt + [5] * 16), workers) is home

    assert not stays(30, 2)
    assert stays(20, 12)
    # Idle fleet: four more requests than an idle worker are worth a hit, five are not.
    assert stays(4, 0)
    assert not stays(5, 0)


def test_cache_aware_text_prompts() -> None:
    policy = CacheAwarePolicy()
    workers = fleet(3)
    text = "You are a helpful assistant. " * 20
    homes = {policy.select(req(text=text + f" question {i}"), workers).id for i in range(10)}
    assert len(homes) == 1


def test_cache_aware_tree_is_bounded_and_keeps_recent_prefixes() -> None:
    policy = CacheAwarePolicy(max_tree_size=16 * 1000, block_size=16)
    workers = fleet(4)
    hot = _conversation(999, 320)
    home = policy.select(req(hot), workers)
    for i in range(300):
        policy.select(req(_conversation(i, 160)), workers)
        assert len(policy.index) <= policy.index.max_entries
        if i % 10 == 0:
            assert policy.select(req(hot), workers) is home  # recently used: never evicted
    assert policy.index.rotations > 0


def test_cache_aware_departed_worker_loses_its_prefixes() -> None:
    policy = CacheAwarePolicy()
    workers = fleet(3)
    prompt = _conversation(5)
    home = policy.select(req(prompt), workers)
    others = [w for w in workers if w is not home]
    policy.on_workers_changed([w.id for w in others])
    moved = policy.select(req(prompt), others)
    assert moved in others
    # A new worker never inherits the departed worker's prefixes.
    newcomer = Cand("w-new")
    policy.on_workers_changed([w.id for w in [*others, newcomer]])
    for w in others:
        w.load = 2  # busier than the newcomer, within the balance gap
    assert policy.select(req(prompt), [*others, newcomer]) is moved


def _moved_fraction(policy_factory, make_req, n: int = 8, keys: int = 2000) -> float:
    before_policy = policy_factory()
    after_policy = policy_factory()
    workers = fleet(n)
    grown = fleet(n + 1)
    before_policy.on_workers_changed([w.id for w in workers])
    after_policy.on_workers_changed([w.id for w in grown])
    moved = 0
    for k in range(keys):
        a = before_policy.select(make_req(k), workers).id
        b = after_policy.select(make_req(k), grown).id
        if a != b:
            assert b == grown[-1].id  # keys only move to the new worker
            moved += 1
    return moved / keys


def test_consistent_hashing_moves_about_one_nth() -> None:
    frac = _moved_fraction(ConsistentHashingPolicy, lambda k: req(key=f"user-{k}"))
    assert 0.5 / 9 < frac < 1.6 / 9


def test_prefix_hash_moves_about_one_nth() -> None:
    frac = _moved_fraction(PrefixHashPolicy, lambda k: req(_conversation(k, 300)))
    assert 0.5 / 9 < frac < 1.6 / 9


def test_consistent_hashing_same_key_same_worker_and_spreads() -> None:
    policy = ConsistentHashingPolicy()
    workers = fleet(4)
    owners = {k: policy.select(req(key=f"s{k}"), workers).id for k in range(400)}
    for k in range(400):
        assert policy.select(req(key=f"s{k}"), workers).id == owners[k]
    counts = Counter(owners.values())
    assert len(counts) == 4
    assert min(counts.values()) > 50
    # Owner unavailable -> its keys go elsewhere; others stay put.
    down = workers[0]
    rest = workers[1:]
    for k in range(400):
        chosen = policy.select(req(key=f"s{k}"), rest).id
        if owners[k] != down.id:
            assert chosen == owners[k]


def test_consistent_hashing_header_fallback() -> None:
    policy = ConsistentHashingPolicy(header="X-Session")
    workers = fleet(4)
    r = RoutingRequest(model="m", headers={"x-session": "abc"})
    first = policy.select(r, workers)
    assert all(policy.select(r, workers) is first for _ in range(10))


def test_prefix_hash_spills_when_owner_overloaded() -> None:
    policy = PrefixHashPolicy(prefix_token_count=32, load_factor=1.25, balance_abs_threshold=2)
    workers = fleet(4)
    prompt = _conversation(3, 100)
    owner = policy.select(req(prompt), workers)
    # Requests sharing the first 32 tokens go to the same worker.
    assert policy.select(req(prompt[:32] + [7] * 50), workers) is owner
    owner.load = 50
    spilled = policy.select(req(prompt), workers)
    assert spilled is not owner
    owner.load = 0
    assert policy.select(req(prompt), workers) is owner


def test_manual_sticks_until_worker_dies_and_ignores_scale_up() -> None:
    policy = ManualPolicy(seed=1)
    workers = fleet(3)
    homes = {k: policy.select(req(key=f"u{k}"), workers).id for k in range(60)}
    bigger = [*workers, *fleet(6)[3:]]
    for k in range(60):
        assert policy.select(req(key=f"u{k}"), bigger).id == homes[k]
    survivors = [w for w in bigger if w.id != "w0"]
    for k in range(60):
        chosen = policy.select(req(key=f"u{k}"), survivors).id
        if homes[k] == "w0":
            assert chosen != "w0"
            homes[k] = chosen
        else:
            assert chosen == homes[k]
    # The re-assigned keys stay on their new worker even when w0 returns.
    for k in range(60):
        assert policy.select(req(key=f"u{k}"), bigger).id == homes[k]


def test_manual_idle_keys_expire_and_modes() -> None:
    now = [0.0]
    policy = ManualPolicy(max_idle_secs=10, assignment_mode="min_group", clock=lambda: now[0])
    workers = fleet(3)
    for k in range(9):
        policy.select(req(key=f"k{k}"), workers)
    assert Counter(policy.assignment(f"k{k}") for k in range(9)) == {"w0": 3, "w1": 3, "w2": 3}
    now[0] = 11.0
    policy.select(req(key="fresh"), workers)
    assert len(policy) == 1
    assert policy.assignment("k0") is None
    loaded = ManualPolicy(assignment_mode="min_load")
    ws = fleet(3)
    ws[0].load, ws[1].load, ws[2].load = 4, 0, 9
    assert loaded.select(req(key="x"), ws).id == "w1"


@pytest.mark.parametrize(
    ("name", "param", "value"),
    [
        ("cache_aware", "cache_threshold", 2),
        ("cache_aware", "max_tree_size", 0),
        ("prefix_hash", "prefix_token_count", 0),
        ("manual", "assignment_mode", "bogus"),
        ("consistent_hashing", "vnodes", 0),
    ],
)
def test_bad_parameters_are_clear_errors(name: str, param: str, value: object) -> None:
    with pytest.raises(ValueError, match=param):
        turnout.load_plugins().policies.create(name, **{param: value})


def test_candidates_satisfy_protocol() -> None:
    assert isinstance(Cand("x"), Candidate)
