"""What the simulated worker saw (requests, aborts, outcomes …), kept bounded for tests to
assert on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnout.sim.multimodal import MultimodalRecord
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["SimRecords"]


@dataclass
class SimRecords:
    """What the simulator saw, for tests to assert on.

    Each collection keeps at most about twice ``keep`` entries (the newest ``keep`` survive a
    trim), so a simulator under a long benchmark does not grow without bound.
    """

    keep: int = 10_000

    requests: list[pb.GenerateRequest] = field(default_factory=list)
    #: (kind, value) of each constraint received: kind is json_schema/regex/ebnf/structural_tag.
    constraints: list[tuple[str, str]] = field(default_factory=list)
    #: Request ids named by Abort calls, in order.
    aborted: list[str] = field(default_factory=list)
    #: request id → how its generation ended: stop/length/abort/cancelled/error.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: request id → tokens generated (all choices).
    generated: dict[str, int] = field(default_factory=dict)
    #: request id → the DP rank that served it.
    ranks: dict[str, int] = field(default_factory=dict)
    health_checks: int = 0
    #: EmbedRequests received, in order.
    embed_requests: list[pb.EmbedRequest] = field(default_factory=list)
    #: The ``mm_inputs`` of Generate and Embed requests that carried one, in order.
    multimodal: list[MultimodalRecord] = field(default_factory=list)
    #: request id → the W3C trace context (``traceparent``, …) its Generate or Embed call carried.
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    #: request id → the ``lora_id`` its Generate request named (requests without one: absent).
    lora_ids: dict[str, str] = field(default_factory=dict)
    #: The ``start_sequence_number`` of each ``SubscribeKvEvents`` call, in order.
    kv_subscriptions: list[int] = field(default_factory=list)

    def clear(self) -> None:
        """Forget everything recorded."""
        self.requests.clear()
        self.constraints.clear()
        self.aborted.clear()
        self.outcomes.clear()
        self.generated.clear()
        self.ranks.clear()
        self.health_checks = 0
        self.embed_requests.clear()
        self.multimodal.clear()
        self.metadata.clear()
        self.lora_ids.clear()
        self.kv_subscriptions.clear()

    def note_request(self, request: pb.GenerateRequest) -> None:
        """Record a Generate request; trim every collection to the newest ``keep`` entries when
        the requests reach twice that (amortised: one trim per ``keep`` requests)."""
        self.requests.append(request)
        if len(self.requests) >= 2 * self.keep:
            self.trim()

    def note_embed(self, request: pb.EmbedRequest) -> None:
        """Record an Embed request (trimmed like :meth:`note_request`)."""
        self.embed_requests.append(request)
        if len(self.embed_requests) >= 2 * self.keep:
            self.trim()

    def trim(self) -> None:
        """Keep the newest ``keep`` entries of every collection."""
        keep = self.keep
        for entries in (
            self.requests,
            self.constraints,
            self.aborted,
            self.embed_requests,
            self.multimodal,
            self.kv_subscriptions,
        ):
            del entries[:-keep]
        for name in ("outcomes", "generated", "ranks", "metadata", "lora_ids"):
            table: dict[str, Any] = getattr(self, name)
            if len(table) > keep:
                setattr(self, name, dict(list(table.items())[-keep:]))
