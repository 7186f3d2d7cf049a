"""Prefill-decode disaggregation between two simulated workers, over real sockets.

SGLang's PD pair meets per request: the router sends the same ``GenerateRequest`` to a prefill
and a decode worker with ``disaggregated_params = {bootstrap_host, bootstrap_port,
bootstrap_room}``; the decode worker contacts the prefill worker's bootstrap server and waits for
the KV cache of that room; the prefill worker waits for a decode worker to join the room, runs
the prefill and sends the KV. Either side gives up after a deadline (SGLang's
``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` / ``…_WAITING_TIMEOUT``, 300 s by default).

The simulator imitates that handshake: a prefill sim (``--role prefill``) listens on its
bootstrap port (:class:`BootstrapServer`); a decode sim connects to the request's
``bootstrap_host:bootstrap_port`` (:func:`receive_kv`), names the room and the prompt it was
given, and gets one JSON line back once the prefill sim has prefilled that room, or an error.
So a router that forgets a leg, sends mismatched rooms or different prompts fails as a real
PD pair would.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = ["BootstrapServer", "DisaggError", "PrefillRoom", "prompt_digest", "receive_kv"]

#: Longest line either side sends (a room number and a digest fit many times over).
_MAX_LINE: Final = 4096
#: Bound of a decode sim's connection attempt to the bootstrap server.
_CONNECT_TIMEOUT_S: Final = 5.0


class DisaggError(Exception):
    """The rendezvous failed (timeout, no bootstrap server, prompt mismatch, room in use)."""


def prompt_digest(input_ids: Sequence[int]) -> str:
    """A short digest of a prompt's token ids, to check both legs got the same prompt."""
    return hashlib.blake2b(b",".join(str(t).encode() for t in input_ids), digest_size=8).hexdigest()


@dataclass(slots=True, eq=False)
class _Room:
    decode_joined: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set by the prefill leg: "" once the KV was sent, else why it never will be.
    outcome: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    prefill_digest: str | None = None
    has_prefill: bool = False
    has_decode: bool = False
    users: int = 0


class PrefillRoom:
    """The prefill leg's view of its room (see :meth:`BootstrapServer.prefill`)."""

    def __init__(self, room_id: int, room: _Room) -> None:
        self.room_id = room_id
        self._room = room

    async def wait_for_decode(self, within_s: float, aborted: asyncio.Event) -> bool:
        """Wait until a decode sim joined the room: True, or False when ``aborted`` was set
        first. ``DisaggError`` after ``within_s`` seconds."""
        joined = self._room.decode_joined
        if joined.is_set():
            return True
        waits = [asyncio.ensure_future(joined.wait()), asyncio.ensure_future(aborted.wait())]
        try:
            await asyncio.wait(waits, timeout=within_s, return_when="FIRST_COMPLETED")
        finally:
            for task in waits:
                task.cancel()
        if joined.is_set():
            return True
        if aborted.is_set():
            return False
        raise DisaggError(
            f"bootstrap_room {self.room_id}: no decode server joined within {within_s:g}s "
            "(simulated KV bootstrap timeout)"
        )

    def transfer(self) -> None:
        """The prefill is done: the decode leg may start."""
        if not self._room.outcome.done():
            self._room.outcome.set_result("")

    def fail(self, reason: str) -> None:
        """The prefill leg ended without sending the KV."""
        if not self._room.outcome.done():
            self._room.outcome.set_result(reason)


class BootstrapServer:
    """A prefill sim's bootstrap port: decode sims join rooms here.

    ``timeout`` is read per use (the ``bootstrap_timeout_s`` knob).
    """

    def __init__(self, host: str, port: int, timeout: Callable[[], float]) -> None:
        self.host = host
        self.port = port
        self._timeout = timeout
        self._rooms: dict[int, _Room] = {}
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def rooms_open(self) -> int:
        """Rooms one leg is waiting in right now."""
        return len(self._rooms)

    async def start(self) -> None:
        """Listen (``port`` 0 picks a free one; ``self.port`` is the bound port after)."""
        if self._server is not None:
            return
        try:
            server = await asyncio.start_server(
                self._serve, self.host, self.port, limit=_MAX_LINE, reuse_address=True
            )
        except OSError as exc:
            raise OSError(f"bootstrap port {self.host}:{self.port}: {exc.strerror}") from None
        self.port = server.sockets[0].getsockname()[1]
        self._server = server

    async def stop(self) -> None:
        """Close the port and every open rendezvous connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    @contextlib.asynccontextmanager
    async def prefill(self, room_id: int, input_ids: Sequence[int]) -> AsyncIterator[PrefillRoom]:
        """Hold ``room_id`` for a prefill leg; on exit a room whose KV was never sent tells its
        decode leg so. ``DisaggError`` when another prefill leg holds the room."""
        room = self._join(room_id)
        try:
            if room.has_prefill:
                raise DisaggError(f"bootstrap_room {room_id} is already in use by another request")
            room.has_prefill = True
            room.prefill_digest = prompt_digest(input_ids)
            handle = PrefillRoom(room_id, room)
            try:
                yield handle
            finally:
                handle.fail(f"the prefill leg of bootstrap_room {room_id} ended without the KV")
        finally:
            self._leave(room_id, room)

    def _join(self, room_id: int) -> _Room:
        room = self._rooms.get(room_id)
        if room is None:
            room = self._rooms[room_id] = _Room()
        room.users += 1
        return room

    def _leave(self, room_id: int, room: _Room) -> None:
        room.users -= 1
        if room.users <= 0 and self._rooms.get(room_id) is room:
            del self._rooms[room_id]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            reply = await self._decode_join(reader)
            writer.write(json.dumps(reply).encode() + b"\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _decode_join(self, reader: asyncio.StreamReader) -> dict[str, object]:
        timeout = self._timeout()
        try:
            async with asyncio.timeout(timeout):
                line = await reader.readline()
        except (TimeoutError, ValueError):
            return {"ok": False, "error": "no join message"}
        try:
            message = json.loads(line)
            room_id = int(message["room"])
            digest = str(message["prompt"])
        except (ValueError, TypeError, KeyError):
            return {"ok": False, "error": "bad join message"}
        room = self._join(room_id)
        try:
            if room.has_decode:
                return {"ok": False, "error": f"bootstrap_room {room_id} already has a decode leg"}
            room.has_decode = True
            room.decode_joined.set()
            # The decode leg may give up first (its own deadline, or it was cancelled): then it
            # hangs up, and the room is freed without waiting out this side's deadline.
            hangup: asyncio.Future[object] = asyncio.ensure_future(reader.read(1))
            outcome: asyncio.Future[object] = asyncio.shield(room.outcome)
            try:
                await asyncio.wait(
                    [outcome, hangup], timeout=timeout, return_when="FIRST_COMPLETED"
                )
            finally:
                hangup.cancel()
                outcome.cancel()
            if not room.outcome.done():
                return {
                    "ok": False,
                    "error": f"no prefill of bootstrap_room {room_id} within {timeout:g}s",
                }
            reason = room.outcome.result()
            if reason:
                return {"ok": False, "error": reason}
            if room.prefill_digest != digest:
                return {
                    "ok": False,
                    "error": f"the prefill leg of bootstrap_room {room_id} had a different prompt",
                }
            return {"ok": True, "room": room_id}
        finally:
            self._leave(room_id, room)


async def receive_kv(
    host: str,
    port: int,
    room_id: int,
    input_ids: Sequence[int],
    *,
    within_s: float,
    aborted: asyncio.Event,
) -> bool:
    """The decode leg: join ``room_id`` at the prefill sim's bootstrap server and wait for the
    KV. True once it arrived, False when ``aborted`` was set first; ``DisaggError`` when the
    server cannot be reached, refuses, or nothing arrives within ``within_s`` seconds."""
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(min(within_s, _CONNECT_TIMEOUT_S)):
            reader, writer = await asyncio.open_connection(host, port, limit=_MAX_LINE)
    except (OSError, TimeoutError) as exc:
        raise DisaggError(
            f"cannot reach the prefill bootstrap server at {where}: {exc or 'timed out'}"
        ) from None
    reply_task = asyncio.ensure_future(reader.readline())
    abort_task = asyncio.ensure_future(aborted.wait())
    try:
        message = {"room": room_id, "prompt": prompt_digest(input_ids)}
        writer.write(json.dumps(message).encode() + b"\n")
        await writer.drain()
        await asyncio.wait(
            [reply_task, abort_task], timeout=within_s, return_when="FIRST_COMPLETED"
        )
        if aborted.is_set() and not reply_task.done():
            return False
        if not reply_task.done():
            raise DisaggError(
                f"bootstrap_room {room_id}: no KV from the prefill server at {where} within "
                f"{within_s:g}s (simulated KV transfer timeout)"
            )
        line = reply_task.result()
    except (OSError, ValueError) as exc:
        raise DisaggError(f"bootstrap_room {room_id}: rendezvous with {where}: {exc}") from None
    finally:
        reply_task.cancel()
        abort_task.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise DisaggError(f"bootstrap_room {room_id}: the bootstrap server at {where} hung up")
    if not reply.get("ok"):
        raise DisaggError(str(reply.get("error") or f"bootstrap_room {room_id}: refused"))
    return True
