"""The admission metrics, per class and tenant (tenant names are configured: bounded)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Queue-time buckets (seconds): from a few milliseconds to the longest class timeout.
QUEUE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class AdmissionMetrics:
    """``turnout_admission_*`` of classes: queue time, admitted, preempted, shed, waiting."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_time = Histogram(
            "turnout_admission_queue_seconds",
            "Time from a request's arrival to its admission, by class and tenant",
            ["class", "tenant"],
            buckets=QUEUE_BUCKETS,
            registry=registry,
        )
        self.admitted = Counter(
            "turnout_admission_admitted",
            "Requests admitted (again after a preemption too), by class and tenant",
            ["class", "tenant"],
            registry=registry,
        )
        self.preempted = Counter(
            "turnout_admission_preempted",
            "Requests that gave their place to a higher class before their first token (and "
            "went back to the queue), by class and tenant",
            ["class", "tenant"],
            registry=registry,
        )
        self.shed = Counter(
            "turnout_admission_shed",
            "Requests refused by admission (reason: queue_full, queue_timeout, "
            "deadline_unmeetable, shutting_down), by class and tenant",
            ["class", "tenant", "reason"],
            registry=registry,
        )
        self.waiting = Gauge(
            "turnout_admission_waiting",
            "Requests waiting for admission, by class",
            ["class"],
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.capacity = Gauge(
            "turnout_admission_capacity",
            "Requests the engines' pushed loads and the hard ceiling allow at once (-1: no bound)",
            multiprocess_mode="livesum",
            registry=registry,
        )
