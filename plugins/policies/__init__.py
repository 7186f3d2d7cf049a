"""Built-in worker selection policies, registered lazily."""

from __future__ import annotations

from turnout.hookspecs import PolicyRegister, hookimpl

_PKG = "turnout.plugins.policies"

# (canonical name, "module:Class", aliases, description)
BUILTIN_POLICIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("random", "simple:RandomPolicy", (), "uniformly random healthy worker"),
    ("round_robin", "simple:RoundRobinPolicy", ("roundrobin",), "each worker in turn"),
    ("power_of_two", "load:PowerOfTwoPolicy", (), "less loaded of two random workers"),
    ("least_load", "load:LeastLoadPolicy", (), "least loaded worker, ties in turn"),
    (
        "cache_aware",
        "cache_aware:CacheAwarePolicy",
        (),
        "prefix-cache affinity with load balancing",
    ),
    (
        "prefix_hash",
        "hashing:PrefixHashPolicy",
        (),
        "prompt head hashed onto a consistent-hash ring, with load spill",
    ),
    (
        "consistent_hashing",
        "hashing:ConsistentHashingPolicy",
        (),
        "routing key hashed onto a consistent-hash ring",
    ),
    ("manual", "manual:ManualPolicy", ("sticky",), "routing key pinned to a worker until it dies"),
)


@hookimpl
def turnout_register_policies(register: PolicyRegister) -> None:
    """Register every built-in policy by its lazy import path."""
    for name, target, aliases, description in BUILTIN_POLICIES:
        register(name, f"{_PKG}.{target}", aliases=aliases, description=description)
