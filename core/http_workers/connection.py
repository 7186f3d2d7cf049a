"""One HTTP worker as the worker layer sees it (:class:`HttpConnection`: health, model, how its
failures count), over the one shared client of every HTTP worker (:class:`HttpClient`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import httpx
import msgspec

from turnout.http_workers.settings import HttpWorkersSettings
from turnout.http_workers.upstream_client import (
    ConnectTimeout,
    InvalidHeader,
    Origin,
    PoolTimeout,
    ReadTimeout,
    UpstreamClient,
    UpstreamClosed,
    UpstreamError,
    UpstreamResponse,
)
from turnout.workers.adapters import Adapter
from turnout.workers.errors import WorkerRequestError
from turnout.workers.settings import WorkerSpec

__all__ = [
    "HttpClient",
    "HttpConnection",
    "UpstreamClosed",
    "UpstreamStream",
    "UpstreamUnavailable",
    "base_url",
]

#: Statuses of an upstream that another upstream may not answer alike: tried elsewhere. A 401
#: or 403 refuses turnout's key for the worker (its config), not the client's: never passed on.
_RETRIED: Final = frozenset({401, 403, 408, 429, 500, 502, 503, 504})


class _Model(msgspec.Struct):
    id: str


class _Models(msgspec.Struct):
    data: list[_Model] = msgspec.field(default_factory=list)


_decode_models = msgspec.json.Decoder(_Models).decode


def base_url(url: str) -> str:
    """The URL API paths (``/v1/...``) are appended to: ``url`` without a trailing ``/`` or
    ``/v1`` (both spellings of a server's address work)."""
    url = url.rstrip("/")
    return url.removesuffix("/v1")


class HttpClient:
    """The clients of every HTTP worker: forwarded requests go through one
    :class:`~turnout.http_workers.upstream_client.UpstreamClient` (a bounded pool per origin,
    deadlines on the connection, the pool and each read), probes and model listings through one
    ``httpx.AsyncClient`` (not hot). Made on first use (on the event loop that serves), closed
    by :meth:`aclose`."""

    def __init__(self, settings: HttpWorkersSettings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None
        self._upstream: UpstreamClient | None = None

    @property
    def upstream(self) -> UpstreamClient:
        """The client of forwarded requests."""
        upstream = self._upstream
        if upstream is None:
            upstream = self._upstream = UpstreamClient(self.settings)
        return upstream

    @property
    def client(self) -> httpx.AsyncClient:
        """The probes' client."""
        client = self._client
        if client is None:
            s = self.settings
            client = self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=s.connect_timeout_s,
                    read=s.idle_timeout_s,
                    write=s.idle_timeout_s,
                    pool=s.pool_timeout_s,
                ),
                limits=httpx.Limits(
                    max_connections=s.max_connections,
                    max_keepalive_connections=s.max_keepalive_connections,
                    keepalive_expiry=s.keepalive_expiry_s,
                ),
                # The answers go back as they came: never decompressed here.
                headers={"accept-encoding": "identity"},
                follow_redirects=False,
                trust_env=False,
            )
        return client

    async def aclose(self) -> None:
        """Close every pooled connection."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            await upstream.aclose()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


class UpstreamUnavailable(Exception):
    """An upstream answered a status another upstream may not (5xx, 429, 408)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
        self.status = status


class UpstreamStream:
    """An upstream's answer as a :class:`~turnout.workers.connection.ResponseStream`: its body
    in the pieces it arrives in (each a batch of one ``bytes``), never re-encoded."""

    __slots__ = ("_response", "content_type", "finished", "status")

    def __init__(self, response: UpstreamResponse) -> None:
        self._response = response
        self.status = response.status
        self.content_type = response.content_type
        self.finished = False

    async def next_batch(self) -> list[bytes]:
        """The next piece of the body (an empty list at its end)."""
        if self.finished:
            return []
        piece = await self._response.read()
        if not piece:
            self.finished = True
            return []
        return [piece]

    async def aclose(self) -> None:
        """Stop reading: the connection is closed (the upstream sees the client leave)."""
        self.finished = True
        self._response.close()

    def cancel(self, reason: str) -> None:
        """Stop reading now: a read in progress fails, the connection is closed. (An HTTP
        worker streams no KV events, so nothing takes it out of rotation to cut its answers:
        this completes the stream protocol.)"""
        if not self.finished:
            self.finished = True
            self._response.close()


class HttpConnection:
    """The worker layer's calls to one OpenAI-compatible HTTP server (a
    :class:`~turnout.workers.connection.WorkerConnection`; ``generate``/``embed`` are gRPC's:
    an HTTP worker's requests are forwarded by :mod:`turnout.http_workers.relay`)."""

    def __init__(self, spec: WorkerSpec, client: HttpClient) -> None:
        self._http = client
        self.base = base_url(spec.url)
        #: Where forwarded requests go (the pool they share).
        self.origin = Origin(self.base)
        self._health_url = self.base + spec.health_path
        self._models_url = self.base + "/v1/models"
        self._key_env = spec.api_key_env
        self._model = spec.model

    @property
    def settings(self) -> HttpWorkersSettings:
        """The shared client's settings."""
        return self._http.settings

    @property
    def http_client(self) -> httpx.AsyncClient:
        """The probes' client."""
        return self._http.client

    @property
    def upstream(self) -> UpstreamClient:
        """The client of forwarded requests."""
        return self._http.upstream

    def auth_headers(self) -> dict[str, str]:
        """``Authorization`` with the worker's key, read from its environment variable now
        (a rotated key is taken without a restart; raises when the variable is unset), else
        the Basic credentials of the URL's user info, if any."""
        name = self._key_env
        if name is None:
            basic = self.origin.basic_auth
            return {} if basic is None else {"authorization": basic}
        key = os.environ.get(name)
        if not key:
            raise RuntimeError(f"environment variable {name} (api_key_env) is not set")
        return {"authorization": f"Bearer {key}"}

    async def _get(self, url: str, timeout_s: float) -> httpx.Response:
        return await self.http_client.get(url, headers=self.auth_headers(), timeout=timeout_s)

    async def health_check(self, timeout_s: float) -> bool:
        """A 2xx answer on the health path within ``timeout_s``."""
        response = await self._get(self._health_url, timeout_s)
        return response.is_success

    async def model_info(self, timeout_s: float) -> Mapping[str, str]:
        """The served model from ``GET /v1/models``: the configured one when the server lists
        it (a hosted API lists many), else the first it lists; ``upstream_model`` is the name
        requests are sent with."""
        response = await self._get(self._models_url, timeout_s)
        response.raise_for_status()
        listed = [m.id for m in _decode_models(response.content).data]
        if self._model is not None and (self._model in listed or not listed):
            upstream = self._model
        elif listed:
            upstream = listed[0]
        else:
            raise RuntimeError("GET /v1/models listed no model (configure the worker's model)")
        return {"served_model_name": upstream, "upstream_model": upstream, "kind": "http"}

    async def adapters(self, timeout_s: float) -> Mapping[str, Adapter] | None:
        """An HTTP server does not say (None)."""
        return None

    async def load(self, timeout_s: float) -> Sequence[int]:
        """No load is reported: only this router's requests count."""
        return ()

    def generate(
        self, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]] = ()
    ) -> Any:
        """Not served over HTTP (the gRPC dispatcher never offers an HTTP worker)."""
        raise NotImplementedError("an HTTP worker takes forwarded requests only")

    async def embed(
        self, request: Any, timeout_s: float | None, metadata: Sequence[tuple[str, str]] = ()
    ) -> Any:
        """Not served over HTTP (see :meth:`generate`)."""
        raise NotImplementedError("an HTTP worker takes forwarded requests only")

    def classify(self, exc: BaseException) -> WorkerRequestError | None:
        """How a failure of a forwarded request counts: transport errors and retried statuses
        are the worker's faults and may succeed elsewhere."""
        base = self.base
        if isinstance(exc, UpstreamClosed):
            # Sent again at once on a new connection (once per worker), as gRPC's transparent
            # retry does after a GOAWAY; a worker that keeps doing it fails its health probes.
            return WorkerRequestError(
                "the worker closed the connection before answering",
                status=502,
                worker_fault=False,
                retryable=True,
                refused=True,
                detail=f"{base}: {exc}",
            )
        if isinstance(exc, UpstreamUnavailable):
            status = exc.status
            return WorkerRequestError(
                f"the worker answered HTTP {status}",
                status=503 if status in (429, 503) else 502,
                worker_fault=status != 429,
                retryable=True,
                detail=f"{base}: {exc}",
            )
        if isinstance(exc, (PoolTimeout, httpx.PoolTimeout)):
            return WorkerRequestError(
                "no connection to the worker is free",
                status=503,
                worker_fault=False,
                retryable=True,
                detail=f"{base}: the HTTP pool is exhausted ({exc})",
            )
        if isinstance(exc, (ConnectTimeout, ReadTimeout, httpx.TimeoutException)):
            return WorkerRequestError(
                "the worker did not answer in time",
                status=504,
                worker_fault=True,
                retryable=True,
                detail=f"{base}: {type(exc).__name__}: {exc}",
            )
        if isinstance(exc, (UpstreamError, httpx.TransportError)):
            return WorkerRequestError(
                "the worker could not be reached",
                status=502,
                worker_fault=True,
                retryable=True,
                detail=f"{base}: {type(exc).__name__}: {exc}",
            )
        if isinstance(exc, InvalidHeader) or (
            isinstance(exc, RuntimeError) and "api_key_env" in str(exc)
        ):
            return WorkerRequestError(
                "the worker is not configured", status=503, worker_fault=True, detail=str(exc)
            )
        return None

    async def close(self) -> None:
        """Nothing of its own to close (the client is shared)."""


def retried_status(status: int) -> bool:
    """Whether an upstream's ``status`` is tried on another worker."""
    return status in _RETRIED
