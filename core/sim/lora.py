"""The simulator's LoRA adapters: loaded at start-up, as SGLang's ``--lora-paths`` loads them.

SGLang mints a ``lora_id`` (a random UUID) for each adapter it loads at start-up, and a request
names its adapter by that id (``GenerateRequest.lora_id``); an id it does not know is refused.
The simulator does the same: each adapter gets a random id, listed by ``ListLoadedLoRAAdapters``
and echoed in ``GetServerInfo``'s ``lora_paths`` the way SGLang >= 0.5.20 prints its ``LoRARef``
records. ``LoadLoRAAdapter`` / ``UnloadLoRAAdapter`` add and drop adapters at run time under the
caller's ``lora_id``, as SGLang's scheduler-direct path does. The adapter changes nothing of the
simulated output.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["SimAdapter", "SimAdapters"]


@dataclass(frozen=True, slots=True)
class SimAdapter:
    """One loaded adapter."""

    name: str
    lora_id: str
    path: str
    pinned: bool = False


class SimAdapters:
    """The adapters of one simulated worker, from ``NAME`` or ``NAME=PATH`` specs."""

    def __init__(self, specs: Iterable[str] = ()) -> None:
        self.by_name: dict[str, SimAdapter] = {}
        for spec in specs:
            name, sep, path = spec.partition("=")
            if not name or (sep and not path):
                raise ValueError(f"a LoRA adapter is NAME or NAME=PATH, got {spec!r}")
            if name in self.by_name:
                raise ValueError(f"LoRA adapter {name!r} given twice")
            self.by_name[name] = SimAdapter(name, uuid.uuid4().hex, path or f"/sim/lora/{name}")

    @property
    def _ids(self) -> set[str]:
        return {a.lora_id for a in self.by_name.values()}

    def load(self, name: str, path: str, lora_id: str, *, pinned: bool = False) -> str:
        """Add an adapter; an error message ("" on success)."""
        if not name or not path or not lora_id:
            return "lora_name, lora_path and lora_id are all required"
        if name in self.by_name:
            return f"The LoRA adapter {name!r} is already loaded"
        if lora_id in self._ids:
            return f"The lora_id {lora_id!r} is already in use"
        self.by_name[name] = SimAdapter(name, lora_id, path, pinned)
        return ""

    def unload(self, name: str, lora_id: str = "") -> str:
        """Drop an adapter by name (and id, when given); an error message ("" on success)."""
        adapter = self.by_name.get(name)
        if adapter is None:
            return f"The LoRA adapter {name!r} is not loaded"
        if lora_id and lora_id != adapter.lora_id:
            return f"The LoRA adapter {name!r} is loaded under another lora_id"
        del self.by_name[name]
        return ""

    def loaded_ids(self) -> list[str]:
        """Every loaded adapter's id."""
        return [a.lora_id for a in self.by_name.values()]

    def knows(self, lora_id: str) -> bool:
        """Whether ``lora_id`` names a loaded adapter."""
        return lora_id in self._ids

    def listed(self) -> pb.ListLoadedLoRAAdaptersResponse:
        """The ``ListLoadedLoRAAdapters`` answer."""
        return pb.ListLoadedLoRAAdaptersResponse(
            loaded_adapters=[
                pb.LoadedLoRAAdapter(
                    lora_id=a.lora_id, lora_name=a.name, lora_path=a.path, pinned=a.pinned
                )
                for a in self.by_name.values()
            ]
        )

    def server_args(self) -> list[str]:
        """``lora_paths`` as SGLang's ``GetServerInfo`` shows them (``str(LoRARef)``)."""
        return [
            f"LoRARef(lora_id={a.lora_id}, lora_name={a.name}, lora_path={a.path}, "
            f"pinned={a.pinned})"
            for a in self.by_name.values()
        ]
