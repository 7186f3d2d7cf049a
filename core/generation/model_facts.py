"""What a model's ``config.json`` says about it beyond its tokenizer: the width of its hidden
states and of its vocabulary, whether its embeddings may be shortened (Matryoshka), whether it
sees images.

The router reads these from the model directory it tokenizes with, as SGLang reads them from
the model it serves: ``hidden_size`` and ``vocab_size`` (or ``text_config``'s for multimodal
models), ``is_matryoshka`` / ``matryoshka_dimensions`` (SGLang's and vLLM's keys; an operator
may add them to ``config.json`` for a model trained that way), a ``vision_config`` section (what
makes SGLang report ``supports_vision``), and ``model_type`` / ``image_token_id`` for the image
preprocessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnout.tokenizer.model_dir import read_json

__all__ = ["ModelFacts", "read_model_facts"]


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """A model's ``config.json``, as far as the router needs it."""

    #: Width of the hidden states (the embedding size of an embedding model); None: unknown.
    hidden_size: int | None = None
    #: Its embeddings keep their meaning when shortened (Matryoshka representation learning).
    matryoshka: bool = False
    #: The only lengths they may be shortened to (empty: any up to ``hidden_size``).
    matryoshka_dimensions: tuple[int, ...] = ()
    #: The config has a ``vision_config``: the model takes images.
    vision: bool = False
    model_type: str = ""
    #: The token that stands for image patches in the prompt (``image_token_id``).
    image_token_id: int | None = None
    #: Rows of the model's output layer (``vocab_size``: may exceed the tokenizer's, padded).
    vocab_size: int | None = None


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _sections(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The config and the text model's section of a multimodal one."""
    found = [config]
    for key in ("text_config", "llm_config"):
        section = config.get(key)
        if isinstance(section, Mapping):
            found.append(section)
    return found


def facts_from_config(config: Mapping[str, Any]) -> ModelFacts:
    """The facts of a parsed ``config.json``."""
    sections = _sections(config)
    hidden = next(
        (size for s in sections if (size := _positive_int(s.get("hidden_size"))) is not None),
        None,
    )
    raw_dims = config.get("matryoshka_dimensions")
    dims = (
        tuple(sorted({d for d in raw_dims if _positive_int(d) is not None}))
        if isinstance(raw_dims, list)
        else ()
    )
    matryoshka = config.get("is_matryoshka") is True or isinstance(raw_dims, list)
    token = next(
        (t for s in sections if (t := _positive_int(s.get("image_token_id"))) is not None), None
    )
    return ModelFacts(
        hidden_size=hidden,
        matryoshka=matryoshka,
        matryoshka_dimensions=dims,
        vision=isinstance(config.get("vision_config"), Mapping),
        model_type=str(config.get("model_type") or ""),
        image_token_id=token,
        vocab_size=next(
            (size for s in sections if (size := _positive_int(s.get("vocab_size"))) is not None),
            None,
        ),
    )


def read_model_facts(directory: Path) -> ModelFacts:
    """The facts of the model directory ``directory`` (defaults without a ``config.json``)."""
    config = read_json(directory / "config.json", required=False)
    return facts_from_config(config or {})
