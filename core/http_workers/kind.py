"""Which workers are HTTP workers (a leaf: the config checks and the worker layer ask it)."""

from __future__ import annotations

from typing import Final, Protocol

#: URL schemes of OpenAI-compatible HTTP servers.
HTTP_SCHEMES: Final = ("http://", "https://")


class _Spec(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def kind(self) -> str | None: ...


def is_http_worker(spec: _Spec) -> bool:
    """Whether ``spec`` names an OpenAI-compatible HTTP server: ``kind: http``, or no kind and
    an ``http://``/``https://`` URL."""
    kind = spec.kind
    if kind is not None:
        return kind == "http"
    return spec.url.startswith(HTTP_SCHEMES)
