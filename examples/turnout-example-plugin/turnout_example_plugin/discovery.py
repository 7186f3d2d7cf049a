"""A discovery provider: the workers listed in the config entry's options.

``discovery: [{provider: static_list, options: {urls: ["grpc://10.0.0.5:30000"]}}]``. It
reports one :class:`~turnout.discovery.Snapshot` and then has nothing more to say; a real
provider would loop, reading its source and yielding a snapshot (or single changes) each time
something changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from turnout.discovery import DiscoveredWorker, Snapshot, WorkerChange


class StaticListProvider:
    """``urls``: the workers (``grpc://host:port``); ``model``: what they serve (none: turnout
    asks each worker)."""

    def __init__(self, urls: Sequence[str] = (), model: str | None = None) -> None:
        # Options are checked here, with no I/O: `turnout check` creates providers too.
        if isinstance(urls, str) or not urls:
            raise ValueError("urls must be a non-empty list of grpc://host:port addresses")
        for url in urls:
            if not isinstance(url, str) or not url.startswith("grpc://"):
                raise ValueError(f"urls: {url!r} is not a grpc://host:port address")
        self.urls = tuple(urls)
        self.model = model

    def describe(self) -> str:
        """One line for `turnout check`."""
        return f"{len(self.urls)} listed worker(s)"

    async def watch(self) -> AsyncIterator[WorkerChange]:
        """One snapshot, then wait until turnout closes the stream."""
        yield Snapshot(tuple(DiscoveredWorker(url, url, self.model) for url in self.urls))
        await asyncio.Event().wait()
