"""The simulated worker's ``GetTokenizer`` archive: the model directory's tokenizer files.

A zip of the files a router needs to tokenize and render chat for the model (tokenizer, its
config with the chat template, the model config, generation defaults, ``*.jinja`` templates),
served in 64 KiB chunks with the archive's SHA-256 on the last chunk, as SGLang's servicer does.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["CHUNK_BYTES", "TokenizerArchive", "build_archive"]

CHUNK_BYTES: Final = 64 * 1024
_NAMED: Final = (
    "tokenizer.json",
    "tokenizer_config.json",
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "tiktoken.model",
    "chat_template.json",
    "preprocessor_config.json",
)
_PATTERNS: Final = ("*.jinja", "*.tiktoken", "*.model")


@dataclass(frozen=True, slots=True)
class TokenizerArchive:
    """A zip of tokenizer files and its hex SHA-256."""

    data: bytes
    sha256: str
    names: tuple[str, ...]

    def chunks(self) -> Iterator[tuple[bytes, str]]:
        """(data, sha256) pieces: the digest only on the last one."""
        size = len(self.data)
        for start in range(0, size, CHUNK_BYTES):
            end = min(start + CHUNK_BYTES, size)
            yield self.data[start:end], self.sha256 if end == size else ""


def build_archive(directory: Path) -> TokenizerArchive:
    """Zip the tokenizer files of ``directory``; ``FileNotFoundError`` when it has none."""
    files: dict[str, Path] = {}
    for name in _NAMED:
        if (directory / name).is_file():
            files[name] = directory / name
    for pattern in _PATTERNS:
        for path in sorted(directory.glob(pattern)):
            if path.is_file():
                files.setdefault(path.name, path)
    if not files:
        raise FileNotFoundError(f"no tokenizer files in {directory}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            # A fixed timestamp: the same files make the same archive (and SHA-256).
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    return TokenizerArchive(data, hashlib.sha256(data).hexdigest(), tuple(files))
