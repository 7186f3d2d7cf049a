"""The plugin kinds table: every registration hook has its row, and a row is all a kind needs."""

from __future__ import annotations

import inspect

import pytest

import turnout
from turnout import hookspecs, plugin_loader, plugin_report
from turnout.errors import PluginError
from turnout.plugin_kinds import PLUGIN_KINDS, POLICIES, TOOL_PARSERS, PluginKind
from turnout.plugin_report import plugins_report, render_plugins_report


def test_every_registration_hook_has_exactly_one_row() -> None:
    specs = {
        name
        for name, obj in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("turnout_register_")
    }
    hooks = [kind.hook for kind in PLUGIN_KINDS]
    assert sorted(hooks) == sorted(specs)
    keys = [kind.key for kind in PLUGIN_KINDS]
    assert len(set(keys)) == len(keys)
    assert all(kind.hook == f"turnout_register_{kind.key}" for kind in PLUGIN_KINDS)


def test_typed_access_and_attributes_are_the_same_registries() -> None:
    plugins = turnout.load_plugins()
    assert plugins[TOOL_PARSERS] is plugins.tool_parsers is plugins.registry("tool_parsers")
    assert plugins[POLICIES] is plugins.policies
    assert {kind.key for kind in PLUGIN_KINDS} == set(plugins.registries)


class Widget:
    """What the new kind's factories make."""


@hookspecs.hookspec
def turnout_register_widgets(register: hookspecs.Register) -> None:
    """Register widgets (a kind that exists only in this test)."""


class WidgetPlugin:
    @turnout.hookimpl
    def turnout_register_widgets(self, register: hookspecs.Register) -> None:
        register("round", Widget, aliases=["circle"], description="a round widget")


def test_a_new_kind_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    widgets: PluginKind[Widget] = PluginKind("widgets", "turnout_register_widgets", "widget")
    monkeypatch.setattr(hookspecs, "turnout_register_widgets", turnout_register_widgets, False)
    kinds = (*PLUGIN_KINDS, widgets)
    monkeypatch.setattr(plugin_loader, "PLUGIN_KINDS", kinds)
    monkeypatch.setattr(plugin_report, "PLUGIN_KINDS", kinds)

    plugins = plugin_loader.load_plugins(extra=[(WidgetPlugin(), "turnout-widgets", "1.0")])

    assert isinstance(plugins[widgets].create("circle"), Widget)
    with pytest.raises(PluginError, match="unknown widget 'square'; valid names: round"):
        plugins[widgets].get("square")
    report = plugins_report(plugins)
    (entry,) = [p for p in report["plugins"] if p["distribution"] == "turnout-widgets"]
    assert [w["name"] for w in entry["widgets"]] == ["round"]
    assert "  widget           round  (aliases: circle)" in render_plugins_report(report)
