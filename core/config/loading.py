"""Loading: a YAML or TOML file read, ``${ENV}`` substituted, CLI overrides set, then
validated into a :class:`~turnout.config.schema.Config`; errors name the key path and value."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
import typing
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
        data: Any = tomllib.loads(text) if file.suffix == ".toml" else _load_yaml(text, file)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {file} is not valid YAML: {_yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {file}: the top level must be a mapping")
    return data


def _load_yaml(text: str, file: Path) -> Any:
    loader = yaml.SafeLoader(text)
    loader.name = str(file)  # errors name the file, not "<unicode string>"
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where in the file, and what is wrong there."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}"
    return " ".join(str(exc).split())


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


_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `([^`]*)`$")


def _describe_validation_error(message: str, data: Any) -> str:
    match = _PATH_IN_MESSAGE.search(message)
    path, reason = (match.group(1), message[: match.start()]) if match else ("$", message)
    unknown = _UNKNOWN_FIELD.match(reason)
    if unknown:  # the section's value is not shown: it may hold keys
        key = unknown.group(1)
        return f"{_dotted(path)}: unknown key {key!r}{_known_keys(path, key)}"
    if match is None:
        return f"invalid config: {message}"
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


def _known_keys(path: str, unknown: str) -> str:
    """``; did you mean 'x'?`` for a misspelt key of the section at ``path``, else the keys."""
    names = [f.encode_name for struct in _structs_at(path) for f in msgspec.structs.fields(struct)]
    if not names:
        return ""
    close = difflib.get_close_matches(unknown, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; valid keys: {', '.join(sorted(set(names)))}"


def _structs_at(path: str) -> list[type[msgspec.Struct]]:
    """The config sections (struct types) a path like ``$.models.m.policy`` can point at."""
    types: list[Any] = [Config]
    for name, index, _ in _PATH_TOKEN.findall(path[1:]):
        found: list[Any] = []
        for kind in types:
            if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
                fields = {f.encode_name: f.type for f in msgspec.structs.fields(kind)}
                if name in fields:
                    found.append(fields[name])
            elif typing.get_origin(kind) is dict and name:
                found.append(typing.get_args(kind)[1])
            elif typing.get_origin(kind) is list and index:
                found.append(typing.get_args(kind)[0])
        types = [t for kind in found for t in _alternatives(kind)]
    return [t for t in types if isinstance(t, type) and issubclass(t, msgspec.Struct)]


def _alternatives(kind: Any) -> list[Any]:
    """The types a field may hold: a union's members, an ``Annotated`` type's own."""
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        return _alternatives(typing.get_args(kind)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for member in typing.get_args(kind) for t in _alternatives(member)]
    return [kind]
