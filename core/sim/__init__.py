"""A simulated SGLang worker: real gRPC, deterministic answers, adjustable faults and pacing.

Honest about what it is: its model info and server info say ``turnout-sim``.
"""

from turnout.sim.knobs import SimKnobs
from turnout.sim.model import ModelFiles, Script, ScriptError, SimModel
from turnout.sim.records import SimRecords
from turnout.sim.servicer import SimServicer
from turnout.sim.worker import (
    SimProcess,
    SimWorker,
    get_counters,
    get_records,
    refuse_connections,
    set_knobs,
)

__all__ = [
    "ModelFiles",
    "Script",
    "ScriptError",
    "SimKnobs",
    "SimModel",
    "SimProcess",
    "SimRecords",
    "SimServicer",
    "SimWorker",
    "get_counters",
    "get_records",
    "refuse_connections",
    "set_knobs",
]
