"""Settings of the HTTP workers' one shared client (the ``http_workers`` config section)."""

from __future__ import annotations

from typing import Annotated

import msgspec

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Count = Annotated[int, msgspec.Meta(ge=1)]


class HttpWorkersSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How turnout talks HTTP to its HTTP workers: one client, its pool and its deadlines.

    The wait for a request's first byte is ``wire.first_response_timeout_s``, as for gRPC
    workers; the request as a whole stays bounded by ``server.request_timeout_s``."""

    #: Bound of one connection attempt (TCP, and TLS for ``https://``).
    connect_timeout_s: _Positive = 5.0
    #: Longest silence of an upstream while its answer is read (between two chunks of a
    #: stream); past it the answer counts as failed.
    idle_timeout_s: _Positive = 60.0
    #: Longest wait for a free connection of the pool when every one is busy.
    pool_timeout_s: _Positive = 5.0
    #: Connections open at once, over every HTTP worker.
    max_connections: _Count = 512
    #: Idle connections kept open for reuse.
    max_keepalive_connections: _Count = 128
    #: An idle connection is closed after this long; keep it below the upstreams' own
    #: keep-alive timeout (uvicorn's, so vLLM's and SGLang's, is 5 s), or a request may meet a
    #: connection the upstream is closing.
    keepalive_expiry_s: _Positive = 3.0
    #: Largest one-shot answer taken from an upstream (bytes); a larger one fails (502).
    max_response_bytes: _Count = 64 * 1024 * 1024
