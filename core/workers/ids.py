"""Worker ids: the default one of a URL and the rule every id follows (a leaf: the config
checks ids without importing the worker layer)."""

from __future__ import annotations

from urllib.parse import urlsplit

#: Longest worker id accepted (ids appear in paths, log lines and metric labels).
MAX_WORKER_ID_LENGTH = 128


def worker_id_problem(worker_id: str) -> str | None:
    """Why ``worker_id`` is not a usable worker id, or None when it is.

    An id is a ``/workers/{id}`` path segment, a log field and a metric label: 1 to
    :data:`MAX_WORKER_ID_LENGTH` printable characters, no spaces, no ``/``.
    """
    if not 1 <= len(worker_id) <= MAX_WORKER_ID_LENGTH:
        return f"must be 1 to {MAX_WORKER_ID_LENGTH} characters long (got {len(worker_id)})"
    if any(ch == "/" or ch.isspace() or not ch.isprintable() for ch in worker_id):
        return "must not contain spaces, control characters or '/'"
    return None


def default_worker_id(url: str) -> str:
    """``host:port`` of a ``grpc://host:port`` URL."""
    parts = urlsplit(url)
    return parts.netloc or url
