"""Where responses are kept: for ``GET /v1/responses/{id}``, its input items, and
``previous_response_id``.

A kept response holds the response object and every item it was generated from: the items of
the responses it follows (their input and output), then its own input. A follow-up therefore
needs only the one response it names, however long the chain, and keeps working when earlier
responses of the chain are gone.

:class:`MemoryResponseStore` keeps them in the serving process, bounded in count and bytes
(least recently used first out) and forgotten after a time to live.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from turnout.config import ResponsesConfig

log = logging.getLogger(__name__)


class StoredResponse(msgspec.Struct):
    """A kept response and the items it was generated from."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]

    @property
    def id(self) -> str:
        """The response's id."""
        response_id: str = self.response["id"]
        return response_id

    def context(self) -> list[dict[str, Any]]:
        """What a follow-up (``previous_response_id``) continues: the input items, then the
        response's output."""
        return [*self.input_items, *self.response["output"]]


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StoredResponse).decode


class ResponseStore(Protocol):
    """Keeps responses by id."""

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None (never kept, deleted, or expired)."""
        ...

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response (under its id)."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Forget a response; False when it was not kept."""
        ...

    async def aclose(self) -> None:
        """Release connections (the app's end)."""
        ...


class MemoryResponseStore:
    """Responses kept in this process: at most ``max_entries`` and ``max_bytes`` of JSON (the
    least recently used are dropped first), each for ``ttl_s`` seconds."""

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        #: id → (JSON, expiry), least recently used first.
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> tuple[int, int]:
        """Responses and bytes kept now."""
        return len(self._entries), self._bytes

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response (now the most recently used), or None."""
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            self._drop(response_id)
            return None
        self._entries.move_to_end(response_id)
        return _decode(entry[0])

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response, dropping the least recently used ones over the bounds; one larger
        than ``max_bytes`` alone is not kept (logged)."""
        data = _encode(stored)
        if len(data) > self._max_bytes:
            log.warning(
                "response %s is not stored: %d bytes is more than responses.max_bytes (%d)",
                stored.id,
                len(data),
                self._max_bytes,
            )
            return
        self._drop(stored.id)
        self._entries[stored.id] = (data, self._clock() + self._ttl_s)
        self._bytes += len(data)
        now = self._clock()
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        # Expired entries among the least recently used go too (the others on access).
        for response_id, (_, expiry) in list(itertools.islice(self._entries.items(), 8)):
            if expiry <= now:
                self._drop(response_id)

    async def delete(self, response_id: str) -> bool:
        """Forget a response."""
        entry = self._entries.get(response_id)
        expired = entry is not None and entry[1] <= self._clock()
        found = self._drop(response_id)
        return found and not expired

    async def aclose(self) -> None:
        """Nothing to release."""

    def _drop(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= len(entry[0])
        return True


def make_store(config: ResponsesConfig) -> ResponseStore:
    """The store the config names."""
    return MemoryResponseStore(
        max_entries=config.max_entries, max_bytes=config.max_bytes, ttl_s=config.ttl_s
    )
