"""Server-streaming calls other than Generate: the KV-event subscription and the tokenizer.

A ``ServerStream`` is an async iterator of one call's responses. Leaving it (``aclose()``,
``async with`` exit, the consumer task cancelled, the stream dropped) cancels the call. Memory is
bounded by the transport: what the reader has not taken yet is at most one HTTP/2 stream window
(``ClientSettings.stream_window_bytes``) before the worker is paused by flow control.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Self, TypeVar

from turnout.wire.errors import MalformedResponse
from turnout.wire.proto import common_pb2
from turnout.wire.transport import Call

__all__ = ["ServerStream", "TokenizerBundle", "collect_tokenizer"]

_T = TypeVar("_T")


class ServerStream(Generic[_T]):
    """The responses of one server-streaming call; errors arrive as ``WorkerCallError``."""

    __slots__ = ("_call", "_closed", "method")

    def __init__(self, call: Call, method: str) -> None:
        self._call = call
        self.method = method
        self._closed = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _T:
        if self._closed:
            raise StopAsyncIteration
        try:
            response: _T | None = await self._call.read()
        except BaseException:
            self.cancel()
            raise
        if response is None:
            self._closed = True
            raise StopAsyncIteration
        return response

    def cancel(self) -> None:
        """Stop now: the worker sees the call cancelled."""
        self._closed = True
        if not self._call.done():
            self._call.cancel()

    async def aclose(self) -> None:
        """Same as ``cancel()``."""
        self.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cancel()

    def __del__(self) -> None:
        if not self._closed:
            with contextlib.suppress(Exception):  # the loop may be gone at interpreter exit
                self.cancel()


@dataclass(frozen=True, slots=True)
class TokenizerBundle:
    """A worker's tokenizer files: a zip archive and its verified hex SHA-256."""

    data: bytes
    sha256: str


async def collect_tokenizer(
    chunks: ServerStream[common_pb2.GetTokenizerChunk], *, max_bytes: int, worker: str = ""
) -> TokenizerBundle:
    """Join the ``GetTokenizerChunk`` answers of a call and check the archive's SHA-256 (on the
    last chunk); ``MalformedResponse`` when it is missing, wrong or the archive exceeds
    ``max_bytes``."""
    digest = hashlib.sha256()
    parts: list[bytes] = []
    size = 0
    announced = ""
    async with chunks:
        async for chunk in chunks:
            data = chunk.data
            if announced:
                raise _bad("the worker sent data after the chunk carrying the sha256", worker)
            size += len(data)
            if size > max_bytes:
                raise _bad(f"tokenizer archive larger than {max_bytes} bytes", worker)
            digest.update(data)
            parts.append(data)
            announced = chunk.sha256
    if not announced:
        raise _bad("the tokenizer archive came without its sha256", worker)
    actual = digest.hexdigest()
    if actual != announced.lower():
        raise _bad(f"tokenizer archive sha256 {actual} != announced {announced}", worker)
    return TokenizerBundle(b"".join(parts), actual)


def _bad(message: str, worker: str) -> MalformedResponse:
    return MalformedResponse(message, worker=worker, method="GetTokenizer")
