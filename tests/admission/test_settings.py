"""The ``admission`` section's checks, and how a request's class is chosen (header, cap)."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.admission.classes import ClassTable
from turnout.admission.refusals import InvalidPriority
from turnout.admission.settings import AdmissionSettings
from turnout.config import build_config
from turnout.errors import ConfigError


def config(admission: dict[str, Any], tenants: dict[str, Any] | None = None) -> None:
    build_config({"admission": admission, "tenants": tenants or {}})


@pytest.mark.parametrize(
    ("admission", "tenants", "problem"),
    [
        ({"default_class": "urgent"}, None, "admission.default_class: 'urgent' is not a class"),
        ({"max_class": "top"}, None, "admission.max_class: 'top' is not a class"),
        (
            {"classes": [{"name": "a", "share": 0.7}, {"name": "b", "share": 0.6}]},
            None,
            "the shares add up to 1.3",
        ),
        (
            {"classes": [{"name": "default"}, {"name": "default"}], "max_class": "default"},
            None,
            "['default'] listed more than once",
        ),
        ({}, {"t": {"keys": ["k"], "max_class": "vip"}}, "tenants.t.max_class: 'vip'"),
    ],
)
def test_bad_sections_are_refused(
    admission: dict[str, Any], tenants: dict[str, Any] | None, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        config(admission, tenants)


def test_a_class_is_capped_by_the_tenant_and_the_section() -> None:
    table = ClassTable(AdmissionSettings())
    assert table.resolve(None, None) == 2  # default
    assert table.resolve(b"Bulk", None) == 3
    assert table.resolve(b"system", None) == 1  # above the section's cap: interactive
    assert table.resolve(b"system", "system") == 0
    assert table.resolve(b"interactive", "bulk") == 3
    assert table.resolve(None, "bulk") == 3
    with pytest.raises(InvalidPriority):
        table.resolve(b"urgent", None)
