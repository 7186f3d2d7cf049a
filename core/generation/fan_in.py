"""Several one-choice sessions read as one session of several choices: how an answer of
``n > 1`` choices goes on after its worker failed, each choice continued by its own request
(its context differs from the others') on whichever worker the dispatcher chose."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnout.wire.proto import sglang_scheduler_pb2 as pb

if TYPE_CHECKING:
    from turnout.generation.pipeline import GenerateSession

__all__ = ["FanInSession"]


class FanInSession:
    """The responses of ``sessions`` as they come, each session's renumbered as choice
    ``choices[i]`` (every session answers one choice, index 0); [] once all of them ended.

    A session's failure is raised once the responses that came with it were handed out, and
    :attr:`failed` names its choice until :meth:`replace` gives that choice a new session (the
    others read on undisturbed). Closing closes them all."""

    __slots__ = ("_choices", "_ended", "_failures", "_reads", "_sessions", "failed", "worker")

    def __init__(self, sessions: Sequence[GenerateSession], choices: Sequence[int]) -> None:
        self._sessions = list(sessions)
        self._choices = list(choices)
        #: The pending read of each session still streaming, by its position.
        self._reads: dict[int, asyncio.Task[list[pb.GenerateResponse]]] = {}
        self._ended: set[int] = set()
        #: Failures not raised yet, by position.
        self._failures: dict[int, BaseException] = {}
        #: The choice whose session failed last (None: none is waiting for a new session).
        self.failed: int | None = None
        #: The first session's worker (what a log line names).
        self.worker: Any = getattr(self._sessions[0], "worker", None)

    @property
    def meter(self) -> Any:
        """The first session's meter (the answer's, for all of them)."""
        return self._sessions[0].meter

    async def next_batch(self) -> list[pb.GenerateResponse]:
        """The responses of whichever sessions answered first; [] once every one ended."""
        if self._failures:
            return self._raise_failure()
        while len(self._ended) < len(self._sessions):
            for position, session in enumerate(self._sessions):
                if position not in self._ended and position not in self._reads:
                    self._reads[position] = asyncio.ensure_future(session.next_batch())
            done, _ = await asyncio.wait(self._reads.values(), return_when=asyncio.FIRST_COMPLETED)
            batch: list[pb.GenerateResponse] = []
            for position, read in list(self._reads.items()):
                if read not in done:
                    continue
                del self._reads[position]
                error = read.exception()
                if error is not None:
                    self._ended.add(position)
                    self._failures[position] = error
                    continue
                responses = read.result()
                if not responses:
                    self._ended.add(position)
                    continue
                _renumber(responses, self._choices[position])
                batch.extend(responses)
            if batch:
                return batch
            if self._failures:
                return self._raise_failure()
        return []

    async def replace(self, choice: int, session: GenerateSession) -> None:
        """Read ``choice`` from ``session`` from now on (its failed session is closed)."""
        position = self._choices.index(choice)
        old, self._sessions[position] = self._sessions[position], session
        self._ended.discard(position)
        if self.failed == choice:
            self.failed = None
        await old.aclose()

    async def aclose(self) -> None:
        """Stop every session (each aborts its request on its worker)."""
        reads, self._reads = self._reads, {}
        for read in reads.values():
            read.cancel()
        if reads:
            await asyncio.wait(reads.values())
            for read in reads.values():
                if not read.cancelled():
                    read.exception()  # retrieved: a failure nobody reads any more
        self._ended.update(range(len(self._sessions)))
        self._failures.clear()
        for session in self._sessions:
            await session.aclose()

    def _raise_failure(self) -> list[pb.GenerateResponse]:
        position = next(iter(self._failures))
        failure = self._failures.pop(position)
        self.failed = self._choices[position]
        raise failure


def _renumber(responses: list[pb.GenerateResponse], index: int) -> None:
    for response in responses:
        kind = response.WhichOneof("response")
        if kind == "chunk":
            response.chunk.index = index
        elif kind == "complete":
            response.complete.index = index
