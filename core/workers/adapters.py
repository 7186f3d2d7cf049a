"""The LoRA adapters a worker has loaded, as it reports them.

A request names an adapter by its name (``model: "base:adapter"``); the worker wants the
adapter's ``lora_id`` in ``GenerateRequest.lora_id``. SGLang mints that id itself for adapters
given at start-up (``--lora-paths``), so it differs from worker to worker: turnout asks each
worker. Newer SGLang (smg-grpc-servicer) answers ``ListLoadedLoRAAdapters``; older ones only
echo their server arguments in ``GetServerInfo``, where ``lora_paths`` holds SGLang's
``LoRARef`` records (as dicts, or as their ``str()`` once ServerArgs became a msgspec Struct).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Adapter", "adapters_from_list", "adapters_from_server_args"]


@dataclass(frozen=True, slots=True)
class Adapter:
    """One LoRA adapter loaded on a worker."""

    name: str
    #: What ``GenerateRequest.lora_id`` names it by on that worker ("" when it did not say).
    lora_id: str = ""
    #: Where the worker loaded it from ("" when it did not say).
    path: str = ""


def adapters_from_list(loaded: Iterable[Any]) -> dict[str, Adapter]:
    """Adapters by name from ``ListLoadedLoRAAdaptersResponse.loaded_adapters``."""
    found: dict[str, Adapter] = {}
    for item in loaded:
        name = str(item.lora_name or item.lora_id)
        if name:
            found[name] = Adapter(name, str(item.lora_id), str(item.lora_path))
    return found


#: ``str(LoRARef(...))``: ``LoRARef(lora_id=…, lora_name=…, lora_path=…, pinned=…)``, the
#: fields that are not None, unquoted.
_REF = re.compile(r"^LoRARef\((?P<body>.*)\)$", re.S)
_REF_FIELD = re.compile(r"(?:^|, )(lora_id|lora_name|lora_path|pinned)=")


def adapters_from_server_args(args: Mapping[str, Any]) -> dict[str, Adapter] | None:
    """Adapters by name from ``GetServerInfo.server_args``; None when it has no ``lora_paths``
    (the worker did not say), ``{}`` when LoRA is off."""
    if "lora_paths" not in args:
        return None
    entries = args["lora_paths"]
    if entries is None:
        return {}
    if isinstance(entries, Mapping):  # {name: path}, as given on the command line
        return {str(k): Adapter(str(k), "", str(v)) for k, v in entries.items()}
    found: dict[str, Adapter] = {}
    for entry in entries if isinstance(entries, list) else [entries]:
        adapter = _entry(entry)
        if adapter is not None:
            found[adapter.name] = adapter
    return found


def _entry(entry: Any) -> Adapter | None:
    if isinstance(entry, Mapping):
        return _from_fields({str(k): v for k, v in entry.items()})
    if not isinstance(entry, str) or not entry.strip():
        return None
    text = entry.strip()
    ref = _REF.match(text)
    if ref is not None:
        return _from_fields(_ref_fields(ref.group("body")))
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        return _from_fields(parsed) if isinstance(parsed, dict) else None
    name, sep, path = text.partition("=")
    return Adapter(name, "", path) if sep else Adapter(text, "", text)


def _ref_fields(body: str) -> dict[str, str]:
    marks = list(_REF_FIELD.finditer(body))
    return {
        mark.group(1): body[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else None]
        for i, mark in enumerate(marks)
    }


def _from_fields(fields: Mapping[str, Any]) -> Adapter | None:
    name = fields.get("lora_name") or fields.get("lora_path")
    if not name:
        return None
    return Adapter(str(name), str(fields.get("lora_id") or ""), str(fields.get("lora_path") or ""))
