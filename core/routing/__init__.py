"""Worker selection: the public policy API (:mod:`turnout.routing.types`, what a policy plugin
implements) and the dispatcher that applies a model's policy, starts the request on the chosen
worker and retries worker faults (:mod:`turnout.routing.dispatch`, imported separately: it needs
the worker fleet, which a policy plugin does not).
"""

from turnout.routing.affinity import AdapterAffinity, adapter_salt
from turnout.routing.types import (
    Candidate,
    Policy,
    RoutingRequest,
    WatchesOutcomes,
    WatchesWorkers,
)

__all__ = [
    "AdapterAffinity",
    "Candidate",
    "Policy",
    "RoutingRequest",
    "WatchesOutcomes",
    "WatchesWorkers",
    "adapter_salt",
]
