"""Config loading: YAML and TOML, env substitution, overrides, and errors naming key and value."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnout
from turnout.config import PolicyConfig, build_config, load_config
from turnout.errors import ConfigError, PluginError
from turnout.plugin_choice import choose_plugins, validate_plugin_names

YAML = """
server:
  port: 9100
  api_keys: ["${TURNOUT_TEST_KEY}"]
workers:
  - url: grpc://127.0.0.1:30001
    model: qwen-mini
models:
  qwen-mini:
    tool_parser: hermes
    policy: {name: random, params: {seed: 7}}
    aliases: [qm]
defaults:
  policy: round_robin
"""

TOML = """
[server]
port = 9200

[[workers]]
url = "grpc://[::1]:30001"

[models."Qwen/Qwen2.5-7B-Instruct"]
reasoning_parser = "none"
"""


def test_yaml_file_with_env_substitution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNOUT_TEST_KEY", "sk-secret")
    path = tmp_path / "turnout.yaml"
    path.write_text(YAML)
    config = load_config(path)
    assert config.server.port == 9100
    assert config.server.api_keys == ["sk-secret"]
    assert config.workers[0].model == "qwen-mini"
    assert config.models["qwen-mini"].policy == PolicyConfig("random", {"seed": 7})


def test_toml_file_and_cli_overrides(tmp_path: Path) -> None:
    path = tmp_path / "turnout.toml"
    path.write_text(TOML)
    config = load_config(path, {"server.port": 9300, "defaults.policy": "random"})
    assert config.server.port == 9300
    assert config.workers[0].url == "grpc://[::1]:30001"
    assert config.defaults.policy == "random"


def test_missing_env_var_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(
        ConfigError, match=r"server\.admin_api_key: environment variable NOPE_NOT_SET"
    ):
        build_config({"server": {"admin_api_key": "${NOPE_NOT_SET}"}})
    assert build_config({"server": {"host": "${NOPE_NOT_SET:-0.0.0.0}"}}).server.host == "0.0.0.0"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"server": {"port": "eighty"}}, "server.port: Expected `int`, got `str` (got 'eighty')"),
        ({"server": {"port": 70000}}, "server.port: must be between 0 and 65535, got 70000"),
        ({"workers": [{"url": "ftp://x:1"}]}, "workers[0].url: expected grpc://host:port"),
        (
            {"workers": [{"url": "grpc://x:1", "kind": "http"}]},
            "workers[0].url: an HTTP worker needs http://host:port",
        ),
        ({"workers": [{"url": "http://x:80a"}]}, "workers[0].url: an HTTP worker needs http://"),
        ({"workers": [{"url": "http://x:1", "role": "prefill"}]}, "workers[0].role: an HTTP"),
        ({"workers": [{"url": "https://x", "dp_size": 2}]}, "workers[0].dp_size: not for an HTTP"),
        (
            {"workers": [{"url": "http://x:1", "api_key_env": "MY KEY"}]},
            "workers[0].api_key_env: the name of an environment variable",
        ),
        ({"workers": [{"url": "http://x:1", "health_path": "health"}]}, "health_path: a path"),
        ({"workers": [{"url": "grpc://h:1", "id": "a\nb"}]}, "workers[0].id: worker id 'a\\nb'"),
        ({"workers": [{"url": "grpc://h\x1b:1"}]}, "workers[0].url: worker id 'h\\x1b:1' must"),
        ({"workers": [{"url": "grpc://h:1", "id": "w" * 129}]}, "must be 1 to 128 characters"),
        (
            {"models": {"m1": {"tool_parsr": "qwen"}}},
            "models.m1: unknown key 'tool_parsr'; did you mean 'tool_parser'?",
        ),
        ({"models": {"m1": {"aliases": "x"}}}, "models.m1.aliases: Expected `array`"),
        ({"serverr": {}}, "(top level): unknown key 'serverr'; did you mean 'server'?"),
    ],
)
def test_validation_errors_name_key_path_and_value(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(data)
    assert expected in str(info.value)


def test_broken_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_a_yaml_error_is_one_line_naming_the_file_and_the_place(tmp_path: Path) -> None:
    path = tmp_path / "turnout.yaml"
    path.write_text("server:\n  port: 1\n   host: x\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"config file {path} is not valid YAML: line 3, column 8: "
        "mapping values are not allowed here"
    )


def test_an_unknown_key_is_named_without_its_sections_values() -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"server": {"prot": 8000, "api_keys": ["sk-secret"]}})
    assert str(info.value) == "server: unknown key 'prot'; did you mean 'port'?"
    with pytest.raises(ConfigError) as info:
        build_config({"tenants": {"t": {"keys": ["sk-secret"], "bogus": 1}}})
    assert str(info.value).startswith("tenants.t: unknown key 'bogus'; valid keys: concurrent")
    assert "sk-secret" not in str(info.value)


def test_per_model_choice_explicit_then_pattern_then_default() -> None:
    plugins = turnout.load_plugins()
    config = build_config(
        {
            "models": {
                "Qwen/Qwen2.5-7B-Instruct": {"tool_parser": "none"},
                "my-llama": {"tool_parser": "llama3_json", "policy": "random"},
            },
            "defaults": {"tool_parser": "json"},
        }
    )
    qwen = choose_plugins("Qwen/Qwen2.5-7B-Instruct", config, plugins)
    assert qwen.tool_parser is None
    assert qwen.policy.name == "round_robin"
    llama = choose_plugins("my-llama", config, plugins)
    assert (llama.tool_parser, llama.policy.name) == ("llama", "random")
    assert choose_plugins("Qwen/Qwen3-Coder-Flash", config, plugins).tool_parser == "qwen3_coder"
    assert choose_plugins("mystery-model", config, plugins).tool_parser == "json"


def test_unknown_plugin_name_in_config_fails_startup_with_key() -> None:
    config = build_config({"models": {"m": {"policy": "fastest"}}})
    with pytest.raises(PluginError, match=r"models\.m\.policy: unknown policy 'fastest'"):
        validate_plugin_names(config, turnout.load_plugins())
