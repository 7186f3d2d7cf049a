"""Which model a request means: ids, aliases, the default, and the errors that name the
served models."""

from __future__ import annotations

from typing import Any

import pytest

import turnout
from turnout.config import build_config
from turnout.errors import ApiError
from turnout.generation.models import ModelTable


def _table(served: list[str], **config: Any) -> ModelTable:
    return ModelTable(build_config(config), turnout.load_plugins(), lambda: list(served))


def _error(table: ModelTable, requested: str | None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        table.resolve_name(requested)
    return caught.value


def test_a_served_name_or_alias_is_the_model() -> None:
    table = _table(["b", "a"], models={"a": {"aliases": ["alias-a"]}})
    assert table.resolve_name("b") == "b"
    assert table.resolve_name("alias-a") == "a"


def test_without_a_name_the_default_or_the_only_model() -> None:
    assert _table(["a", "b"], defaults={"model": "b"}).resolve_name(None) == "b"
    assert _table(["a"]).resolve_name("") == "a"
    error = _error(_table(["b", "a"]), None)
    assert error.status == 400
    assert "this router serves a, b" in error.message
    assert _error(_table([]), None).status == 503


def test_an_unknown_name_is_a_404_listing_the_served_models_sorted() -> None:
    error = _error(_table(["b", "a", "a"]), "c")
    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
    assert error.message == "model 'c' is not served here; served models: a, b"
    assert _error(_table([], defaults={"model": "gone"}), None).message.endswith(": none")
