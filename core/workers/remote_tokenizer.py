"""A model's tokenizer from its workers (``GetTokenizer``), for a router without its files.

When a model has no tokenizer directory on the router's host (none configured, and the path
its workers report is not a directory here), the router asks a worker of the model for its
tokenizer files: a zip whose SHA-256 the wire client checks. The archive is unpacked once
under the user's cache directory, keyed by that digest (``$TURNOUT_TOKENIZER_CACHE``, else
``$XDG_CACHE_HOME/turnout/tokenizers``, else ``~/.cache/turnout/tokenizers``), so processes,
restarts and workers with the same files share one copy.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from turnout.errors import ApiError
from turnout.wire import TokenizerBundle, WorkerCallError
from turnout.workers.operations import client_of
from turnout.workers.registry import WorkerRegistry

__all__ = ["RemoteTokenizers", "tokenizer_cache_dir", "unpack_bundle"]

log = logging.getLogger(__name__)

#: Deadline of one GetTokenizer call.
FETCH_TIMEOUT_S: Final = 30.0
#: Bound of the unpacked files (a zip may claim to expand to anything).
MAX_UNPACKED_BYTES: Final = 1024 * 1024 * 1024
#: What a member of the archive may be called: a plain file name, nothing with a directory.
_MEMBER: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
_COMPLETE: Final = ".complete"


def tokenizer_cache_dir() -> Path:
    """Where fetched tokenizers are kept."""
    explicit = os.environ.get("TURNOUT_TOKENIZER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "turnout" / "tokenizers"


def unpack_bundle(bundle: TokenizerBundle, cache_dir: Path) -> Path:
    """The directory holding ``bundle``'s files under ``cache_dir`` (unpacked on first use);
    ``ValueError`` for an archive that is not a flat zip of files within the size bound."""
    target = cache_dir / bundle.sha256
    if (target / _COMPLETE).is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir))
    try:
        _extract(bundle.data, staging)
        (staging / _COMPLETE).write_text(bundle.sha256)
        try:
            staging.rename(target)
        except OSError:
            if not (target / _COMPLETE).is_file():  # not a concurrent unpack of the same files
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract(data: bytes, into: Path) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not a zip archive: {exc}") from None
    with archive:
        members = archive.infolist()
        total = sum(m.file_size for m in members)
        if total > MAX_UNPACKED_BYTES:
            raise ValueError(f"the archive expands to {total} bytes (bound {MAX_UNPACKED_BYTES})")
        for member in members:
            if member.is_dir() or not _MEMBER.match(member.filename):
                raise ValueError(f"unexpected archive member {member.filename[:80]!r}")
            with archive.open(member) as source, (into / member.filename).open("wb") as out:
                remaining = member.file_size + 1
                while chunk := source.read(min(1 << 20, remaining)):
                    remaining -= len(chunk)
                    if remaining <= 0:
                        raise ValueError(f"{member.filename} is larger than the archive says")
                    out.write(chunk)
    if not (into / "tokenizer.json").is_file() and not (into / "tokenizer_config.json").is_file():
        raise ValueError("the archive holds no tokenizer.json or tokenizer_config.json")


class RemoteTokenizers:
    """Fetches a model's tokenizer from its workers into the on-disk cache."""

    def __init__(self, registry: WorkerRegistry, cache_dir: Path | None = None) -> None:
        self.registry = registry
        self.cache_dir = cache_dir

    async def fetch(self, model_id: str) -> Path:
        """The local directory of ``model_id``'s tokenizer, fetched from one of its workers;
        ``ApiError`` 503 naming the model and the fix when none can send it."""
        workers = sorted(self.registry.workers_for(model_id), key=lambda w: not w.routable)
        problems: list[str] = []
        cache_dir = self.cache_dir or tokenizer_cache_dir()
        for worker in workers:
            client = client_of(worker)
            if client is None:
                continue
            try:
                bundle = await client.get_tokenizer(timeout_s=FETCH_TIMEOUT_S)
                directory = await asyncio.to_thread(unpack_bundle, bundle, cache_dir)
            except WorkerCallError as exc:
                problems.append(f"worker {worker.id}: {exc.code.name}: {exc.message}")
                continue
            except (OSError, ValueError) as exc:
                problems.append(f"worker {worker.id}: {exc}")
                continue
            log.info(
                "model %r: tokenizer fetched from worker %s (sha256 %s) into %s",
                model_id,
                worker.id,
                bundle.sha256[:12],
                directory,
            )
            return directory
        reason = "; ".join(problems) or "it has no reachable worker"
        raise ApiError(
            503,
            f"no tokenizer for model {model_id!r}: it has no local model directory and its "
            f"workers could not send theirs (GetTokenizer: {reason}); set "
            f"models.{model_id}.tokenizer_path (or --model-path) to a local copy of the model "
            "directory",
            code="tokenizer_unavailable",
        )
