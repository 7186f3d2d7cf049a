"""The ``admission`` config section: priority classes and how capacity is judged."""

from __future__ import annotations

from typing import Annotated

import msgspec

_Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_ClassName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors."""


class PriorityClassSettings(_Section):
    """One priority class (the list order is the rank: first is highest)."""

    name: _ClassName
    #: Fraction of capacity reserved for the class: it always gets this much when it has work
    #: waiting, and its requests are not taken over by a higher class below it.
    share: _Share = 0.0
    #: Fraction of capacity kept free for the class (and those above it): lower classes never
    #: take it, so the class's next request finds a place at once even when they are backlogged.
    hold: _Share = 0.0
    #: Requests of the class waiting at once; more are answered 429.
    queue_size: _Count = 100
    #: Longest wait of one request of the class; then 503 (0: until the request timeout).
    queue_timeout_s: _Seconds = 60.0
    #: May take the place of a lower-class request that has not produced its first token.
    preempt: bool = True


def _default_classes() -> list[PriorityClassSettings]:
    return [
        PriorityClassSettings(name="system", share=0.1, queue_size=100, queue_timeout_s=60),
        PriorityClassSettings(name="interactive", share=0.4, queue_size=200, queue_timeout_s=30),
        PriorityClassSettings(name="default", share=0.2, queue_size=200, queue_timeout_s=60),
        PriorityClassSettings(
            name="bulk", share=0.1, queue_size=1000, queue_timeout_s=300, preempt=False
        ),
    ]


class AdmissionSettings(_Section):
    """Admission by class (``x-turnout-priority``), fair share between tenants by token work,
    TTFT deadlines (``x-turnout-ttft-deadline-ms``) and the engines' pushed load (see
    docs/admission.md). Off: the plain ``server.max_concurrent_requests`` queue."""

    enabled: bool = False
    #: The classes, highest first.
    classes: list[PriorityClassSettings] = msgspec.field(default_factory=_default_classes)
    #: The class of a request without the header.
    default_class: _ClassName = "default"
    #: The highest class a request may ask for unless its tenant's ``max_class`` says
    #: otherwise; a request asking for more is served in this class.
    max_class: _ClassName = "interactive"
    #: A waiting request competes one class higher per this many seconds waited (0: never).
    aging_s: _Seconds = 10.0
    #: Times one request may be preempted; then it keeps its place.
    max_preemptions: _Count = 2
    #: Admit only while the workers' pushed loads say they can take more (workers that push no
    #: load do not limit); ``server.max_concurrent_requests`` stays the hard ceiling.
    engine_capacity: bool = True
    #: Requests an engine may hold waiting beyond its ``max_running_requests``.
    engine_waiting: _Count = 0
    #: An engine whose KV cache is this full takes no more requests.
    kv_usage_limit: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.95
    #: An engine with this many uncached prompt tokens waiting takes no more (0: no limit).
    waiting_prefill_tokens_limit: _Count = 0
    #: Expected output of a request without ``max_tokens``, for its token work.
    expected_output_tokens: Annotated[int, msgspec.Meta(ge=1)] = 256
    #: How often a non-empty queue looks at the engines' loads again.
    recheck_interval_s: Annotated[float, msgspec.Meta(gt=0, le=5)] = 0.05

    def rank_of(self, name: str) -> int | None:
        """The rank of class ``name`` (0: highest), or None."""
        for rank, cls in enumerate(self.classes):
            if cls.name == name:
                return rank
        return None
