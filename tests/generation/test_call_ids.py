"""Tool-call ids: their shape per style, unique, and made without a system call."""

from __future__ import annotations

import re
import secrets

import pytest

from turnout.generation.choice import CallIds


def test_openai_style_ids_are_unique_and_shaped_like_openai_ids() -> None:
    ids = {CallIds("openai").make(0, "f") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", call_id) for call_id in ids)


def test_openai_style_ids_need_no_system_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are made per call of every answer: ``secrets`` reads the OS's randomness (a system
    call each); unique ids need none of it."""

    def refuse(*_args: object) -> str:
        raise AssertionError("secrets used for an OpenAI-style call id")

    monkeypatch.setattr(secrets, "token_hex", refuse)
    assert CallIds("openai").make(0, "f").startswith("call_")


def test_kimi_style_ids_count_from_the_history() -> None:
    assert CallIds("kimi", history_calls=2).make(1, "get_weather") == "functions.get_weather:3"
