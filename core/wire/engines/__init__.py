"""The engine protocols a worker may speak, mapped onto the one generation flow.

The router builds SGLang's ``GenerateRequest`` and reads SGLang's ``GenerateResponse`` everywhere
(``turnout.wire.pb``); an :class:`EngineWire` is the seam where that flow meets one engine's gRPC
service. SGLang's own is the identity (no work per message); vLLM's (:mod:`.vllm`) and
TensorRT-LLM's (:mod:`.trtllm`) translate a request once, and read each response message's
bytes straight into SGLang's message (the transport's deserializer is theirs). What an
engine's protocol cannot carry is refused before anything is sent (:class:`UnsupportedByEngine`,
a 400 naming the field).
"""

from __future__ import annotations

from turnout.wire.engines.base import (
    ENGINES,
    SCHEMES,
    EngineName,
    EngineWire,
    SglangWire,
    UnsupportedByEngine,
    split_scheme,
)
from turnout.wire.engines.trtllm import TrtllmWire
from turnout.wire.engines.vllm import VllmWire

__all__ = [
    "ENGINES",
    "SCHEMES",
    "EngineName",
    "EngineWire",
    "SglangWire",
    "TrtllmWire",
    "UnsupportedByEngine",
    "VllmWire",
    "engine_wire",
    "split_scheme",
]


def engine_wire(engine: EngineName) -> EngineWire:
    """A new :class:`EngineWire` of ``engine`` (one per connection: TensorRT-LLM's keeps what
    its worker reported)."""
    if engine == "vllm":
        return VllmWire()
    if engine == "trtllm":
        return TrtllmWire()
    return SglangWire()
