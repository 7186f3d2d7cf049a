"""The worker registry: membership, per-model index, health and load background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from turnout.errors import ConfigError
from turnout.http_workers.kind import is_http_worker
from turnout.workers.adapters import Adapter
from turnout.workers.connection import WorkerConnection
from turnout.workers.dp import Slot
from turnout.workers.errors import WorkerConflict, WorkerNotFound
from turnout.workers.health import HealthState
from turnout.workers.ids import default_worker_id
from turnout.workers.kv_events import KvEventSource, KvSubscriber
from turnout.workers.roles import Role, role_from_labels
from turnout.workers.settings import WireSettings, WorkerSpec, WorkersSettings
from turnout.workers.worker import Worker, WorkerState

if TYPE_CHECKING:
    from turnout.http_workers.connection import HttpClient

log = logging.getLogger(__name__)

#: How often the event streams' verdicts (wedged, stale) are checked.
_WATCH_INTERVAL_S = 0.25

Connect = Callable[[str], WorkerConnection]
Listener = Callable[[str, "list[Worker]"], None]


class WorkerRegistry:
    """All workers of this router, indexed by id and by served model.

    Workers are added before they are up (state ``pending``); a background task per worker
    discovers its model (``GetModelInfo``/``GetServerInfo``), probes it and keeps probing, so
    workers that come up later are picked up. Nothing here ever blocks start-up on a worker.
    """

    def __init__(
        self,
        settings: WorkersSettings | None = None,
        connect: Connect | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or WorkersSettings()
        self._connect = connect or functools.partial(_default_connect, wire=self.settings.wire)
        self._clock = clock
        self._workers: dict[str, Worker] = {}
        self._by_model: dict[str, list[Worker]] = {}
        #: ``models()`` (sorted), kept until a worker joins or leaves a model's list.
        self._model_ids: tuple[str, ...] | None = None
        #: Per role, the workers of each model (a worker is in its model's list of its role).
        self._pools: dict[Role, dict[str, list[Worker]]] = {role: {} for role in Role}
        self._regular = self._pools[Role.REGULAR]
        #: Models with a prefill or a decode worker registered (served prefill-decode).
        self.disaggregated: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._aux: set[asyncio.Task[Any]] = set()
        self._listeners: list[Listener] = []
        #: Ids of workers whose removal has begun (draining until idle, then dropped).
        self._removing: set[str] = set()
        self._running = False
        #: Per worker, the failure last logged as a warning (to log each reason once).
        self._warned: dict[str, str] = {}
        #: The one client of the HTTP workers, made when the first one is added.
        self._http_client: HttpClient | None = None

    # -- queries (cheap, per request) ---------------------------------------------------------

    def get(self, worker_id: str) -> Worker | None:
        """The worker with ``worker_id``, if registered."""
        return self._workers.get(worker_id)

    def all(self) -> list[Worker]:
        """Every registered worker, in registration order."""
        return list(self._workers.values())

    def models(self, ready_only: bool = False) -> list[str]:
        """Model ids served by registered (or, with ``ready_only``, routable) workers."""
        if not ready_only:  # asked per request: sorted once per change of the lists
            ids = self._model_ids
            if ids is None:
                ids = self._model_ids = tuple(
                    sorted(model for model, workers in self._by_model.items() if workers)
                )
            return list(ids)
        return sorted(
            model
            for model, workers in self._by_model.items()
            if workers and any(w.routable for w in workers)
        )

    def workers_for(self, model: str) -> list[Worker]:
        """Every worker serving ``model``, whatever its state."""
        return list(self._by_model.get(model, ()))

    def candidates(
        self,
        model: str,
        exclude: Iterable[str] = (),
        adapter: str | None = None,
        *,
        http: bool = False,
    ) -> list[Slot]:
        """Where a request for ``model`` may go: each routable regular worker serving it (with
        LoRA ``adapter`` loaded, when one is named), minus the worker ids in ``exclude``; a
        worker with DP ranks offers each rank instead. Its gRPC workers, or with ``http`` its
        HTTP workers (which take forwarded requests only)."""
        workers = self._regular.get(model, ())
        skip = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        found: list[Slot] = []
        for w in workers:
            if (
                w.routable
                and w.http is http
                and (not skip or w.id not in skip)
                and (adapter is None or w.has_adapter(adapter))
            ):
                if w.ranks:
                    found.extend(w.ranks)
                else:
                    found.append(w)
        return found

    def adapters(self, model: str) -> dict[str, Adapter]:
        """The LoRA adapters reported by the workers of ``model``, by name (the first worker's
        record of each)."""
        found: dict[str, Adapter] = {}
        for worker in self._by_model.get(model, ()):
            for name, adapter in (worker.adapters or {}).items():
                found.setdefault(name, adapter)
        return found

    def role_candidates(
        self,
        model: str,
        role: Role,
        exclude: Iterable[str] = (),
        *,
        ranks: bool = True,
        adapter: str | None = None,
    ) -> list[Slot]:
        """Like :meth:`candidates`, among the workers of ``role``; with ``ranks=False`` a worker
        with DP ranks is offered whole (its own scheduler picks the rank)."""
        skip = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        found: list[Slot] = []
        for w in self._pools[role].get(model, ()):
            if w.routable and w.id not in skip and (adapter is None or w.has_adapter(adapter)):
                if ranks and w.ranks:
                    found.extend(w.ranks)
                else:
                    found.append(w)
        return found

    def role_workers(self, model: str, role: Role) -> list[Worker]:
        """Every worker of ``role`` serving ``model``, whatever its state."""
        return list(self._pools[role].get(model, ()))

    def unplaced(self) -> list[Worker]:
        """Registered workers whose model is not known yet (not reached so far)."""
        return [w for w in self._workers.values() if w.model_id is None]

    def has_ready_worker(self, model: str) -> bool:
        """Whether a request for ``model`` can be served now: by a regular worker, or by a
        prefill and a decode worker."""
        return self.readiness_problem(model) is None

    def readiness_problem(self, model: str) -> str | None:
        """Why no request for ``model`` can be served now, or None when one can."""
        if any(w.routable for w in self._regular.get(model, ())):
            return None
        if model not in self.disaggregated:
            return "no healthy worker"
        missing = [
            role.value
            for role in (Role.PREFILL, Role.DECODE)
            if not any(w.routable for w in self._pools[role].get(model, ()))
        ]
        return f"no healthy {' or '.join(missing)} worker" if missing else None

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(model, workers_of_model)`` when a model's membership changes."""
        self._listeners.append(listener)

    # -- membership ------------------------------------------------------------------------------

    async def add(self, spec: WorkerSpec, wait_s: float | None = None) -> Worker:
        """Register a worker (pending) and start watching it.

        With ``wait_s``, wait up to that long for it to be ready; it stays registered either way.
        Raises :class:`WorkerConflict` when the id or URL is taken.
        """
        worker_id = spec.id or default_worker_id(spec.url)
        if worker_id in self._workers:
            raise WorkerConflict(f"worker {worker_id!r} is already registered")
        for other in self._workers.values():
            if other.url == spec.url:
                raise WorkerConflict(f"{spec.url} is already registered as {other.id!r}")
        worker = Worker(
            spec,
            self._http_connection(spec)
            if is_http_worker(spec)
            else self._connect(engine_url(spec.url, spec.kind)),
            self.settings.health,
            self.settings.circuit_breaker,
            self._clock,
        )
        self._workers[worker.id] = worker
        if worker.model_id is not None:
            self._index(worker)
        if self._running:
            self._watch(worker)
            if wait_s:
                await self.wait_ready(worker.id, wait_s)
        return worker

    async def remove(self, worker_id: str, drain_timeout_s: float | None = None) -> Worker:
        """Drain a worker (no new requests; in-flight ones finish) and then remove it.

        Waits at most ``drain_timeout_s`` (default from the settings) for in-flight requests.
        """
        worker = self._workers.get(worker_id)
        if worker is None:
            raise WorkerNotFound(f"no worker {worker_id!r}")
        worker.draining = True
        self._removing.add(worker_id)
        timeout = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        try:
            async with asyncio.timeout(timeout):
                await worker.wait_idle()
        except TimeoutError:
            log.warning(
                "worker %s: removed with %d requests in flight", worker_id, worker.in_flight
            )
        finally:
            if self._workers.get(worker_id) is worker:
                self._removing.discard(worker_id)
        await self._drop(worker)
        return worker

    def start_drain(self, worker_id: str) -> Worker:
        """Mark a worker draining now and remove it in the background when idle."""
        worker = self._workers.get(worker_id)
        if worker is None:
            raise WorkerNotFound(f"no worker {worker_id!r}")
        if worker_id not in self._removing:
            worker.draining = True
            self._removing.add(worker_id)
            self._spawn(self.remove(worker_id))
        return worker

    def set_draining(self, worker_id: str, draining: bool) -> bool:
        """Hold a worker out of rotation (in-flight requests finish) or put it back, without
        removing it. Returns whether the worker is now in that state: never for an unknown
        worker, and a worker being removed cannot be put back.
        """
        worker = self._workers.get(worker_id)
        if worker is None or worker_id in self._removing:
            return worker is not None and draining
        worker.draining = draining
        return True

    async def wait_ready(self, worker_id: str, within: float) -> bool:
        """Wait until the worker is routable (True) or ``within`` seconds pass (False)."""
        deadline_at = self._clock() + within
        while True:
            worker = self._workers.get(worker_id)
            if worker is None:
                return False
            if worker.routable:
                return True
            left = deadline_at - self._clock()
            if left <= 0:
                return False
            await asyncio.sleep(min(0.02, left))

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the configured workers and start the background tasks (never waits for a
        worker to come up)."""
        if self._running:
            return
        self._running = True
        for index, spec in enumerate(self.settings.workers):
            worker_id = spec.id or default_worker_id(spec.url)
            if worker_id not in self._workers:
                try:
                    await self.add(spec)
                except WorkerConflict as exc:
                    self._running = False
                    raise ConfigError(f"workers[{index}]: {exc}") from None
            elif spec.model != self._workers[worker_id].spec.model:
                log.warning(
                    "workers[%d]: %s is already registered as worker %s (model %s); a worker "
                    "serves one model, so model %s gets no worker from this entry",
                    index,
                    spec.url,
                    worker_id,
                    self._workers[worker_id].spec.model or "discovered",
                    spec.model or "discovered",
                )
        for worker in self._workers.values():
            self._watch(worker)
        if self.settings.load_monitor.enabled:
            self._spawn(self._poll_loads())
        self._spawn(self._watch_engines())

    async def stop(self) -> None:
        """Cancel every background task and close every connection."""
        self._running = False
        tasks = [*self._tasks.values(), *self._aux]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for worker in self._workers.values():
            if worker.kv is not None:
                await worker.kv.stop()
        self._tasks.clear()
        self._aux.clear()
        for worker in self._workers.values():
            with contextlib.suppress(Exception):
                await worker.connection.close()
        if self._http_client is not None:
            await self._http_client.aclose()

    # -- internals -------------------------------------------------------------------------------

    def _http_connection(self, spec: WorkerSpec) -> WorkerConnection:
        """The connection of an HTTP worker, over the registry's one HTTP client."""
        from turnout.http_workers.connection import HttpClient, HttpConnection

        client = self._http_client
        if client is None:
            client = self._http_client = HttpClient(self.settings.http)
        return HttpConnection(spec, client)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    def _watch(self, worker: Worker) -> None:
        if worker.id not in self._tasks:
            task = asyncio.get_running_loop().create_task(
                self._health_loop(worker), name=f"turnout-health-{worker.id}"
            )
            self._tasks[worker.id] = task

    def _index(self, worker: Worker) -> None:
        """Put ``worker`` in the lists of its model and role (and out of any other)."""
        self._model_ids = None
        model = worker.model_id
        for other, workers in self._by_model.items():
            if worker in workers and other != model:
                self._unindex(worker, other)
                self._notify(other)
        if model is None:
            return
        for role, pool in self._pools.items():
            members = pool.get(model)
            if members is not None and worker in members and role is not worker.role:
                members.remove(worker)
                if not members:
                    del pool[model]
        workers = self._by_model.setdefault(model, [])
        members = self._pools[worker.role].setdefault(model, [])
        added = worker not in workers or worker not in members
        if worker not in workers:
            workers.append(worker)
        if worker not in members:
            members.append(worker)
        self._mark_disaggregated(model)
        if added:
            self._notify(model)

    def _unindex(self, worker: Worker, model: str) -> None:
        self._model_ids = None
        workers = self._by_model.get(model, [])
        if worker in workers:
            workers.remove(worker)
            if not workers:
                del self._by_model[model]
        for pool in self._pools.values():
            members = pool.get(model)
            if members is not None and worker in members:
                members.remove(worker)
                if not members:
                    del pool[model]
        self._mark_disaggregated(model)

    def _mark_disaggregated(self, model: str) -> None:
        if model in self._pools[Role.PREFILL] or model in self._pools[Role.DECODE]:
            self.disaggregated.add(model)
        else:
            self.disaggregated.discard(model)

    def _notify(self, model: str) -> None:
        members = list(self._by_model.get(model, ()))
        for listener in self._listeners:
            try:
                listener(model, members)
            except Exception:
                log.exception("worker listener failed")

    async def _drop(self, worker: Worker) -> None:
        if self._workers.get(worker.id) is not worker:
            return
        del self._workers[worker.id]
        self._warned.pop(worker.id, None)
        worker.removed = True
        task = self._tasks.pop(worker.id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if worker.kv is not None:
            await worker.kv.stop()
        if worker.model_id is not None and worker in self._by_model.get(worker.model_id, ()):
            self._unindex(worker, worker.model_id)
            self._notify(worker.model_id)
        with contextlib.suppress(Exception):
            await worker.connection.close()

    async def _discover(self, worker: Worker, timeout_s: float) -> bool:
        try:
            labels = await worker.connection.model_info(timeout_s)
        except Exception as exc:
            worker.last_error = f"model info: {type(exc).__name__}: {exc}"
            return False
        reshaped = worker.apply_discovery(dict(labels))
        reported = role_from_labels(worker.labels)
        if worker.spec.role is not None and reported is not worker.role:
            log.warning(
                "worker %s is configured as a %s worker but reports itself as %s "
                "(disaggregation_mode); routing it as %s",
                worker.id,
                worker.role.value,
                reported.value,
                worker.role.value,
            )
        await self._refresh_adapters(worker, timeout_s)
        self._index(worker)
        if reshaped and worker.model_id is not None:
            self._notify(worker.model_id)  # its candidates (DP ranks) changed
        return True

    async def refresh_adapters(self, model: str, timeout_s: float) -> None:
        """Ask every worker of ``model`` again which LoRA adapters it has loaded (after an
        operator loaded or unloaded one), so requests route by the new set at once."""
        await asyncio.gather(
            *(self._refresh_adapters(w, timeout_s) for w in self._by_model.get(model, ()))
        )

    @staticmethod
    async def _refresh_adapters(worker: Worker, timeout_s: float) -> None:
        """Ask which LoRA adapters the worker has loaded (they come and go at run time); a
        failed call keeps what it said before."""
        try:
            adapters = await worker.connection.adapters(timeout_s)
        except Exception as exc:
            log.debug("worker %s: adapters not listed: %s", worker.id, exc)
            return
        worker.adapters = None if adapters is None else dict(adapters)

    async def _health_loop(self, worker: Worker) -> None:
        health = worker.health
        while not worker.removed and self._running:
            settings = health.settings
            changed = False
            if not worker.discovered and not await self._discover(worker, settings.timeout_s):
                changed = health.record_probe(False)
                self._log_change(worker, changed)
                self._warn_unreachable(worker, health.next_delay())
                await self._sleep(worker, health.next_delay())
                continue
            if not settings.enabled:
                changed = health.mark_healthy()
            else:
                # Probed even while it serves traffic: only a probe can hear healthy=false.
                health.probe_started()
                answered = False
                try:
                    ok = await worker.connection.health_check(settings.timeout_s)
                    answered = True
                except Exception as exc:
                    ok = False
                    worker.last_error = f"health check: {type(exc).__name__}: {exc}"
                if answered and not ok:
                    worker.last_error = "health check: the worker answered healthy=false"
                changed = health.record_probe(ok, started=True, answered=answered)
                if ok:
                    await self._refresh_adapters(worker, settings.timeout_s)
            if health.healthy and worker.kv is None and settings.kv_events:
                self._subscribe(worker)
            self._log_change(worker, changed)
            self._warn_unreachable(worker, health.next_delay())
            if changed and health.state is HealthState.UNHEALTHY:
                worker.discovered = False  # it may come back as a different model
            elif changed and health.state is HealthState.HEALTHY:
                worker.breaker.reset()
                if worker.kv is not None and not worker.kv.running and settings.kv_events:
                    self._subscribe(worker)  # it came back, maybe upgraded: ask again
            await self._sleep(worker, health.next_delay())

    def _warn_unreachable(self, worker: Worker, retry_s: float) -> None:
        """Warn, once per distinct reason, while a worker cannot take requests."""
        if worker.state is WorkerState.READY:
            self._warned.pop(worker.id, None)
            return
        reason = worker.last_error
        if reason is None or self._warned.get(worker.id) == reason:
            return
        self._warned[worker.id] = reason
        log.warning(
            "worker %s (%s) is %s: %s; trying again every %gs",
            worker.id,
            worker.url,
            worker.state.value,
            reason,
            retry_s,
        )

    @staticmethod
    def _log_change(worker: Worker, changed: bool) -> None:
        if changed:
            log.info("worker %s (%s) is now %s", worker.id, worker.url, worker.state.value)

    @staticmethod
    async def _sleep(worker: Worker, delay: float) -> None:
        worker.wake.clear()
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # races with the event being set, and the loop would then never stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await worker.wake.wait()

    async def _poll_loads(self) -> None:
        settings = self.settings.load_monitor
        while True:
            await asyncio.sleep(settings.interval_s)
            # Workers that push their load on the event stream are not polled.
            workers = [w for w in self._workers.values() if w.routable and not w.pushes_load]
            results = await asyncio.gather(
                *(w.connection.load(w.health.settings.timeout_s) for w in workers),
                return_exceptions=True,
            )
            for worker, result in zip(workers, results, strict=True):
                if not isinstance(result, BaseException):
                    worker.set_reported_load(result)

    def _subscribe(self, worker: Worker) -> None:
        """Start ``worker``'s KV-event subscription, when its connection can stream them."""
        if not hasattr(worker.connection, "kv_events"):
            return
        source = cast("KvEventSource", worker.connection)
        worker.kv = KvSubscriber(
            worker, source, self._clock, count_load=self.settings.load_monitor.enabled
        )
        worker.kv.start()

    async def _watch_engines(self) -> None:
        """Take workers out of rotation while their event stream says they are wedged or
        stopped, and back once it says they work."""
        while True:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            now = self._clock()
            for worker in list(self._workers.values()):
                kv = worker.kv
                if kv is None:
                    continue
                s = worker.health.settings
                reason = kv.verdict(
                    now, s.wedge_after_s, s.stale_after_s, s.assumed_prefill_tokens_per_s
                )
                if worker.veto(reason):
                    if reason is not None:
                        log.warning("worker %s out of rotation: %s", worker.id, reason)
                    else:
                        log.info("worker %s back in rotation: it speaks again", worker.id)
                if reason is not None and worker.running:
                    # Answers it streams that stay silent a whole interval go on elsewhere.
                    cut = worker.cut_silent()
                    if cut:
                        log.warning(
                            "worker %s: %d silent answers cut (out of rotation)", worker.id, cut
                        )


def engine_url(url: str, kind: str | None) -> str:
    """``url`` with the scheme of the engine ``kind`` names (``vllm+grpc://…`` for ``vllm`` and
    a plain ``grpc://`` URL): what the connection reads the protocol from."""
    if kind not in ("vllm", "trtllm") or not url.startswith(("grpc://", "grpcs://")):
        return url
    return f"{kind}+{url}"


def _default_connect(url: str, wire: WireSettings) -> WorkerConnection:
    from turnout.workers.wire_adapter import WireConnection, client_settings

    return WireConnection(url, client_settings(wire))
