"""Fixtures for the tool-parser tests (the shared helpers live in ``harness.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnout.tool_calls.types import ToolParser

from .harness import make_parser, tools_for


@pytest.fixture
def new_parser() -> Callable[[str], ToolParser]:
    """Factory: a fresh parser instance by registered name (through the plugin registry)."""
    return make_parser


@pytest.fixture
def weather_tools() -> list[dict[str, object]]:
    """Two offered functions, ``get_weather`` and ``search``."""
    return tools_for(["get_weather", "search"])
