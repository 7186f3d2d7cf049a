"""``WorkerClient``: one long-lived gRPC channel to one worker (SGLang, vLLM or TensorRT-LLM).

The client speaks SGLang's messages whatever the engine: the worker's own protocol is met at one
seam, its :class:`~turnout.wire.engines.EngineWire` (identity for SGLang).

Streams are cancelled for real: a ``GenerateStream`` that is closed (``aclose``, ``async with``
exit), whose consumer task is cancelled while waiting, or that is dropped unfinished, cancels its
gRPC call and sends the worker an ``Abort`` for the request id in the background, so the worker
stops spending GPU time on an answer nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

import grpc
from google.protobuf.message import Message as ProtoMessage

from turnout.wire.engines import EngineName, engine_wire, split_scheme
from turnout.wire.errors import ClientClosed, MalformedResponse, WorkerCallError
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.server_stream import ServerStream, TokenizerBundle, collect_tokenizer
from turnout.wire.transport import (
    Call,
    Channel,
    ClientSettings,
    Message,
    MessageType,
    Metadata,
    method_path,
)

__all__ = [
    "ClientSettings",
    "GenerateStream",
    "ServerStream",
    "TokenizerBundle",
    "WorkerClient",
    "parse_worker_url",
]

log = logging.getLogger(__name__)

#: Bound of a tokenizer archive fetched with GetTokenizer.
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024
#: Deadline of GetTokenizer, FlushCache and the profiler calls (SGLang's profiler writes its
#: traces before answering StopProfile).
_ADMIN_TIMEOUT_S = 120.0
_Response = TypeVar("_Response", bound=ProtoMessage)


def parse_worker_url(url: str) -> tuple[str, bool]:
    """``grpc://host:port`` → (``host:port``, tls); ``grpcs://`` selects TLS. The engine
    schemes (``vllm+grpc://``, ``trtllm+grpc://``, …; see ``turnout.wire.engines``) too.

    A bare ``host:port`` is taken as ``grpc://host:port``. Raises ``ValueError`` otherwise.
    """
    raw = split_scheme(url)[1].strip()
    parts = urlsplit(raw if "://" in raw else f"grpc://{raw}")
    if parts.scheme not in ("grpc", "grpcs"):
        raise ValueError(f"worker URL must start with grpc:// or grpcs://, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(f"worker URL must look like grpc://host:port, got {url!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}", parts.scheme == "grpcs"


class GenerateStream:
    """The responses of one Generate call: an async iterator of ``GenerateResponse``.

    Use it as ``async with client.generate(req) as stream: async for resp in stream: ...`` (or
    call ``aclose()``) so that leaving early cancels the call and aborts the request at once.
    Errors arrive as ``WorkerCallError``. The stream counts as finished (no Abort on close) once
    the worker has ended it or sent a ``complete`` for each of the request's ``n`` choices.
    """

    __slots__ = (
        "_call",
        "_client",
        "_closed",
        "_completes_left",
        "finished",
        "request_id",
        "responses",
    )

    def __init__(
        self,
        client: WorkerClient,
        call: Call,
        request_id: str,
        n: int,
    ) -> None:
        self._client = client
        self._call = call
        self.request_id = request_id
        #: Number of responses received so far (0: nothing reached the client; a retry is safe).
        self.responses = 0
        self._completes_left = max(n, 1)
        #: True once the worker ended the stream or completed every choice (read it, do not
        #: set it; a plain attribute: the dispatcher reads it after every batch).
        self.finished = False
        self._closed = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> pb.GenerateResponse:
        if self._closed:
            raise StopAsyncIteration
        try:
            response = await self._call.read()
        except BaseException as exc:
            if self._read_failed(exc):
                raise StopAsyncIteration from None
            raise
        if response is None:
            self._ended()
            raise StopAsyncIteration
        self._count(response)
        message: pb.GenerateResponse = response
        return message

    async def next_batch(self) -> list[pb.GenerateResponse]:
        """Every response that arrived since the last read (waiting for one if none did);
        an empty list once the stream ended. Errors as for iteration."""
        if self._closed:
            return []
        try:
            batch: list[pb.GenerateResponse] = await self._call.read_batch()
        except BaseException as exc:
            if self._read_failed(exc):
                return []
            raise
        if not batch:
            self._ended()
            return batch
        self.responses += len(batch)
        for response in batch:  # ``_count`` inline: no call per message
            if response.HasField("complete"):
                self._completed()
        return batch

    def _count(self, message: pb.GenerateResponse) -> None:
        self.responses += 1
        if message.HasField("complete"):
            self._completed()

    def _completed(self) -> None:
        """One choice is complete."""
        self._completes_left -= 1
        if self._completes_left <= 0:
            self.finished = True

    def _ended(self) -> None:
        if not self._closed:
            self.finished = self._closed = True

    def _read_failed(self, exc: BaseException) -> bool:
        """Bookkeeping for a read that raised ``exc``; True when it only means "closed"."""
        if isinstance(exc, asyncio.CancelledError):
            if self._interrupted_by_close():
                return True
            self._abandon("request cancelled")
        elif isinstance(exc, WorkerCallError):
            self._closed = True
            if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                # Our deadline, not the worker's decision: it may still be generating.
                self._client._schedule_abort(self.request_id, "deadline exceeded")
            elif isinstance(exc, MalformedResponse):
                # We gave up on what the worker sent; it may still be generating.
                self._client._schedule_abort(self.request_id, "malformed response")
            self.finished = True
        return False

    def _interrupted_by_close(self) -> bool:
        """True when cancel()/aclose() from elsewhere (not a task cancellation) ended a read."""
        task = asyncio.current_task()
        return self._closed and task is not None and not task.cancelling()

    def cancel(self, reason: str = "client went away") -> None:
        """Stop now (synchronous): cancel the call and, if unfinished, abort it on the worker."""
        self._abandon(reason)

    async def aclose(self) -> None:
        """Same as ``cancel()``; for ``contextlib.aclosing`` and symmetry with async generators."""
        self._abandon("stream closed")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._abandon("stream dropped")

    def _abandon(self, reason: str) -> None:
        self._closed = True
        if not self._call.done():
            if self.finished:
                # Every answer is in; only the worker's status is still on its way.
                self._call.release()
            else:
                self._call.cancel()
        if not self.finished:
            self.finished = True
            self._client._schedule_abort(self.request_id, reason)

    def __del__(self) -> None:
        # Safety net for a consumer that neither closed nor exhausted the stream.
        if not self.finished:
            # The loop may be gone at interpreter exit: then there is nobody left to tell.
            with contextlib.suppress(Exception):
                self._abandon("stream garbage-collected")


class WorkerClient:
    """Client of one worker at ``grpc://host:port`` (or ``grpcs://``; ``vllm+grpc://`` and
    ``trtllm+grpc://`` for those engines, or ``engine=``).

    The channel is opened lazily on first use in the running event loop and kept until
    ``close()``. Every unary call has a deadline (``timeout_s=`` seconds, default from
    ``ClientSettings``), propagated to the worker; failures raise ``WorkerCallError``.
    """

    def __init__(
        self, url: str, settings: ClientSettings | None = None, engine: EngineName | None = None
    ) -> None:
        self.url = url
        self.target, tls = parse_worker_url(url)
        #: How this worker's engine protocol meets the router's messages.
        self.engine = engine_wire(engine or split_scheme(url)[0])
        self._service = self.engine.service
        self.settings = settings or ClientSettings()
        self._channel = _open_channel(self.target, tls, self.settings, url)
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self._used = False

    # -- channel -------------------------------------------------------------------------------

    async def wait_ready(self, within: float) -> None:
        """Wait until connected; ``WorkerCallError`` (UNAVAILABLE) after ``within`` seconds."""
        self._check_open()
        self._used = True
        await self._channel.wait_ready(within)

    async def close(self) -> None:
        """Let pending aborts finish (bounded by their deadline), then close the channel."""
        self._closed = True
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.settings.abort_timeout)
        await self._channel.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(worker=self.url)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- calls ---------------------------------------------------------------------------------

    def generate(
        self,
        request: pb.GenerateRequest,
        *,
        timeout_s: float | None = None,
        metadata: Metadata = (),
    ) -> GenerateStream:
        """Start a Generate call; iterate the returned stream for chunks and completes.

        ``timeout_s`` (seconds) bounds the whole stream (None: none; the caller watches progress).
        ``metadata`` goes with the call (the W3C trace context, so the worker's spans join the
        router's trace).
        """
        self._check_open()
        engine = self.engine
        sent = engine.generate_request(request)  # may refuse what the engine cannot do
        self._used = True
        call = self._channel.call(
            "Generate",
            self._path("Generate"),
            sent,
            engine.responses(request),
            timeout_s,
            metadata=metadata,
        )
        n = request.sampling_params.n if request.HasField("sampling_params") else 1
        return GenerateStream(self, call, request.request_id, n)

    async def abort(
        self, request_id: str, reason: str = "", *, timeout_s: float | None = None
    ) -> pb.AbortResponse:
        """Ask the worker to stop ``request_id``."""
        request, response_type = self.engine.abort(request_id, reason)
        response = await self._engine_unary(
            "Abort", request, response_type, timeout_s or self.settings.abort_timeout
        )
        if isinstance(response, pb.AbortResponse):
            return response
        # vLLM answers an empty message: being answered is success.
        return pb.AbortResponse(
            success=getattr(response, "success", True), message=getattr(response, "message", "")
        )

    async def health_check(self, *, timeout_s: float | None = None) -> pb.HealthCheckResponse:
        """The worker's own health verdict (``healthy``, ``message``)."""
        request, response_type, read = self.engine.health()
        response = await self._engine_unary(
            "HealthCheck", request, response_type, timeout_s or self.settings.health_timeout
        )
        return read(response)

    async def get_model_info(self, *, timeout_s: float | None = None) -> pb.GetModelInfoResponse:
        """Model path, served name, EOS ids, context length, … of the loaded model."""
        request, response_type, read = self.engine.model_info()
        response = await self._engine_unary(
            "GetModelInfo", request, response_type, timeout_s or self.settings.unary_timeout
        )
        return read(response)

    async def get_server_info(self, *, timeout_s: float | None = None) -> pb.GetServerInfoResponse:
        """Server arguments, version, active requests, uptime."""
        request, response_type, read = self.engine.server_info()
        response = await self._engine_unary(
            "GetServerInfo", request, response_type, timeout_s or self.settings.unary_timeout
        )
        return read(response)

    async def get_loads(
        self,
        include: Sequence[str] = (),
        *,
        dp_rank: int | None = None,
        timeout_s: float | None = None,
    ) -> pb.GetLoadsResponse:
        """Per-rank scheduler load (running/waiting requests, token usage, …)."""
        request = pb.GetLoadsRequest(include=include)
        if dp_rank is not None:
            request.dp_rank = dp_rank
        call = self.engine.loads(request)
        if call is None:
            raise self._unimplemented("GetLoads")
        sent, response_type, read = call
        response = await self._engine_unary(
            "GetLoads", sent, response_type, timeout_s or self.settings.unary_timeout
        )
        return read(response)

    def _unimplemented(self, method: str) -> WorkerCallError:
        """What the worker would answer for a call its engine's service does not have."""
        return WorkerCallError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{self.engine.name} workers have no {method}",
            worker=self.url,
            method=method,
        )

    async def list_loaded_lora_adapters(
        self, *, timeout_s: float | None = None
    ) -> pb.ListLoadedLoRAAdaptersResponse:
        """The LoRA adapters loaded in the engine (UNIMPLEMENTED on older SGLang)."""
        if not self.engine.lora():
            raise self._unimplemented("ListLoadedLoRAAdapters")
        return await self._unary(
            "ListLoadedLoRAAdapters",
            pb.ListLoadedLoRAAdaptersRequest(),
            pb.ListLoadedLoRAAdaptersResponse,
            timeout_s or self.settings.unary_timeout,
        )

    # -- the KV-event stream, the tokenizer, admin calls ---------------------------------------

    def subscribe_kv_events(
        self,
        start_seq: int = 0,
        *,
        load_records_before_first_batch: bool = False,
        timeout_s: float | None = None,
    ) -> ServerStream[common_pb2.KvEventBatch]:
        """Subscribe to the worker's KV-cache events from batch ``start_seq`` on (0: from now);
        iterate the stream for ``KvEventBatch`` es, ``aclose()`` it to unsubscribe. No deadline
        unless ``timeout_s``: the stream lives as long as the worker."""
        self._check_open()
        self._used = True
        request = common_pb2.SubscribeKvEventsRequest(
            start_sequence_number=start_seq,
            load_records_before_first_batch=load_records_before_first_batch,
        )
        method = "SubscribeKvEvents"
        call = self._channel.call(
            method, self._path(method), request, common_pb2.KvEventBatch, timeout_s
        )
        return ServerStream(call, method)

    async def get_tokenizer(
        self, *, timeout_s: float | None = None, max_bytes: int = MAX_TOKENIZER_BYTES
    ) -> TokenizerBundle:
        """The worker's tokenizer files as a zip, checked against the SHA-256 it sent
        (``MalformedResponse`` when it does not match or the archive exceeds ``max_bytes``)."""
        self._check_open()
        self._used = True
        method = "GetTokenizer"
        call = self._channel.call(
            method,
            self._path(method),
            common_pb2.GetTokenizerRequest(),
            common_pb2.GetTokenizerChunk,
            timeout_s or _ADMIN_TIMEOUT_S,
        )
        stream: ServerStream[common_pb2.GetTokenizerChunk] = ServerStream(call, method)
        return await collect_tokenizer(stream, max_bytes=max_bytes, worker=self.url)

    async def load_lora_adapter(
        self,
        lora_name: str,
        lora_path: str,
        lora_id: str,
        *,
        pinned: bool = False,
        timeout_s: float | None = None,
    ) -> pb.LoadLoRAAdapterResponse:
        """Load an adapter; requests then name it by ``lora_id`` (minted by the caller)."""
        if not self.engine.lora():
            raise self._unimplemented("LoadLoRAAdapter")
        request = pb.LoadLoRAAdapterRequest(
            lora_name=lora_name, lora_path=lora_path, lora_id=lora_id, pinned=pinned
        )
        return await self._unary(
            "LoadLoRAAdapter",
            request,
            pb.LoadLoRAAdapterResponse,
            timeout_s or _ADMIN_TIMEOUT_S,
        )

    async def unload_lora_adapter(
        self, lora_name: str, lora_id: str = "", *, timeout_s: float | None = None
    ) -> pb.UnloadLoRAAdapterResponse:
        """Unload an adapter (by name, and the id it was loaded under when known)."""
        if not self.engine.lora():
            raise self._unimplemented("UnloadLoRAAdapter")
        request = pb.UnloadLoRAAdapterRequest(lora_name=lora_name, lora_id=lora_id)
        return await self._unary(
            "UnloadLoRAAdapter",
            request,
            pb.UnloadLoRAAdapterResponse,
            timeout_s or self.settings.unary_timeout,
        )

    async def flush_cache(
        self, *, idle_wait_s: float = 0.0, timeout_s: float | None = None
    ) -> common_pb2.FlushCacheResponse:
        """Drop the prefix cache; the worker waits up to ``idle_wait_s`` for running requests
        to finish (0: flush now or fail if any run)."""
        request = common_pb2.FlushCacheRequest(timeout_s=idle_wait_s)
        return await self._unary(
            "FlushCache",
            request,
            common_pb2.FlushCacheResponse,
            timeout_s or max(_ADMIN_TIMEOUT_S, idle_wait_s + 10.0),
        )

    async def start_profile(
        self,
        request: common_pb2.StartProfileRequest | None = None,
        *,
        timeout_s: float | None = None,
    ) -> common_pb2.ProfileResponse:
        """Start the engine's profiler (options as ``StartProfileRequest``)."""
        return await self._unary(
            "StartProfile",
            request or common_pb2.StartProfileRequest(),
            common_pb2.ProfileResponse,
            timeout_s or _ADMIN_TIMEOUT_S,
        )

    async def stop_profile(self, *, timeout_s: float | None = None) -> common_pb2.ProfileResponse:
        """Stop the engine's profiler (it writes its traces first)."""
        return await self._unary(
            "StopProfile",
            common_pb2.StopProfileRequest(),
            common_pb2.ProfileResponse,
            timeout_s or _ADMIN_TIMEOUT_S,
        )

    async def embed(
        self,
        request: pb.EmbedRequest,
        *,
        timeout_s: float | None = None,
        metadata: Metadata = (),
    ) -> pb.EmbedResponse:
        """One embedding. A call cancelled before its answer (the caller went away, a timeout)
        also sends the worker an ``Abort`` for the request id, as a dropped Generate does."""
        sent, response_type, read = self.engine.embed(request)
        try:
            response = await self._engine_unary(
                "Embed",
                sent,
                response_type,
                timeout_s or self.settings.unary_timeout,
                metadata=metadata,
            )
            return read(response)
        except asyncio.CancelledError:
            self._schedule_abort(request.request_id, "embed cancelled")
            raise

    def _path(self, method: str) -> str:
        return method_path(method, self._service)

    async def _unary(
        self,
        method: str,
        request: Message,
        response_type: type[_Response],
        timeout_s: float,
        *,
        metadata: Metadata = (),
    ) -> _Response:
        response: _Response = await self._engine_unary(
            method, request, response_type, timeout_s, metadata=metadata
        )
        return response

    async def _engine_unary(
        self,
        method: str,
        request: Message,
        response_type: MessageType,
        timeout_s: float,
        *,
        metadata: Metadata = (),
    ) -> Any:
        """A unary call whose message classes are the engine's (no static type)."""
        self._check_open()
        self._used = True
        call = self._channel.call(
            method, self._path(method), request, response_type, timeout_s, metadata=metadata
        )
        try:
            response = await call.read()
            if response is None:
                raise WorkerCallError(
                    grpc.StatusCode.INTERNAL, "no response", worker=self.url, method=method
                )
            while await call.read() is not None:  # wait for the status
                pass
        finally:
            if not call.done():
                call.cancel()
        return response

    # -- background aborts ---------------------------------------------------------------------

    def _schedule_abort(self, request_id: str, reason: str) -> None:
        """Fire-and-forget Abort; never raises, never blocks the caller."""
        if not self._used:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._send_abort(request_id, reason))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_abort(self, request_id: str, reason: str) -> None:
        try:
            await self.abort(request_id, reason)
        except WorkerCallError as exc:
            log.debug("abort of %s on %s failed: %s", request_id, self.url, exc)
        except Exception:  # a failed best-effort abort must never surface
            log.debug("abort of %s on %s failed", request_id, self.url, exc_info=True)


def _open_channel(target: str, tls: bool, settings: ClientSettings, worker: str) -> Channel:
    if settings.transport == "grpcio":
        from turnout.wire.grpcio_transport import GrpcioChannel

        return GrpcioChannel(target, tls=tls, settings=settings, worker=worker)
    from turnout.wire.native import NativeChannel

    return NativeChannel(target, tls=tls, settings=settings, worker=worker)
