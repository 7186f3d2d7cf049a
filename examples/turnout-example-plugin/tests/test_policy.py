"""The policy on its own: candidates and requests from turnout.testing, no sockets."""

import pytest
from turnout_example_plugin.policy import PinnedPolicy

from turnout.testing.policies import candidates, choices, routing_request

PINNED = "grpc://10.0.0.1:30000"  # the url of candidates()[1]


def test_the_pinned_worker_takes_every_request_even_when_busier() -> None:
    fleet = candidates(3, loads=[0, 9, 0])
    counts = choices(PinnedPolicy(url=PINNED), [routing_request("hi")] * 5, fleet)
    assert counts == {"w1": 5}


def test_without_the_pinned_worker_the_least_loaded_one() -> None:
    fleet = [c for c in candidates(3, loads=[4, 0, 1]) if c.url != PINNED]
    assert PinnedPolicy(url=PINNED).select(routing_request(), fleet).id == "w2"
    assert PinnedPolicy().select(routing_request(), candidates(3, loads=[2, 1, 1])).id == "w1"


def test_a_bad_parameter_is_refused_when_the_config_is_loaded() -> None:
    with pytest.raises(ValueError, match="grpc://"):
        PinnedPolicy(url="10.0.0.1:30000")
