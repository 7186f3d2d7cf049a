"""Discovery providers as the fourth plugin kind: entry points, reports, config and ``check``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

import turnout
from turnout.cli import main
from turnout.config import DiscoveryConfig, build_config
from turnout.discovery import describe_discovery
from turnout.errors import ConfigError, PluginError
from turnout.plugin_loader import load_plugins
from turnout.plugin_report import plugins_report, render_plugins_report
from turnout.plugins.discovery import BUILTIN_DISCOVERY

from ..plugin_fixtures import make_distribution

PROVIDER_PLUGIN = """
from turnout import hookimpl

class Consul:
    def __init__(self, **options):
        self.options = options

    async def watch(self):
        return
        yield

@hookimpl
def turnout_register_discovery(register):
    register("{name}", Consul, aliases=["{alias}"], description="consul catalog")
"""


def test_builtins_come_through_turnouts_own_entry_points() -> None:
    registry = turnout.load_plugins().discovery
    assert registry.names() == sorted(row[0] for row in BUILTIN_DISCOVERY)
    assert registry.get("k8s").name == "kubernetes"
    assert registry.get("file").distribution == "turnout"
    for name in registry.names():
        registry.factory(name)  # every lazy path imports (kubernetes without its extra too)


def test_a_third_party_provider_is_found_reported_and_created(site: Path) -> None:
    make_distribution(
        site, "turnout-consul", "turnout_consul", PROVIDER_PLUGIN.format(name="consul", alias="c")
    )
    plugins = load_plugins()
    registration = plugins.discovery.get("c")
    assert (registration.name, registration.distribution) == ("consul", "turnout-consul")
    provider = plugins.discovery.create("consul", service="sglang")
    assert provider.options == {"service": "sglang"}  # type: ignore[attr-defined]
    report = plugins_report(plugins)
    consul = next(p for p in report["plugins"] if p["distribution"] == "turnout-consul")
    assert consul["discovery"][0]["name"] == "consul"
    builtin = next(p for p in report["plugins"] if p["distribution"] == "turnout")
    assert {d["name"] for d in builtin["discovery"]} == {"file", "kubernetes"}
    text = render_plugins_report(report)
    assert "discovery        consul  (aliases: c)" in text
    assert "discovery        kubernetes  (aliases: k8s)" in text


def test_a_name_taken_twice_is_an_error_naming_both(site: Path) -> None:
    make_distribution(
        site, "turnout-k", "turnout_k", PROVIDER_PLUGIN.format(name="mine", alias="file")
    )
    with pytest.raises(PluginError, match=r"discovery provider name 'file' is registered twice"):
        load_plugins()


def test_the_config_takes_a_discovery_list_beside_static_workers() -> None:
    config = build_config(
        {
            "workers": [{"url": "grpc://10.0.0.1:30000"}],
            "discovery": [
                {"provider": "consul", "options": {"namespace": "inference"}},
                {"provider": "file", "options": {"path": "/etc/turnout/workers.yaml"}},
            ],
        }
    )
    assert config.discovery[0] == DiscoveryConfig("consul", {"namespace": "inference"})
    assert config.discovery[1].provider == "file"
    assert len(config.workers) == 1
    with pytest.raises(ConfigError, match=r"discovery\[0\]: unknown key 'path'"):
        build_config({"discovery": [{"provider": "file", "path": "x"}]})


def test_check_shows_each_discovery_entry_and_rejects_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "turnout.yaml"
    entries = [{"provider": "file", "options": {"path": "/srv/workers.yaml"}}]
    config.write_text(yaml.safe_dump({"discovery": entries}))
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "discovery[0] (file): workers from /srv/workers.yaml (checked every 1s)" in out
    entries.append({"provider": "file", "options": {"path": "x", "poll_interval_s": -1}})
    config.write_text(yaml.safe_dump({"discovery": entries}))
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "discovery[1] (file): invalid options:" in err
    assert "poll_interval_s" in err


def test_kubernetes_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio", None)  # as if not installed
    entry = DiscoveryConfig("kubernetes", {"selector": "app=sglang"})
    wanted = r"discovery\[0\] \(kubernetes\): .*pip install 'turnout\[kubernetes\]'"
    with pytest.raises(PluginError, match=wanted):
        describe_discovery([entry], load_plugins().discovery)
