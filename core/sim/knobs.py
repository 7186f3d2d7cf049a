"""The simulated worker's behaviour knobs: pacing, faults, capacity; tests change them while
it runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import grpc

__all__ = ["SimKnobs"]


@dataclass
class SimKnobs:
    """Behaviour knobs; change them at any time (they are read per request / per chunk)."""

    #: Delay per generated token, milliseconds.
    delay_ms: float = 0.0
    #: Up to this much more per token, drawn uniformly per chunk (GPU-like pacing), milliseconds.
    delay_jitter_ms: float = 0.0
    #: Extra delay before the first token (prefill), milliseconds.
    ttft_ms: float = 0.0
    #: Prefill speed: prompt tokens not served from the prefix cache per second, one prefill
    #: at a time per DP rank (0: instant).
    prefill_tokens_per_s: float = 0.0
    #: Tokens per streamed chunk (a request's ``stream_interval`` overrides it).
    tokens_per_chunk: int = 1
    #: Fail Generate (before the first chunk) and Embed with this gRPC status name (e.g.
    #: "UNAVAILABLE").
    fail_status: str | None = None
    #: Fail Generate after this many tokens of choice 0 (status ``fail_after_status``).
    fail_after_tokens: int | None = None
    fail_after_status: str = "INTERNAL"
    #: Generate and Embed never answer (until cancelled, or a Generate aborted).
    hang: bool = False
    #: HealthCheck answers healthy=false.
    unhealthy: bool = False
    #: Apply fail_status / fail_after_tokens / hang to this many more requests only (None: all).
    fault_budget: int | None = None
    #: Requests generating at once per DP rank; later ones queue (0: unlimited).
    max_running: int = 0
    #: KV capacity reported by GetLoads / GetServerInfo when the prefix cache is off, tokens.
    max_total_tokens: int = 65536
    #: Prefill-decode rendezvous deadline, seconds (SGLang's bootstrap and KV waiting timeouts).
    bootstrap_timeout_s: float = 300.0
    #: Answer ``ListLoadedLoRAAdapters`` (False: UNIMPLEMENTED, as SGLang before mid 2026).
    lists_adapters: bool = True
    #: Answer ``GetTokenizer`` (False: UNIMPLEMENTED, as a servicer without it).
    serves_tokenizer: bool = True
    #: The model path GetModelInfo / GetServerInfo report instead of the real directory: a
    #: worker on another host, whose path means nothing on the router's.
    reported_model_path: str | None = None

    def update(self, changes: dict[str, Any]) -> None:
        """Set several knobs; ``ValueError`` names an unknown knob or a bad status name."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}; known: {sorted(names)}")
        for key in ("fail_status", "fail_after_status"):
            value = changes.get(key)
            if value is not None and value not in grpc.StatusCode.__members__:
                raise ValueError(f"{key} must be a gRPC status name, got {value!r}")
        for key, value in changes.items():
            setattr(self, key, value)

    def as_dict(self) -> dict[str, Any]:
        """Current values."""
        return asdict(self)
