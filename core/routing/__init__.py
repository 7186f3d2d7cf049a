"""Worker selection: the public policy API."""

from turnout.routing.types import Candidate, Policy, RoutingRequest

__all__ = ["Candidate", "Policy", "RoutingRequest"]
