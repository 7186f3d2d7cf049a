"""The simulator's LoRA adapters: loaded at start-up, as SGLang's ``--lora-paths`` loads them.

SGLang mints a ``lora_id`` (a random UUID) for each adapter it loads at start-up, and a request
names its adapter by that id (``GenerateRequest.lora_id``); an id it does not know is refused.
The simulator does the same: each adapter gets a random id, listed by ``ListLoadedLoRAAdapters``
and echoed in ``GetServerInfo``'s ``lora_paths`` the way SGLang >= 0.5.20 prints its ``LoRARef``
records. The adapter changes nothing of the simulated output.
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
        self._ids = {a.lora_id for a in self.by_name.values()}

    def knows(self, lora_id: str) -> bool:
        """Whether ``lora_id`` names a loaded adapter."""
        return lora_id in self._ids

    def listed(self) -> pb.ListLoadedLoRAAdaptersResponse:
        """The ``ListLoadedLoRAAdapters`` answer."""
        return pb.ListLoadedLoRAAdaptersResponse(
            loaded_adapters=[
                pb.LoadedLoRAAdapter(lora_id=a.lora_id, lora_name=a.name, lora_path=a.path)
                for a in self.by_name.values()
            ]
        )

    def server_args(self) -> list[str]:
        """``lora_paths`` as SGLang's ``GetServerInfo`` shows them (``str(LoRARef)``)."""
        return [
            f"LoRARef(lora_id={a.lora_id}, lora_name={a.name}, lora_path={a.path}, pinned=False)"
            for a in self.by_name.values()
        ]
