"""Load the gpt-oss harmony encoding without network access."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from turnout.plugins.harmony.vocab import HarmonyUnavailable, o200k_vocab_dir

if TYPE_CHECKING:
    from openai_harmony import HarmonyEncoding

__all__ = ["load_gpt_oss_encoding"]

_ENV_LOCK = threading.Lock()


@functools.cache
def load_gpt_oss_encoding(vocab_dir: Path | None = None) -> HarmonyEncoding:
    """The ``HARMONY_GPT_OSS`` encoding (an ``openai_harmony.HarmonyEncoding``), built from the
    vocabulary :func:`o200k_vocab_dir` provides; loaded once per process (about 2 s)."""
    try:
        import openai_harmony
    except ImportError:
        raise HarmonyUnavailable(
            "gpt-oss rendering needs openai-harmony: pip install 'turnout[harmony]'"
        ) from None
    directory = str(o200k_vocab_dir(vocab_dir))
    with _ENV_LOCK:  # openai-harmony reads the variable while it loads
        previous = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = directory
        try:
            return openai_harmony.load_harmony_encoding(
                openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS
            )
        except openai_harmony.HarmonyError as exc:
            raise HarmonyUnavailable(f"openai-harmony cannot load gpt-oss: {exc}") from None
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_ENCODINGS_BASE", None)
            else:
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = previous
