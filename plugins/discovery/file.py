"""``file`` discovery: workers listed in a YAML or JSON file, re-read when it changes.

For Consul-template, Nomad templates, systemd units, a configuration manager, or tests: whatever
writes the file decides the fleet. The file is polled (its modification time, size and inode
every ``poll_interval_s``; its content hashed when those change, and every
``reread_interval_s`` regardless, which catches a rewrite that kept both). Each new content is
one :class:`~turnout.discovery.Snapshot`. A missing, unreadable or invalid file changes nothing:
the workers of the last good read stay (an invalid content is logged once, and a missing or
unreadable file once per change of state, not at every poll).

```yaml
workers:                       # or the list alone at the top level
  - url: grpc://10.0.0.5:30000
    model: qwen3-32b           # optional: else the worker is asked (GetModelInfo)
    id: qwen-0                 # optional worker id (default host:port); also the entry's key
    labels: {zone: a}
    draining: true             # optional: no new requests, in-flight ones finish
  - grpc://10.0.0.6:30000      # a URL alone
```
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml

from turnout.discovery.types import DiscoveredWorker, Role, Snapshot, WorkerChange

log = logging.getLogger(__name__)

_Interval = Annotated[float, msgspec.Meta(gt=0)]


class FileOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Options of a ``file`` discovery entry."""

    path: str
    poll_interval_s: _Interval = 1.0
    reread_interval_s: _Interval = 30.0


class FileWorker(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One worker entry of the file."""

    url: str
    model: str | None = None
    id: str | None = None
    role: Role = Role.REGULAR
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    bootstrap_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    draining: bool = False


def parse_workers(text: bytes, suffix: str) -> Snapshot:
    """The snapshot a file's content describes; raises ``ValueError`` saying what is wrong."""
    try:
        data: Any = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"not valid {'JSON' if suffix == '.json' else 'YAML'}: {exc}") from None
    if data is None:
        data = []
    if isinstance(data, dict):
        if set(data) - {"workers"}:
            raise ValueError("the top level may only have the key 'workers'")
        data = data.get("workers") or []
    if not isinstance(data, list):
        raise ValueError("expected a list of workers (or a mapping with 'workers')")
    entries = [{"url": item} if isinstance(item, str) else item for item in data]
    try:
        workers = msgspec.convert(entries, list[FileWorker], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc).replace("`$[", "`workers[", 1)) from None
    up: list[DiscoveredWorker] = []
    draining: set[str] = set()
    seen: set[str] = set()
    for index, entry in enumerate(workers):
        key = entry.id or entry.url
        if key in seen:
            raise ValueError(f"workers[{index}]: {key!r} is listed twice")
        seen.add(key)
        if entry.draining:
            draining.add(key)
            continue
        up.append(
            DiscoveredWorker(
                key=key,
                url=entry.url,
                model=entry.model,
                role=entry.role,
                name=entry.id,
                labels=entry.labels,
                bootstrap_port=entry.bootstrap_port,
            )
        )
    return Snapshot(tuple(up), frozenset(draining))


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class FileProvider:
    """The ``file`` discovery provider (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        try:
            self.options = msgspec.convert(options, FileOptions)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None
        self.path = Path(os.path.expanduser(self.options.path))

    def describe(self) -> str:
        """One line for ``turnout check``."""
        return f"workers from {self.path} (checked every {self.options.poll_interval_s:g}s)"

    async def watch(self) -> AsyncIterator[WorkerChange]:
        """A snapshot for every new content of the file, for as long as it runs."""
        options = self.options
        signature: tuple[int, int, int] | None = None
        digest: bytes | None = None
        read_at = float("-inf")
        #: The problem logged last (missing, unreadable): logged again only when it changes.
        trouble: str | None = None
        while True:
            current = await asyncio.to_thread(_signature, self.path)
            now = time.monotonic()
            if current is None:
                problem: str | None = "is missing"
            elif current != signature or now - read_at >= options.reread_interval_s:
                signature, read_at = current, now
                try:
                    content = await asyncio.to_thread(self.path.read_bytes)
                except OSError as exc:
                    # Not an empty file: the workers of the last good read stay. Tried again
                    # at the next poll (a chmod changes none of the signature's fields).
                    problem = f"cannot be read ({exc.strerror or exc})"
                    signature = None
                else:
                    problem = None
                    new_digest = hashlib.sha256(content).digest()
                    if new_digest != digest:
                        digest = new_digest
                        try:
                            snapshot = parse_workers(content, self.path.suffix.lower())
                        except ValueError as exc:
                            log.error("%s: %s; the workers stay as they are", self.path, exc)
                        else:
                            yield snapshot
            else:
                problem = None
            if problem != trouble and problem is not None:
                log.warning("%s %s; the workers stay as they are", self.path, problem)
            trouble = problem
            await asyncio.sleep(options.poll_interval_s)
