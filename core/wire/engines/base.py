"""What every engine protocol shares: the names, the refusal, the seam, SGLang's identity.

See :mod:`turnout.wire.engines`.

The router builds SGLang's ``GenerateRequest`` and reads SGLang's ``GenerateResponse`` everywhere
(``turnout.wire.pb``); an :class:`EngineWire` is the seam where that flow meets one engine's gRPC
service. SGLang's own is the identity (no work per message); vLLM's (:mod:`.vllm`) and
TensorRT-LLM's (:mod:`.trtllm`) translate a request once, and read each response message's
bytes straight into SGLang's message (the transport's deserializer is theirs). What an
engine's protocol cannot carry is refused before anything is sent (:class:`UnsupportedByEngine`,
a 400 naming the field).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Protocol

import grpc

from turnout.wire.errors import WorkerCallError
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.transport import Message, MessageType

__all__ = [
    "ENGINES",
    "SCHEMES",
    "EngineName",
    "EngineWire",
    "SglangWire",
    "UnsupportedByEngine",
    "split_scheme",
]

EngineName = Literal["sglang", "vllm", "trtllm"]

#: URL scheme → the engine a worker at that URL speaks (``grpc://`` stays SGLang).
SCHEMES: Final[Mapping[str, tuple[EngineName, bool]]] = {
    "grpc": ("sglang", False),
    "grpcs": ("sglang", True),
    "sglang+grpc": ("sglang", False),
    "sglang+grpcs": ("sglang", True),
    "vllm+grpc": ("vllm", False),
    "vllm+grpcs": ("vllm", True),
    "trtllm+grpc": ("trtllm", False),
    "trtllm+grpcs": ("trtllm", True),
}
ENGINES: Final[tuple[EngineName, ...]] = ("sglang", "vllm", "trtllm")


def split_scheme(url: str) -> tuple[EngineName, str]:
    """``vllm+grpc://h:p`` → (``vllm``, ``grpc://h:p``); a plain URL is SGLang's."""
    scheme, sep, rest = url.strip().partition("://")
    if sep and scheme.lower() in SCHEMES:
        engine, tls = SCHEMES[scheme.lower()]
        return engine, f"{'grpcs' if tls else 'grpc'}://{rest}"
    return "sglang", url


class UnsupportedByEngine(WorkerCallError):
    """The request asks for something the worker's engine protocol cannot carry: a 400 naming
    the field, raised before anything is sent (never the worker's fault, never retried)."""

    class_http_status = 400

    def __init__(self, engine: EngineName, field: str, what: str, *, worker: str = "") -> None:
        self.engine = engine
        self.field = field
        super().__init__(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{field}: {what} is not supported by this model's {engine} workers",
            worker=worker,
            method="Generate",
        )


class EngineWire(Protocol):
    """One engine's gRPC service, seen from the router's SGLang-shaped generation flow."""

    #: Which engine this is.
    name: EngineName
    #: Full name of the gRPC service (``package.Service``).
    service: str

    def generate_request(self, request: pb.GenerateRequest) -> Message:
        """The engine's request for ``request``; :class:`UnsupportedByEngine` when it asks for
        what the engine cannot do."""
        ...

    def responses(self, request: pb.GenerateRequest) -> MessageType:
        """The deserializer of ``request``'s responses: its ``FromString`` reads the engine's
        bytes into SGLang's ``GenerateResponse``."""
        ...

    def abort(self, request_id: str, reason: str) -> tuple[Message, MessageType]:
        """The ``Abort`` request of ``request_id`` and its response class."""
        ...

    def health(self) -> tuple[Message, MessageType, Callable[[Any], pb.HealthCheckResponse]]:
        """The ``HealthCheck`` request, its response class and how to read the verdict."""
        ...

    def model_info(self) -> tuple[Message, MessageType, Callable[[Any], pb.GetModelInfoResponse]]:
        """``GetModelInfo`` as for :meth:`health`."""
        ...

    def server_info(
        self,
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetServerInfoResponse]]:
        """``GetServerInfo`` as for :meth:`health`."""
        ...

    def loads(
        self, request: pb.GetLoadsRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetLoadsResponse]] | None:
        """``GetLoads`` as for :meth:`health`; None when the engine has no such call."""
        ...

    def embed(
        self, request: pb.EmbedRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.EmbedResponse]]:
        """``Embed`` as for :meth:`health`."""
        ...

    def lora(self) -> bool:
        """Whether the service has SGLang's LoRA adapter calls."""
        ...


def _same(message: Any) -> Any:
    return message


class SglangWire:
    """SGLang's scheduler service: the router's own messages, sent and read as they are."""

    name: EngineName = "sglang"
    service = "sglang.grpc.scheduler.SglangScheduler"

    def generate_request(self, request: pb.GenerateRequest) -> Message:
        """``request`` itself."""
        return request

    def responses(self, request: pb.GenerateRequest) -> MessageType:
        """SGLang's own message class."""
        return pb.GenerateResponse

    def abort(self, request_id: str, reason: str) -> tuple[Message, MessageType]:
        """SGLang's ``AbortRequest``."""
        return pb.AbortRequest(request_id=request_id, reason=reason), pb.AbortResponse

    def health(self) -> tuple[Message, MessageType, Callable[[Any], pb.HealthCheckResponse]]:
        """SGLang's ``HealthCheck``."""
        return pb.HealthCheckRequest(), pb.HealthCheckResponse, _same

    def model_info(self) -> tuple[Message, MessageType, Callable[[Any], pb.GetModelInfoResponse]]:
        """SGLang's ``GetModelInfo``."""
        return pb.GetModelInfoRequest(), pb.GetModelInfoResponse, _same

    def server_info(
        self,
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetServerInfoResponse]]:
        """SGLang's ``GetServerInfo``."""
        return pb.GetServerInfoRequest(), pb.GetServerInfoResponse, _same

    def loads(
        self, request: pb.GetLoadsRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetLoadsResponse]] | None:
        """SGLang's ``GetLoads``."""
        return request, pb.GetLoadsResponse, _same

    def embed(
        self, request: pb.EmbedRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.EmbedResponse]]:
        """SGLang's ``Embed``."""
        return request, pb.EmbedResponse, _same

    def lora(self) -> bool:
        """SGLang has them."""
        return True
