"""Helpers of the ops tests: scrape and parse /metrics, build requests."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.server.harness import MODEL

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample of an exposition, keyed by (name, labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def scrape(base_url: str, **headers: str) -> Samples:
    response = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse_metrics(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def chat(
    text: str = "a reply of several tokens here", stream: bool = False, **extra: Any
) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        **extra,
    }


def sse_events(body: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
