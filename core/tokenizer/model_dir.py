"""Read a model directory laid out as on the Hugging Face Hub, without touching the network.

Only the files that concern text are read: ``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``, the chat template files, ``config.json`` and
``generation_config.json``. Every problem is a :class:`ModelFilesError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnout.tokenizer.errors import ModelFilesError

#: Named special tokens, in the order Hugging Face lists them; templates see them as variables.
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)

#: Name of the template used when the caller does not pick one.
DEFAULT_TEMPLATE = "default"


@dataclass(frozen=True, slots=True)
class TokenSpec:
    """A token declared by the configuration (a plain string or an ``AddedToken`` dict)."""

    content: str
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False
    single_word: bool = False


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """Everything turnout needs from a model directory, parsed and validated."""

    directory: Path
    tokenizer_file: Path
    special_tokens: Mapping[str, TokenSpec]
    """Named special tokens that are set (keys from :data:`SPECIAL_TOKEN_NAMES`)."""
    extra_special_tokens: tuple[TokenSpec, ...] = ()
    added_tokens: tuple[TokenSpec, ...] = ()
    """Tokens from ``added_tokens_decoder``, in id order."""
    chat_templates: Mapping[str, str] = field(default_factory=dict)
    """Template sources by name; a single template is stored as ``"default"``."""
    chat_template_origin: str = ""
    """Where the templates came from (a file name), for error messages."""
    eos_token_ids: frozenset[int] = frozenset()
    """Union of ``eos_token_id`` from ``config.json`` and ``generation_config.json``."""
    add_bos_token: bool | None = None
    """As configured; informational (transformers 5 lets tokenizer.json's post-processor decide)."""
    add_eos_token: bool | None = None


def read_json(path: Path, *, required: bool) -> dict[str, Any] | None:
    """Parse a JSON object file; ``None`` when it is absent and not ``required``."""
    if not path.is_file():
        if required:
            raise ModelFilesError(f"{path}: file not found")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFilesError(f"{path}: cannot read file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ModelFilesError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFilesError(f"{path}: cannot read file: {exc}") from exc


def token_spec(value: object, where: str) -> TokenSpec | None:
    """Turn a configured token (string, ``AddedToken`` dict or null) into a :class:`TokenSpec`."""
    if value is None:
        return None
    if isinstance(value, str):
        return TokenSpec(value)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = {
            name: bool(value[name])
            for name in ("special", "lstrip", "rstrip", "normalized", "single_word")
            if name in value
        }
        return TokenSpec(value["content"], **flags)
    raise ModelFilesError(
        f"{where}: expected a token string or an AddedToken object, got {value!r}"
    )


def _special_tokens(
    config: Mapping[str, Any], fallback: Mapping[str, Any], config_path: Path
) -> tuple[dict[str, TokenSpec], tuple[TokenSpec, ...]]:
    named: dict[str, TokenSpec] = {}
    for name in SPECIAL_TOKEN_NAMES:
        source = config if name in config else fallback
        spec = token_spec(source.get(name), f"{config_path}: {name}")
        if spec is not None:
            named[name] = spec
    extra: list[TokenSpec] = []
    for key in ("additional_special_tokens", "extra_special_tokens"):
        source = config if key in config else fallback
        values = source.get(key) or []
        if isinstance(values, dict):  # newer configs map names to tokens
            values = list(values.values())
        if not isinstance(values, list):
            raise ModelFilesError(f"{config_path}: {key} must be a list, got {values!r}")
        for value in values:
            spec = token_spec(value, f"{config_path}: {key}")
            if spec is not None and spec not in extra:
                extra.append(spec)
    return named, tuple(extra)


def _added_tokens(config: Mapping[str, Any], config_path: Path) -> tuple[TokenSpec, ...]:
    table = config.get("added_tokens_decoder") or {}
    if not isinstance(table, dict):
        raise ModelFilesError(f"{config_path}: added_tokens_decoder must be an object")
    specs: list[tuple[int, TokenSpec]] = []
    for key, value in table.items():
        try:
            index = int(key)
        except ValueError:
            raise ModelFilesError(
                f"{config_path}: added_tokens_decoder key {key!r} is not a token id"
            ) from None
        spec = token_spec(value, f"{config_path}: added_tokens_decoder[{key}]")
        if spec is not None:
            specs.append((index, spec))
    return tuple(spec for _, spec in sorted(specs, key=lambda item: item[0]))


def _templates_from_value(value: object, where: str) -> dict[str, str]:
    """Accept a template string, a ``[{"name", "template"}]`` list or ``{"chat_template": …}``."""
    if isinstance(value, str):
        return {DEFAULT_TEMPLATE: value}
    if isinstance(value, dict) and "chat_template" in value:
        return _templates_from_value(value["chat_template"], where)
    if isinstance(value, list):
        named: dict[str, str] = {}
        for entry in value:
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)
            ):
                raise ModelFilesError(
                    f"{where}: each named chat template needs string 'name' and 'template', "
                    f"got {entry!r}"
                )
            named[entry["name"]] = entry["template"]
        return named
    raise ModelFilesError(f"{where}: chat_template must be a string or a list of named templates")


def load_template_override(value: str | Path) -> tuple[dict[str, str], str]:
    """Resolve a caller-given chat template: a file path (``.jinja``/``.json``/text) or the text.

    A string containing Jinja delimiters is taken as the template itself; anything else must
    name an existing file.
    """
    text = str(value)
    if isinstance(value, str) and ("{{" in text or "{%" in text):
        return {DEFAULT_TEMPLATE: text}, "the chat template given by the caller"
    path = Path(text).expanduser()
    if not path.is_file():
        raise ModelFilesError(f"{path}: chat template file not found")
    if path.suffix == ".json":
        try:
            data = json.loads(_read_text(path))
        except json.JSONDecodeError as exc:
            raise ModelFilesError(f"{path}: invalid JSON: {exc}") from exc
        return _templates_from_value(data, str(path)), str(path)
    return {DEFAULT_TEMPLATE: _read_text(path)}, str(path)


def _directory_templates(directory: Path, config: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    """Templates in Hugging Face's order: ``chat_template.jinja`` > ``.json`` > tokenizer config."""
    templates: dict[str, str] = {}
    origin = ""
    jinja_file = directory / "chat_template.jinja"
    json_file = directory / "chat_template.json"
    if jinja_file.is_file():
        templates, origin = {DEFAULT_TEMPLATE: _read_text(jinja_file)}, str(jinja_file)
    elif json_file.is_file():
        data = read_json(json_file, required=True)
        templates, origin = _templates_from_value(data, str(json_file)), str(json_file)
    elif config.get("chat_template") is not None:
        where = str(directory / "tokenizer_config.json")
        templates, origin = _templates_from_value(config["chat_template"], where), where
    extra_dir = directory / "additional_chat_templates"
    if extra_dir.is_dir():
        for path in sorted(extra_dir.glob("*.jinja")):
            templates.setdefault(path.stem, _read_text(path))
        origin = origin or str(extra_dir)
    return templates, origin


def _eos_ids(value: object, where: str) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        return set(value)
    raise ModelFilesError(f"{where} must be an integer or a list of integers")


def _config_eos_ids(directory: Path) -> frozenset[int]:
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = directory / name
        data = read_json(path, required=False)
        if data is None:
            continue
        ids |= _eos_ids(data.get("eos_token_id"), f"{path}: eos_token_id")
        text_config = data.get("text_config")
        if isinstance(text_config, dict):
            ids |= _eos_ids(text_config.get("eos_token_id"), f"{path}: text_config.eos_token_id")
    return frozenset(ids)


def _optional_bool(config: Mapping[str, Any], key: str, where: Path) -> bool | None:
    value = config.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ModelFilesError(f"{where}: {key} must be true or false, got {value!r}")


def read_model_dir(path: str | Path, chat_template: str | Path | None = None) -> ModelFiles:
    """Read and validate the tokenizer-related files of the model directory ``path``.

    ``chat_template`` (a file path or the template text) replaces the directory's templates.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ModelFilesError(f"{directory}: model directory not found")
    directory = directory.resolve()
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ModelFilesError(
            f"{tokenizer_file}: file not found (turnout needs a Hugging Face tokenizer.json)"
        )
    config_path = directory / "tokenizer_config.json"
    config = read_json(config_path, required=False) or {}
    special_map = read_json(directory / "special_tokens_map.json", required=False) or {}
    named, extra = _special_tokens(config, special_map, config_path)
    if chat_template is not None:
        templates, origin = load_template_override(chat_template)
    else:
        templates, origin = _directory_templates(directory, config)
    if templates and DEFAULT_TEMPLATE not in templates and "tool_use" not in templates:
        raise ModelFilesError(
            f"{origin}: named chat templates {sorted(templates)} include no 'default' template"
        )
    return ModelFiles(
        directory=directory,
        tokenizer_file=tokenizer_file,
        special_tokens=named,
        extra_special_tokens=extra,
        added_tokens=_added_tokens(config, config_path),
        chat_templates=templates,
        chat_template_origin=origin,
        eos_token_ids=_config_eos_ids(directory),
        add_bos_token=_optional_bool(config, "add_bos_token", config_path),
        add_eos_token=_optional_bool(config, "add_eos_token", config_path),
    )
