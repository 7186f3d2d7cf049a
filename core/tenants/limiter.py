"""Tenant budgets: admission (requests per minute, concurrent requests) and token reservations.

Requests and tokens are counted with the sliding-window counter of ``limits`` (one storage
round trip per check, the checks of one admission run together). A request's tokens are
reserved as ``prompt + max_tokens`` (per choice) once its prompt is tokenized, and settled to
its real usage when it ends — however it ends — by giving back (or charging) the difference.

Concurrent requests are counted in epoch counters: a request adds itself to the counter of the
epoch it started in and the check sums that epoch's counter and the previous one's, so that a
counter left behind by a process that died stops counting after two epochs. An epoch is
longer than the request timeout, so a request always ends within the epoch after its own.

Give-backs and releases run in background tasks with the storage deadline: nothing on the
request's path waits for them, and a client that leaves cannot skip them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from limits import RateLimitItem, RateLimitItemPerSecond

from turnout.config import LimitsConfig
from turnout.tenants.refusal import WindowState, over_limit, too_large, too_many_running
from turnout.tenants.store import Backend, CounterStore, Failed, StorageUnavailable
from turnout.tenants.table import Tenant
from turnout.wire.proto import sglang_scheduler_pb2 as pb

log = logging.getLogger("turnout.tenants")

#: Longest wait at shutdown for give-backs and releases still running.
CLOSE_WAIT_S = 2.0
#: Counted refusals, by reason (the ``limit`` label of ``turnout_tenant_rejected_total``).
REFUSAL_REASONS = ("requests", "tokens", "concurrency", "storage")


class TenantLimiter:
    """The budgets of every tenant of one app (counters live in its :class:`CounterStore`)."""

    def __init__(
        self,
        settings: LimitsConfig,
        *,
        request_timeout_s: float,
        on_refusal: Callable[[str, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = CounterStore(settings)
        self.window_s = settings.window_s
        #: Length of a concurrency epoch: longer than any request (see the module docstring).
        self.epoch_s = max(300, math.ceil(request_timeout_s) + 60) if request_timeout_s else 3600
        self._on_refusal = on_refusal or (lambda _tenant, _reason: None)
        self._items: dict[tuple[str, int], RateLimitItem] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Reach the storage once, so that an unreachable one is logged at start-up."""
        await self.store.check()

    async def aclose(self) -> None:
        """Let give-backs finish (briefly), then close the storage."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=CLOSE_WAIT_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await self.store.aclose()

    # -- limits ----------------------------------------------------------------------------------

    def per_window(self, per_minute: int) -> int:
        """A per-minute limit scaled to the counting window."""
        return max(1, math.ceil(per_minute * self.window_s / 60))

    def item(self, kind: str, per_minute: int) -> RateLimitItem:
        """The ``limits`` item of a tenant limit (``kind``: ``requests`` or ``tokens``)."""
        key = (kind, per_minute)
        found = self._items.get(key)
        if found is None:
            found = RateLimitItemPerSecond(
                self.per_window(per_minute), self.window_s, namespace=kind
            )
            self._items[key] = found
        return found

    def _epoch(self) -> int:
        return int(time.time() // self.epoch_s)

    def _slots_key(self, tenant: str, epoch: int) -> str:
        return f"concurrent/{tenant}/{epoch}"

    # -- admission -------------------------------------------------------------------------------

    async def admit(self, tenant: Tenant) -> Admission:
        """Count a new request of ``tenant``; 429 when it is over its requests per minute or
        concurrent requests (nothing stays taken then), 503 when failing closed."""
        settings = tenant.settings
        name = tenant.name
        requests = (
            self.item("requests", settings.requests_per_minute)
            if settings.requests_per_minute
            else None
        )
        slots = settings.concurrent_requests
        if requests is None and slots is None:
            return Admission(self, tenant, None, None, None)
        epoch = self._epoch() if slots is not None else None
        expiry = 2 * self.epoch_s + 60

        async def take(backend: Backend) -> list[Any]:
            calls: list[Awaitable[Any]] = []
            if requests is not None:
                calls.append(backend.limiter.hit(requests, name))
            if epoch is not None:
                calls.append(backend.storage.incr(self._slots_key(name, epoch), expiry))
                calls.append(backend.storage.get(self._slots_key(name, epoch - 1)))
            return list(await asyncio.gather(*calls))

        try:
            results, backend = await self.store.run(take)
        except StorageUnavailable:
            self._on_refusal(name, "storage")
            raise
        request_ok = bool(results.pop(0)) if requests is not None else True
        running = sum(int(n) for n in results)
        slots_ok = slots is None or running <= slots
        admission = Admission(
            self, tenant, backend, epoch, requests if request_ok and requests else None
        )
        if request_ok and slots_ok:
            return admission
        admission.close(served=False)  # give back what this request took
        if not request_ok:
            assert requests is not None
            self._on_refusal(name, "requests")
            states = await self._states(tenant, backend)
            raise over_limit(name, "requests", 1, states, fallback_wait_s=1.0)
        assert slots is not None
        self._on_refusal(name, "concurrency")
        raise too_many_running(name, slots)

    async def reserve(self, admission: Admission, cost: int) -> Reservation | None:
        """Reserve ``cost`` tokens of the admission's tenant (None: it has no token limit);
        429 when they do not fit its window now."""
        tenant = admission.tenant
        per_minute = tenant.settings.tokens_per_minute
        if not per_minute:
            return None
        item = self.item("tokens", per_minute)
        name = tenant.name
        if cost > item.amount:
            self._on_refusal(name, "tokens")
            raise too_large(name, cost, item.amount, self.window_s)
        try:
            accepted, backend = await self.store.run(lambda b: b.limiter.hit(item, name, cost=cost))
        except StorageUnavailable:
            self._on_refusal(name, "storage")
            raise
        if not accepted:
            self._on_refusal(name, "tokens")
            states = await self._states(tenant, backend)
            raise over_limit(name, "tokens", cost, states, fallback_wait_s=1.0)
        reservation = Reservation(name, item, cost, backend, time.monotonic())
        admission.reservations.append(reservation)
        return reservation

    async def _states(self, tenant: Tenant, backend: Backend) -> dict[str, WindowState]:
        """The tenant's request and token windows (for the headers of a 429); {} when the
        storage does not answer."""
        settings = tenant.settings
        items = {
            kind: self.item(kind, per_minute)
            for kind, per_minute in (
                ("requests", settings.requests_per_minute),
                ("tokens", settings.tokens_per_minute),
            )
            if per_minute
        }

        async def read(b: Backend) -> list[tuple[int, float, int, float]]:
            return list(
                await asyncio.gather(
                    *(
                        b.storage.get_sliding_window(item.key_for(tenant.name), item.get_expiry())
                        for item in items.values()
                    )
                )
            )

        windows = await self.store.on(backend, read)
        if isinstance(windows, Failed):
            return {}
        return {
            kind: WindowState(item.amount, self.window_s, *window)
            for (kind, item), window in zip(items.items(), windows, strict=True)
        }

    # -- give-backs ------------------------------------------------------------------------------

    def _finish(self, admission: Admission, served: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._give_back(admission, served))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _give_back(self, admission: Admission, served: bool) -> None:
        """Release the concurrency slot, give back a request not served, settle the tokens."""
        name = admission.tenant.name
        backend = admission.backend
        calls: list[Awaitable[Any]] = []
        if backend is not None:
            epoch = admission.epoch
            if epoch is not None and self._epoch() < epoch + 2:  # else it no longer counts
                key = self._slots_key(name, epoch)
                calls.append(self._on(backend, lambda b: b.storage.incr(key, 1, amount=-1)))
            requests = admission.requests
            if not served and requests is not None:
                calls.append(self._on(backend, lambda b: b.limiter.hit(requests, name, cost=-1)))
        calls.extend(self._settle(r) for r in admission.reservations)
        await asyncio.gather(*calls)

    async def _settle(self, reservation: Reservation) -> None:
        """Charge the real usage instead of the reservation: give back the unused tokens (while
        the reservation still counts in the window) or charge tokens beyond it."""
        used = reservation.usage() if reservation.usage is not None else 0
        delta = used - reservation.cost
        if delta == 0:
            return
        if delta < 0 and time.monotonic() - reservation.at >= self.window_s:
            return  # the reservation has aged out of the window: giving back would be a gift
        item, name = reservation.item, reservation.tenant
        await self._on(reservation.backend, lambda b: b.limiter.hit(item, name, cost=delta))

    async def _on(self, backend: Backend, op: Callable[[Backend], Awaitable[Any]]) -> None:
        try:
            await self.store.on(backend, op)
        except Exception:  # a give-back must never break the request that already ended
            log.exception("tenant budget give-back failed")


class Reservation:
    """Tokens reserved for one worker request; settled to ``usage()`` when the request ends."""

    __slots__ = ("at", "backend", "cost", "item", "tenant", "usage")

    def __init__(
        self, tenant: str, item: RateLimitItem, cost: int, backend: Backend, at: float
    ) -> None:
        self.tenant = tenant
        self.item = item
        self.cost = cost
        self.backend = backend
        self.at = at
        #: Tokens the worker request used so far (prompt + completion); None: none used.
        self.usage: Callable[[], int] | None = None


class Admission:
    """One admitted request of a limited tenant: what it took, given back by :meth:`close`."""

    __slots__ = ("_closed", "_limiter", "backend", "epoch", "requests", "reservations", "tenant")

    def __init__(
        self,
        limiter: TenantLimiter,
        tenant: Tenant,
        backend: Backend | None,
        epoch: int | None,
        requests: RateLimitItem | None,
    ) -> None:
        self._limiter = limiter
        self.tenant = tenant
        self.backend = backend
        #: The concurrency epoch this request counts in (None: no concurrency limit).
        self.epoch = epoch
        #: The requests-per-minute item this request was counted in.
        self.requests = requests
        self.reservations: list[Reservation] = []
        self._closed = False

    async def reserve_tokens(
        self, request: pb.GenerateRequest, context_length: int | None
    ) -> Reservation | None:
        """Reserve the tokens ``request`` may use (None: no token limit), settled to its
        ``usage`` when the admission closes; 429 when they do not fit now."""
        cost = reservation_size(request, context_length, self._limiter.settings.default_max_tokens)
        return await self._limiter.reserve(self, cost)

    def refuse_oversized(
        self, prompt_tokens: int, *, n: int, max_tokens: int | None, context_length: int | None
    ) -> None:
        """429 now when a request of this size could never fit the tenant's token window (what
        :meth:`reserve_tokens` would refuse later): for work that is costly before the
        reservation (decoding images). No storage round trip."""
        per_minute = self.tenant.settings.tokens_per_minute
        if not per_minute:
            return
        limiter = self._limiter
        item = limiter.item("tokens", per_minute)
        default = limiter.settings.default_max_tokens
        cost = token_cost(prompt_tokens, n, max_tokens, context_length, default)
        if cost > item.amount:
            limiter._on_refusal(self.tenant.name, "tokens")
            raise too_large(self.tenant.name, cost, item.amount, limiter.window_s)

    async def reserve_input_tokens(self, count: int) -> Reservation | None:
        """Reserve ``count`` input tokens of a request that generates none (an embedding):
        charged as they are unless its ``usage`` says otherwise; 429 when they do not fit."""
        return await self._limiter.reserve(self, count)

    def hand_over(self) -> Admission:
        """A new owner of what this admission took (its concurrency slot, its count and
        reservations), for work that outlives the request (a background response): this one
        is closed without giving anything back; the returned one is closed by its owner."""
        taken = Admission(self._limiter, self.tenant, self.backend, self.epoch, self.requests)
        taken.reservations, self.reservations = self.reservations, []
        self._closed = True
        return taken

    def close(self, served: bool = True) -> None:
        """The request ended (idempotent): give back its slot and settle its tokens in the
        background; ``served=False`` also gives back its count in the requests per minute."""
        if self._closed:
            return
        self._closed = True
        if self.backend is not None or self.reservations:
            self._limiter._finish(self, served)


def reservation_size(
    request: pb.GenerateRequest, context_length: int | None, default_max_tokens: int
) -> int:
    """``prompt + n * max_tokens`` of a worker request; without ``max_tokens``, what is left
    of the context (when known) or ``default_max_tokens``."""
    params = request.sampling_params
    return token_cost(
        len(request.tokenized.input_ids),
        params.n,
        params.max_new_tokens if params.HasField("max_new_tokens") else None,
        context_length,
        default_max_tokens,
    )


def token_cost(
    prompt: int,
    n: int,
    max_tokens: int | None,
    context_length: int | None,
    default_max_tokens: int,
) -> int:
    """What :func:`reservation_size` reserves for a prompt of ``prompt`` tokens."""
    room = max(0, context_length - prompt) if context_length else None
    if max_tokens is not None:
        completion = max_tokens if room is None else min(max_tokens, room)
    else:
        completion = room if room is not None else default_max_tokens
    return prompt + max(1, n) * completion
