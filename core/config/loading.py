"""Loading: a YAML or TOML file read, ``${ENV}`` substituted, CLI overrides set, then
validated into a :class:`~turnout.config.schema.Config`; errors name the key path and value."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from turnout.config.checks import check_config
from turnout.config.schema import Config, ModelConfig, TenantConfig
from turnout.errors import ConfigError

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(value: Any, path: str = "$", environ: Mapping[str, str] | None = None) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of a parsed config."""
    env = os.environ if environ is None else environ
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{_dotted(path)}: environment variable {name} is not set")

        return _ENV_PATTERN.sub(replace, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, f"{path}.{k}", env) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file into plain data."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    try:
        if file.suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        kind = "TOML" if file.suffix == ".toml" else "YAML"
        raise ConfigError(f"config file {file} is not valid {kind}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {file}: the top level must be a mapping")
    return data


def build_config(data: dict[str, Any]) -> Config:
    """Validate plain data into a :class:`Config`; errors name the key path and the bad value."""
    data = substitute_env(data)
    # msgspec does not name dict keys in error paths; validate entries one by one first.
    for section, entry_type in (("models", ModelConfig), ("tenants", TenantConfig)):
        entries = data.get(section)
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            try:
                msgspec.convert(entry, entry_type, strict=False)
            except msgspec.ValidationError as exc:
                message = str(exc).replace(" - at `$", f" - at `$.{section}.{name}", 1)
                if " - at `" not in message:
                    message += f" - at `$.{section}.{name}`"
                raise ConfigError(_describe_validation_error(message, data)) from None
    try:
        config = msgspec.convert(data, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe_validation_error(str(exc), data)) from None
    check_config(config)
    return config


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Load the config file (if any) and apply overrides (dotted keys from CLI flags)."""
    data = read_config_file(path) if path is not None else {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return build_config(data)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        child = node.get(key)
        if key == "policy" and isinstance(child, str):
            child = node[key] = {"name": child}  # a policy by name, now with more keys
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[last] = value


_PATH_IN_MESSAGE = re.compile(r" - at `(\$[^`]*)`$")


def _describe_validation_error(message: str, data: Any) -> str:
    match = _PATH_IN_MESSAGE.search(message)
    if match is None:
        return f"invalid config: {message}"
    path = match.group(1)
    reason = message[: match.start()]
    value = _lookup(data, path)
    shown = "" if value is _MISSING else f" (got {value!r})"
    return f"{_dotted(path)}: {reason}{shown}"


_MISSING = object()
_PATH_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(\.\.\.)\]")


def _lookup(data: Any, path: str) -> Any:
    node = data
    for name, index, _ in _PATH_TOKEN.findall(path[1:]):
        if name and isinstance(node, dict) and name in node:
            node = node[name]
        elif index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        else:
            return _MISSING
    return node


def _dotted(path: str) -> str:
    return path[2:] if path.startswith("$.") else path.lstrip("$") or "(top level)"
