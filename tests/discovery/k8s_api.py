"""A scripted Kubernetes API server for pods, on a loopback socket (aiohttp).

It speaks what a pod informer needs: ``GET /api/v1/namespaces/{ns}/pods`` lists (with the
collection's ``resourceVersion``) and, with ``watch=true``, streams events as chunked JSON lines
from a ``resourceVersion``: ADDED/MODIFIED/DELETED (objects entering or leaving the label selector
become ADDED/DELETED, as the real server sends them), BOOKMARK with ``allowWatchBookmarks``, an
ERROR event with code 410 for a version older than the compacted history, and the end of the
stream at ``timeoutSeconds``. Tests change pods, drop watch connections, compact the history and
restart the server on the same port. Requests need ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

TOKEN = "scripted-token"


@dataclass
class Watcher:
    namespace: str
    selector: dict[str, str]
    bookmarks: bool
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    transport: asyncio.Transport | None = None


@dataclass
class Event:
    version: int
    kind: str
    pod: dict[str, Any]
    before_labels: dict[str, str] | None


def parse_selector(text: str) -> dict[str, str]:
    """Equality selectors only (``a=b,c=d``): what the tests use."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    return {key.strip(): value.strip() for key, value in pairs}


def matches(selector: dict[str, str], labels: dict[str, str] | None) -> bool:
    return labels is not None and all(labels.get(k) == v for k, v in selector.items())


class ScriptedApiServer:
    """The API server; ``await start()``, change pods with the methods below, ``await stop()``."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.version = 100
        self.compacted = 0
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[Event] = []
        self.watchers: list[Watcher] = []
        #: (verb, query) of every pod request, for assertions.
        self.requests: list[tuple[str, dict[str, str]]] = []
        #: Send every watch line in two pieces (clients must reassemble lines across chunks).
        self.split_lines = True
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, directory: Path, namespace: str = "inference") -> Path:
        """A kubeconfig file pointing at this server, with a token and a default namespace."""
        path = directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "scripted", "cluster": {"server": self.url}}],
                    "users": [{"name": "router", "user": {"token": TOKEN}}],
                    "contexts": [
                        {
                            "name": "scripted",
                            "context": {
                                "cluster": "scripted",
                                "user": "router",
                                "namespace": namespace,
                            },
                        }
                    ],
                    "current-context": "scripted",
                }
            )
        )
        return path

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> ScriptedApiServer:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._pods)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def restart(self, down_s: float = 0.3) -> None:
        """Go away (every connection cut, connections refused) and come back on the same port."""
        await self.stop()
        await asyncio.sleep(down_s)
        await self.start()

    def drop_watches(self) -> None:
        """Cut every open watch connection (no clean end of the chunked stream)."""
        for watcher in list(self.watchers):
            if watcher.transport is not None:
                watcher.transport.abort()
            watcher.queue.put_nowait(None)

    def compact(self) -> None:
        """Forget the history: a watch from any version seen so far gets 410 Gone."""
        self.version += 1
        self.compacted = self.version
        self.history.clear()

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current version to every watch that asked for them."""
        for watcher in self.watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(_bookmark(self.version))

    # -- pods ------------------------------------------------------------------------------------

    def add_pod(
        self,
        name: str,
        *,
        port: int | None = None,
        ip: str = "127.0.0.1",
        ready: bool = True,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        namespace: str = "inference",
    ) -> dict[str, Any]:
        notes = dict(annotations or {})
        if port is not None:
            notes["turnout.io/port"] = str(port)
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "labels": dict(labels or {"app": "sglang"}),
                "annotations": notes,
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:latest"}]},
            "status": {"phase": "Pending", "podIP": ip},
        }
        self._set_ready(pod, ready)
        self._record("ADDED", pod, None)
        return pod

    def set_ready(self, name: str, ready: bool, namespace: str = "inference") -> None:
        pod = self.pods[(namespace, name)]
        self._set_ready(pod, ready)
        self._record("MODIFIED", pod, pod["metadata"]["labels"])

    def relabel(self, name: str, labels: dict[str, str], namespace: str = "inference") -> None:
        pod = self.pods[(namespace, name)]
        before = dict(pod["metadata"]["labels"])
        pod["metadata"]["labels"] = dict(labels)
        self._record("MODIFIED", pod, before)

    def annotate(self, name: str, key: str, value: str, namespace: str = "inference") -> None:
        pod = self.pods[(namespace, name)]
        pod["metadata"]["annotations"][key] = value
        self._record("MODIFIED", pod, pod["metadata"]["labels"])

    def start_deleting(self, name: str, namespace: str = "inference") -> None:
        """``kubectl delete``: the pod gets a deletionTimestamp and stays while it terminates."""
        pod = self.pods[(namespace, name)]
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
        self._set_ready(pod, False)
        self._record("MODIFIED", pod, pod["metadata"]["labels"])

    def delete_pod(self, name: str, namespace: str = "inference") -> None:
        pod = self.pods[(namespace, name)]
        self._record("DELETED", pod, pod["metadata"]["labels"])

    def delete_silently(self, name: str, namespace: str = "inference") -> None:
        """Remove a pod without any watch event (a missed event; only a re-list sees it)."""
        del self.pods[(namespace, name)]
        self.version += 1

    @staticmethod
    def _set_ready(pod: dict[str, Any], ready: bool) -> None:
        status = pod["status"]
        status["phase"] = "Running" if ready or status["phase"] == "Running" else "Pending"
        status["conditions"] = [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]

    def _record(self, kind: str, pod: dict[str, Any], before: dict[str, str] | None) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        event = Event(self.version, kind, json.loads(json.dumps(pod)), before)
        self.history.append(event)
        for watcher in self.watchers:
            line = _for_watcher(watcher, event)
            if line is not None:
                watcher.queue.put_nowait(line)

    # -- HTTP ------------------------------------------------------------------------------------

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        query = dict(request.query)
        namespace = request.match_info["namespace"]
        watching = _flag(query.get("watch"))
        self.requests.append(("watch" if watching else "list", query))
        selector = parse_selector(query.get("labelSelector", ""))
        if not watching:
            items = [
                {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}
                for (ns, _), pod in sorted(self.pods.items())
                if ns == namespace and matches(selector, pod["metadata"]["labels"])
            ]
            body = {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }
            return web.json_response(body)
        return await self._watch(request, namespace, selector, query)

    async def _watch(
        self,
        request: web.Request,
        namespace: str,
        selector: dict[str, str],
        query: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        since = int(query.get("resourceVersion") or self.version)
        watcher = Watcher(namespace, selector, _flag(query.get("allowWatchBookmarks")))
        watcher.transport = request.transport  # type: ignore[assignment]
        if since < self.compacted:
            gone = {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.compacted})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
            await self._send(response, gone)
            await response.write_eof()
            return response
        for event in self.history:
            if event.version > since:
                line = _for_watcher(watcher, event)
                if line is not None:
                    watcher.queue.put_nowait(line)
        self.watchers.append(watcher)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    async with asyncio.timeout(left):
                        line = await watcher.queue.get()
                except TimeoutError:
                    break
                if line is None:
                    return response
                await self._send(response, line)
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.watchers.remove(watcher)
        return response

    async def _send(self, response: web.StreamResponse, event: dict[str, Any]) -> None:
        data = (json.dumps(event) + "\n").encode()
        if self.split_lines and len(data) > 8:
            half = len(data) // 2
            await response.write(data[:half])
            await asyncio.sleep(0)
            await response.write(data[half:])
        else:
            await response.write(data)


def _for_watcher(watcher: Watcher, event: Event) -> dict[str, Any] | None:
    pod = event.pod
    if pod["metadata"]["namespace"] != watcher.namespace:
        return None
    now = matches(watcher.selector, pod["metadata"]["labels"])
    before = matches(watcher.selector, event.before_labels)
    kind = event.kind
    if kind == "MODIFIED":
        if now and not before:
            kind = "ADDED"
        elif before and not now:
            kind = "DELETED"
        elif not now:
            return None
    elif (kind == "ADDED" and not now) or (kind == "DELETED" and not before):
        return None
    return {"type": kind, "object": pod}


def _flag(value: str | None) -> bool:
    """A boolean query parameter as the API server parses it (Go's strconv.ParseBool)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _bookmark(version: int) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(version)},
        },
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)
