"""``kubernetes`` discovery: the Running and Ready pods of a namespace and label selector.

Needs the extra ``turnout[kubernetes]`` (the ``kubernetes-asyncio`` client). It lists the pods,
then watches them from the list's ``resourceVersion`` with bookmarks, so that a watch that ends
(the server's timeout, a dropped connection, an API server restart) resumes where it stopped.
When the server no longer has that version (410 Gone), and every ``resync_interval_s`` anyway,
it lists again and reports a full snapshot, which turnout reconciles by pod UID: a missed event
cannot leave a stale worker. Connection failures are retried with a back-off.

A pod is a worker when it is Running, its Ready condition is True, it has an IP and no
``deletionTimestamp``. A pod that turns unready or starts terminating is drained (in-flight
requests finish); a deleted pod (or one that no longer matches the selector) is removed.
The worker's port is the pod annotation ``port_annotation`` (default ``turnout.io/port``) or
``port``; its model is the label ``model_label`` or the annotation ``model_annotation`` (default
``turnout.io/model``), else what the worker reports; its role the label ``role_label``
(``regular``, ``prefill`` or ``decode``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from turnout.discovery.types import (
    Added,
    DiscoveredWorker,
    Draining,
    Removed,
    Role,
    Snapshot,
    WorkerChange,
)
from turnout.errors import PluginError

log = logging.getLogger(__name__)

#: Where Kubernetes mounts a pod's own namespace (in-cluster).
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]


class KubernetesOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Options of a ``kubernetes`` discovery entry."""

    #: None: the pod's own namespace in a cluster, else the kubeconfig context's, else default.
    namespace: str | None = None
    #: A label selector: ``"app=sglang,tier!=canary"`` or a mapping of equalities.
    selector: str | dict[str, str] = ""
    port: _Port = 30000
    port_annotation: str = "turnout.io/port"
    #: The pods' protocol: SGLang's (``grpc``/``grpcs``), vLLM's or TensorRT-LLM's.
    scheme: Literal["grpc", "grpcs", "vllm+grpc", "vllm+grpcs", "trtllm+grpc", "trtllm+grpcs"] = (
        "grpc"
    )
    model_label: str | None = None
    model_annotation: str | None = "turnout.io/model"
    role_label: str = "turnout.io/role"
    bootstrap_port_annotation: str = "turnout.io/bootstrap-port"
    #: A kubeconfig file; None uses the in-cluster service account inside a pod, else the
    #: default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
    kubeconfig: str | None = None
    context: str | None = None
    #: A full re-list this often, even when the watch is healthy.
    resync_interval_s: _Seconds = 300.0
    #: How long one watch request lasts (the server's ``timeoutSeconds``).
    watch_timeout_s: _Seconds = 240.0
    #: Deadline of a list request, and of connecting.
    request_timeout_s: _Seconds = 30.0
    backoff_initial_s: _Seconds = 0.5
    backoff_max_s: _Seconds = 30.0


class _Restart(Exception):
    """The watch cannot resume from its resource version: list again."""


def _k8s(module: str) -> Any:
    """A module of ``kubernetes_asyncio``, imported when first used (the extra is optional; its
    typing is partial, so it is used untyped)."""
    return importlib.import_module(f"kubernetes_asyncio.{module}")


def _import_client() -> None:
    """Import the client's modules (seconds of work: done in a thread, off the event loop)."""
    for module in ("client", "config", "watch"):
        _k8s(module)


def _expected_errors() -> tuple[type[Exception], ...]:
    """What a list or watch may fail with when the API server is away or refuses."""
    aiohttp: Any = importlib.import_module("aiohttp")  # the client's HTTP library
    api_exception: type[Exception] = _k8s("client.exceptions").ApiException
    return (api_exception, aiohttp.ClientError, TimeoutError, OSError, ValueError, EOFError)


class KubernetesProvider:
    """The ``kubernetes`` discovery provider (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        try:
            self.options = msgspec.convert(options, KubernetesOptions)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None
        selector = self.options.selector
        self.selector = (
            ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            if isinstance(selector, dict)
            else selector
        )
        #: The kubeconfig file (None: in-cluster, or the default kubeconfig).
        self.kubeconfig = os.path.expanduser(self.options.kubeconfig or "") or None
        if importlib.util.find_spec("kubernetes_asyncio") is None:
            raise PluginError(
                "the kubernetes discovery provider needs the kubernetes-asyncio client: "
                "pip install 'turnout[kubernetes]'"
            )

    def describe(self) -> str:
        """One line for ``turnout check``."""
        o = self.options
        where = o.namespace or "(own namespace)"
        source = f"kubeconfig {o.kubeconfig}" if o.kubeconfig else "in-cluster or default config"
        return (
            f"pods in namespace {where} matching {self.selector or '(all)'!r}, port "
            f"{o.port} (or annotation {o.port_annotation}), {source}"
        )

    # -- the watch loop --------------------------------------------------------------------------

    async def watch(self) -> AsyncIterator[WorkerChange]:
        """List, then watch; a full snapshot after every list."""
        await asyncio.to_thread(_import_client)
        client = _k8s("client")
        expected = _expected_errors()
        api, namespace = await self._connect()
        try:
            core = client.CoreV1Api(api)
            delay = self.options.backoff_initial_s
            while True:
                try:
                    version, pods = await self._list(core, api, namespace)
                except expected as exc:
                    delay = await self._pause("list", exc, delay)
                    continue
                delay = self.options.backoff_initial_s
                last: dict[str, DiscoveredWorker | None] = {}
                workers, draining = [], set()
                for pod in pods:
                    uid, worker = self.pod_worker(pod)
                    last[uid] = worker
                    if worker is None:
                        draining.add(uid)
                    else:
                        workers.append(worker)
                yield Snapshot(tuple(workers), frozenset(draining))
                resync_at = time.monotonic() + self.options.resync_interval_s
                while time.monotonic() < resync_at:
                    started, events = time.monotonic(), 0
                    stream = self._watch_once(core, namespace, version, resync_at - started, last)
                    try:
                        async with contextlib.aclosing(stream):
                            async for change, resumed in stream:
                                version = resumed
                                events += 1
                                if change is not None:
                                    yield change
                    except _Restart as exc:
                        log.info("pods in %s: %s; listing again", namespace, exc)
                        break
                    except expected as exc:
                        delay = await self._pause("watch", exc, delay)
                        continue
                    if events or time.monotonic() - started >= 1.0:
                        delay = self.options.backoff_initial_s
                    else:  # ended at once with nothing: do not spin
                        delay = await self._pause("watch", EOFError("closed at once"), delay)
        finally:
            await api.close()

    async def _watch_once(
        self,
        core: Any,
        namespace: str,
        version: str,
        within: float,
        last: dict[str, DiscoveredWorker | None],
    ) -> AsyncGenerator[tuple[WorkerChange | None, str], None]:
        """One watch request from ``version``: (change or None, the version to resume from) for
        each event (bookmarks move the version on without a change)."""
        aiohttp: Any = importlib.import_module("aiohttp")
        api_exception = _k8s("client.exceptions").ApiException

        options = self.options
        seconds = max(1, int(min(options.watch_timeout_s, within)))
        timeout = aiohttp.ClientTimeout(
            sock_connect=options.request_timeout_s,
            # No byte for this long (bookmarks included) means a dead connection.
            sock_read=seconds + options.request_timeout_s,
        )
        watcher = _k8s("watch").Watch(return_type="object")
        async with watcher:
            stream = watcher.stream(
                core.list_namespaced_pod,
                namespace,
                label_selector=self.selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _request_timeout=timeout,
            )
            try:
                async for event in stream:
                    version = str(watcher.resource_version or version)
                    yield self._event_change(event, last), version
            except api_exception as exc:
                if exc.status == 410:
                    raise _Restart(f"resource version {version} is gone (410)") from None
                raise

    def _event_change(
        self, event: Mapping[str, Any], last: dict[str, DiscoveredWorker | None]
    ) -> WorkerChange | None:
        kind = event.get("type")
        pod = event.get("raw_object")
        if kind == "BOOKMARK" or not isinstance(pod, Mapping):
            return None
        if kind == "DELETED":
            uid = str(_get(pod, "metadata", "uid") or "")
            last.pop(uid, None)
            return Removed(uid)
        uid, worker = self.pod_worker(pod)
        if uid in last and last[uid] == worker:
            return None  # a status update that changes nothing for routing
        last[uid] = worker
        return Draining(uid) if worker is None else Added(worker)

    async def _list(
        self, core: Any, api: Any, namespace: str
    ) -> tuple[str, list[Mapping[str, Any]]]:
        listing = await core.list_namespaced_pod(
            namespace,
            label_selector=self.selector,
            _request_timeout=self.options.request_timeout_s,
        )
        data = api.sanitize_for_serialization(listing)
        version = str(_get(data, "metadata", "resourceVersion") or "")
        items = data.get("items") or []
        return version, [item for item in items if isinstance(item, Mapping)]

    async def _pause(self, what: str, exc: Exception, delay: float) -> float:
        status = getattr(exc, "status", None)
        hint = ""
        if status in (401, 403):
            hint = " (the service account needs get, list and watch on pods: see docs/deploy.md)"
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        log.warning(
            "pods %s failed: %s%s%s; again in %.1fs",
            what,
            f"{status} " if status else "",
            reason,
            hint,
            delay,
        )
        await asyncio.sleep(delay * random.uniform(0.8, 1.2))
        return min(delay * 2, self.options.backoff_max_s)

    # -- client set-up ---------------------------------------------------------------------------

    async def _connect(self) -> tuple[Any, str]:
        client, config = _k8s("client"), _k8s("config")
        options = self.options
        if options.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            namespace = options.namespace or _read_namespace_file() or "default"
            return client.ApiClient(configuration), namespace
        path = self.kubeconfig
        api = await config.new_client_from_config(
            config_file=path, context=options.context, persist_config=False
        )
        if options.namespace is not None:
            return api, options.namespace
        contexts, active = config.list_kube_config_contexts(path)
        if options.context is not None:
            active = next((c for c in contexts if c.get("name") == options.context), active)
        return api, str(_get(active or {}, "context", "namespace") or "default")

    # -- pods ------------------------------------------------------------------------------------

    def pod_worker(self, pod: Mapping[str, Any]) -> tuple[str, DiscoveredWorker | None]:
        """A pod's UID and its worker, or None when it must not take requests now."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        status = pod.get("status") or {}
        ip = status.get("podIP")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not ready or not ip:
            return uid, None
        options = self.options
        labels: Mapping[str, str] = meta.get("labels") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        name = str(meta.get("name") or uid)
        port = _port(annotations.get(options.port_annotation), options.port, name)
        model = (labels.get(options.model_label) if options.model_label else None) or (
            annotations.get(options.model_annotation) if options.model_annotation else None
        )
        try:
            role = Role(labels.get(options.role_label) or Role.REGULAR)
        except ValueError:
            log.warning(
                "pod %s: label %s=%r is not a role (regular, prefill, decode); not used",
                name,
                options.role_label,
                labels.get(options.role_label),
            )
            return uid, None
        host = f"[{ip}]" if ":" in str(ip) else str(ip)
        bootstrap = annotations.get(options.bootstrap_port_annotation)
        return uid, DiscoveredWorker(
            key=uid,
            url=f"{options.scheme}://{host}:{port}",
            model=model or None,
            role=role,
            name=name,
            labels={"pod": name, "namespace": str(meta.get("namespace") or "")},
            bootstrap_port=_port(bootstrap, None, name) if bootstrap else None,
        )


def _port(value: str | None, default: int | None, pod: str) -> int | None:
    if value is None:
        return default
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        log.warning("pod %s: %r is not a port; using %s", pod, value, default)
        return default
    return port


def _get(data: Mapping[str, Any], *path: str) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _read_namespace_file() -> str | None:
    try:
        return NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None
