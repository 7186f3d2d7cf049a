"""What the worker layer needs from a worker's gRPC client, and how failures are classified.

The registry and dispatcher only talk to :class:`WorkerConnection`; :func:`connect` adapts the
wire client (``turnout.wire``) to it, and tests may pass their own ``connect``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from turnout.workers.adapters import Adapter
from turnout.workers.errors import WorkerRequestError


class ResponseStream(Protocol):
    """A started ``Generate`` call, read in batches; ``aclose()`` cancels it."""

    #: True once the worker ended the stream or completed every choice of the request.
    finished: bool

    async def next_batch(self) -> list[Any]:
        """Every response that arrived since the last call (waiting for one if none did); an
        empty list once the stream ended."""
        ...

    async def aclose(self) -> None:
        """Cancel the call (the worker aborts the request)."""
        ...

    def cancel(self, reason: str) -> None:
        """Cancel the call now (a read in progress ends as at the stream's end); ``reason``
        is what the worker's abort says."""
        ...


class Streaming(Protocol):
    """An answer streaming from a worker, as the worker sees it (routing's session)."""

    #: Set by each response received; the worker clears it (see ``Worker.cut_silent``).
    heard: bool

    def cut(self, reason: str) -> None:
        """End it as failed by its worker (out of rotation for ``reason``): the answer goes
        on elsewhere."""
        ...


class WorkerConnection(Protocol):
    """The calls the worker layer makes to one worker."""

    async def health_check(self, timeout_s: float) -> bool:
        """``HealthCheck`` RPC: True iff the worker answered healthy within ``timeout_s``."""
        ...

    async def model_info(self, timeout_s: float) -> Mapping[str, str]:
        """``GetModelInfo`` + ``GetServerInfo`` flattened into string labels."""
        ...

    async def adapters(self, timeout_s: float) -> Mapping[str, Adapter] | None:
        """The LoRA adapters the worker has loaded, by name; None when it does not say."""
        ...

    async def load(self, timeout_s: float) -> Sequence[int]:
        """``GetLoads``: running plus waiting requests of each DP rank (index = rank)."""
        ...

    def generate(
        self, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]] = ()
    ) -> ResponseStream:
        """Start ``Generate`` with an overall deadline ``timeout`` seconds from now (None: none),
        sending ``metadata`` (gRPC metadata: the W3C trace context) with it."""
        ...

    async def embed(
        self, request: Any, timeout_s: float | None, metadata: Sequence[tuple[str, str]] = ()
    ) -> Any:
        """``Embed``: the worker's answer, within ``timeout_s`` seconds (None: the client's
        default deadline), sending ``metadata`` with the call."""
        ...

    def classify(self, exc: BaseException) -> WorkerRequestError | None:
        """How ``exc`` raised by a call of this connection counts and what the client is told;
        None: not a worker error."""
        ...

    async def close(self) -> None:
        """Close the channel."""
        ...
