"""The plugin system: entry-point discovery, registries, and the errors a user can act on."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import turnout
from turnout.errors import PluginError
from turnout.plugin_loader import PluginImportWarning, load_plugins
from turnout.plugins.tool_parsers import BUILTIN_TOOL_PARSERS

from .plugin_fixtures import make_distribution

PARSER_PLUGIN = """
from turnout import hookimpl

class Echo:
    call_id_style = "openai"
    needs_special_tokens = False

@hookimpl
def turnout_register_tool_parsers(register):
    register("{name}", Echo, models=["{pattern}"], aliases=["{alias}"])
"""


def test_builtins_come_through_turnouts_own_entry_points() -> None:
    plugins = turnout.load_plugins()
    assert {p.distribution for p in plugins.loaded} >= {"turnout"}
    assert set(plugins.tool_parsers.names()) == {row[0] for row in BUILTIN_TOOL_PARSERS}
    assert {"random", "round_robin"} <= set(plugins.policies.names())
    registration = plugins.policies.get("round_robin")
    assert registration.distribution == "turnout"
    assert registration.version == turnout.__version__


def test_create_returns_fresh_instances_by_name_or_alias() -> None:
    policies = turnout.load_plugins().policies
    first = policies.create("round_robin")
    second = policies.create("ROUNDROBIN")
    assert type(first) is type(second)
    assert first is not second


def test_for_model_prefers_the_longest_matching_pattern() -> None:
    parsers = turnout.load_plugins().tool_parsers
    assert parsers.for_model("Qwen/Qwen2.5-7B-Instruct") == "qwen"
    assert parsers.for_model("Qwen/Qwen3-Coder-30B-A3B-Instruct") == "qwen3_coder"
    assert parsers.for_model("deepseek-ai/DeepSeek-V3.2-Exp") == "deepseek_v31"
    assert parsers.for_model("deepseek-ai/DeepSeek-V3.2") == "deepseek_v32"
    assert parsers.for_model("totally-unknown") is None


def test_third_party_distribution_is_discovered_and_attributed(site: Path) -> None:
    make_distribution(
        site,
        "turnout-echo",
        "turnout_echo",
        PARSER_PLUGIN.format(name="echo", pattern="echo-*", alias="echo2"),
        version="2.5",
    )
    plugins = load_plugins()
    registration = plugins.tool_parsers.get("echo2")
    assert (registration.name, registration.distribution, registration.version) == (
        "echo",
        "turnout-echo",
        "2.5",
    )
    assert plugins.tool_parsers.for_model("ECHO-7b") == "echo"


def test_two_distributions_registering_one_name_is_an_error_naming_both(site: Path) -> None:
    for dist, module in (("turnout-a", "turnout_a"), ("turnout-b", "turnout_b")):
        source = PARSER_PLUGIN.format(name="clash", pattern="x*", alias=f"{module}_alias")
        make_distribution(site, dist, module, source)
    with pytest.raises(PluginError) as info:
        load_plugins()
    message = str(info.value)
    assert "'clash'" in message
    assert "turnout-a" in message
    assert "turnout-b" in message


def test_a_third_party_name_may_not_shadow_a_builtin(site: Path) -> None:
    make_distribution(
        site,
        "turnout-evil",
        "turnout_evil",
        PARSER_PLUGIN.format(name="mine", pattern="x", alias="hermes"),
    )
    with pytest.raises(PluginError) as info:
        load_plugins()
    message = str(info.value)
    assert "'hermes'" in message
    assert "turnout 0.1.0 (as 'qwen')" in message
    assert "turnout-evil 1.0 (as 'mine')" in message


def test_import_failure_warns_and_is_shown_when_its_name_is_needed(site: Path) -> None:
    make_distribution(site, "turnout-broken", "turnout_broken", "import no_such_module_xyz\n")
    with pytest.warns(PluginImportWarning, match="turnout-broken.*no_such_module_xyz"):
        plugins = load_plugins()
    assert "qwen" in plugins.tool_parsers  # the rest still loads
    with pytest.raises(PluginError) as info:
        plugins.tool_parsers.get("fancy")
    message = str(info.value)
    assert "unknown tool parser 'fancy'" in message
    assert "turnout-broken" in message
    assert "No module named 'no_such_module_xyz'" in message


def test_unknown_name_lists_valid_names_and_suggests_a_close_one() -> None:
    with pytest.raises(PluginError) as info:
        turnout.load_plugins().policies.get("round_robbin")
    message = str(info.value)
    assert "valid names: " in message
    assert "round_robin" in message
    assert "did you mean 'round_robin'?" in message
    assert "pip install" in message


def test_allow_list_restricts_which_distributions_load(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_distribution(
        site,
        "turnout-echo",
        "turnout_echo",
        PARSER_PLUGIN.format(name="echo", pattern="e", alias="e2"),
    )
    monkeypatch.setenv("TURNOUT_PLUGINS", "turnout-echo")
    plugins = load_plugins()
    assert plugins.tool_parsers.names() == ["echo"]
    assert plugins.policies.names() == []
    assert [p.distribution for p in plugins.loaded] == ["turnout-echo"]


def test_misspelled_hook_is_a_startup_error(site: Path) -> None:
    source = """
from turnout import hookimpl

@hookimpl
def turnout_register_tool_parser(register):
    pass
"""
    make_distribution(site, "turnout-typo", "turnout_typo", source)
    with pytest.raises(PluginError, match="turnout_register_tool_parser"):
        load_plugins()


def test_lazy_factory_is_imported_only_when_selected(site: Path) -> None:
    source = """
from turnout import hookimpl

@hookimpl
def turnout_register_policies(register):
    register("lazy", "turnout_lazy_impl:Policy")
"""
    make_distribution(site, "turnout-lazy", "turnout_lazy", source)
    (site / "turnout_lazy_impl.py").write_text(
        "import sys\nsys.modules['turnout_lazy_marker'] = sys\n"
        "class Policy:\n    def select(self, request, candidates):\n        return candidates[0]\n"
    )
    import sys

    plugins = load_plugins()
    assert "turnout_lazy_marker" not in sys.modules
    policy = plugins.policies.create("lazy")
    assert "turnout_lazy_marker" in sys.modules
    assert policy.select(None, ["a", "b"]) == "a"
    sys.modules.pop("turnout_lazy_marker")


def test_loading_plugins_emits_no_warning_for_a_clean_install() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        turnout.load_plugins()
