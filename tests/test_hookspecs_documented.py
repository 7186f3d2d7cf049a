"""Every hook is documented, in its spec and in docs/plugins.md: parameters, when it is called,
and since which version (a new hook without docs fails here)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import turnout
from turnout import hookspecs
from turnout.plugin_loader import load_plugins

from .conftest import REPO_ROOT

PLUGINS_DOC = (REPO_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")


def _hookspecs() -> dict[str, Callable[..., Any]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: function
        for name, function in vars(hookspecs).items()
        if inspect.isfunction(function) and hasattr(function, marker)
    }


SPECS = _hookspecs()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _doc_section(name: str, parameters: list[str]) -> str:
    """The text under the hook's heading in docs/plugins.md (up to the next heading)."""
    heading = f"### `{name}({', '.join(parameters)})`"
    assert heading in PLUGINS_DOC, f"docs/plugins.md has no heading {heading!r}"
    section = PLUGINS_DOC.split(heading, 1)[1]
    return re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]


def test_the_specs_found_are_the_hooks_turnout_calls() -> None:
    """The docs tests below cover every hook: the four kinds are found, and each spec found is
    one that plugin loading really calls."""
    assert {
        "turnout_register_tool_parsers",
        "turnout_register_reasoning_parsers",
        "turnout_register_policies",
        "turnout_register_discovery",
    } <= set(SPECS)
    called: list[str] = []

    def recorder(name: str) -> Callable[[hookspecs.Register], None]:
        @hookspecs.hookimpl(specname=name)
        def impl(register: hookspecs.Register) -> None:
            called.append(name)

        return impl

    plugin = SimpleNamespace(**{name: recorder(name) for name in SPECS})
    load_plugins(allow=[], extra=[(plugin, "recorder", "1.0")])
    assert sorted(called) == sorted(SPECS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hookspec_docstring_has_parameters_when_and_since(name: str) -> None:
    spec = SPECS[name]
    doc = inspect.getdoc(spec) or ""
    summary = doc.split("\n", 1)[0]
    assert summary.endswith("."), f"{name}: no one-line summary"
    for parameter in inspect.signature(spec).parameters:
        assert f":param {parameter}:" in doc, f"{name}: parameter {parameter!r} undocumented"
    assert re.search(r"^Called once per process", doc, re.MULTILINE), f"{name}: when is it called?"
    since = re.search(r"^\.\. versionadded:: (\d+(?:\.\d+)+)$", doc, re.MULTILINE)
    assert since, f"{name}: no '.. versionadded::'"
    assert _version(since.group(1)) <= _version(turnout.__version__)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_has_a_section_in_the_plugin_docs(name: str) -> None:
    spec = SPECS[name]
    section = _doc_section(name, list(inspect.signature(spec).parameters))
    for label in ("**Parameters:**", "**Called:**", "**Since:**"):
        assert label in section, f"docs/plugins.md, {name}: no {label}"
    doc = inspect.getdoc(spec) or ""
    since = re.search(r"versionadded:: (\S+)", doc)
    assert since is not None
    assert f"**Since:** {since.group(1)}\n" in section, (
        f"docs/plugins.md, {name}: 'Since' differs from the spec's versionadded"
    )
