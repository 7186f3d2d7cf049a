"""Adapts :class:`turnout.wire.WorkerClient` to :class:`WorkerConnection`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import json_format

from turnout.wire import (
    ClientSettings,
    GenerateStream,
    MalformedResponse,
    StreamRefused,
    WorkerCallError,
    WorkerClient,
    pb,
)
from turnout.wire.engines import EngineName, UnsupportedByEngine
from turnout.wire.proto import common_pb2
from turnout.wire.server_stream import ServerStream
from turnout.workers.adapters import Adapter, adapters_from_list, adapters_from_server_args
from turnout.workers.errors import KvEventsLost, KvEventsUnsupported, WorkerRequestError
from turnout.workers.settings import WireSettings

#: ``server_args`` keys copied into a worker's labels.
SERVER_ARG_LABELS = (
    "tp_size",
    "dp_size",
    "max_running_requests",
    "context_length",
    "disaggregation_mode",
    "disaggregation_bootstrap_port",
)

#: Worker faults that are load push-back, not breakage: retried elsewhere, not counted.
_PUSHBACK = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})
#: How a worker says a KV-event subscription cannot go on where it was.
_EVENTS_LOST = frozenset({grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.DATA_LOSS})
#: HTTP statuses worth trying on another worker.
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class WireConnection:
    """One worker over ``turnout.wire``, in the protocol of its engine (``engine``, else the
    URL's scheme: ``vllm+grpc://``, ``trtllm+grpc://``; SGLang otherwise)."""

    def __init__(
        self, url: str, settings: ClientSettings | None = None, engine: EngineName | None = None
    ) -> None:
        self.client = WorkerClient(url, settings, engine)
        #: False once the worker answered ``ListLoadedLoRAAdapters`` with UNIMPLEMENTED.
        self._lists_adapters = True
        #: The adapters its server arguments name (``lora_paths``), from the last model_info.
        self._adapters_in_args: dict[str, Adapter] | None = None

    async def health_check(self, timeout_s: float) -> bool:
        """``HealthCheck``: True iff answered ``healthy`` in time."""
        response = await self.client.health_check(timeout_s=timeout_s)
        return bool(response.healthy)

    async def model_info(self, timeout_s: float) -> Mapping[str, str]:
        """``GetModelInfo`` (required) and ``GetServerInfo`` (best effort) as labels."""
        info = await self.client.get_model_info(timeout_s=timeout_s)
        labels = _labels(info)
        if self.client.engine.name != "sglang":
            labels["engine"] = self.client.engine.name
        try:
            server = await self.client.get_server_info(timeout_s=timeout_s)
        except WorkerCallError:
            return labels
        args: dict[str, Any] = {}
        if server.HasField("server_args"):
            args = json_format.MessageToDict(server.server_args)
        self._adapters_in_args = adapters_from_server_args(args)
        for key in SERVER_ARG_LABELS:
            if key in args and args[key] is not None:
                labels[key] = _text(args[key])
        if server.sglang_version:
            labels["sglang_version"] = server.sglang_version
        return labels

    async def adapters(self, timeout_s: float) -> dict[str, Adapter] | None:
        """The LoRA adapters loaded: ``ListLoadedLoRAAdapters``, or on workers without it the
        ``lora_paths`` of their server arguments; None when the worker does not say."""
        if self._lists_adapters:
            try:
                response = await self.client.list_loaded_lora_adapters(timeout_s=timeout_s)
            except WorkerCallError as exc:
                if exc.code is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._lists_adapters = False
            else:
                return adapters_from_list(response.loaded_adapters)
        return self._adapters_in_args

    async def load(self, timeout_s: float) -> list[int]:
        """Running plus waiting requests of each DP rank (index = ``dp_rank``)."""
        response = await self.client.get_loads(timeout_s=timeout_s)
        return loads_by_rank(response)

    def kv_events(self, start_seq: int) -> AsyncIterator[common_pb2.KvEventBatch]:
        """``SubscribeKvEvents`` from batch ``start_seq`` on (0: from now), load records
        first; raises :class:`KvEventsUnsupported` when the worker does not serve it,
        :class:`KvEventsLost` when it cannot go on from ``start_seq``."""
        return _unimplemented_as_unsupported(
            self.client.subscribe_kv_events(start_seq, load_records_before_first_batch=True)
        )

    def generate(
        self,
        request: pb.GenerateRequest,
        timeout: float | None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> GenerateStream:
        """Start ``Generate`` (with ``metadata``: the W3C trace context)."""
        return self.client.generate(request, timeout_s=timeout, metadata=metadata)

    async def embed(
        self,
        request: pb.EmbedRequest,
        timeout_s: float | None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> pb.EmbedResponse:
        """``Embed`` (with ``metadata``: the W3C trace context)."""
        return await self.client.embed(request, timeout_s=timeout_s, metadata=metadata)

    def classify(self, exc: BaseException) -> WorkerRequestError | None:
        """Map a :class:`WorkerCallError` to the :class:`WorkerRequestError` it is."""
        return classify(exc)

    async def close(self) -> None:
        """Close the channel."""
        await self.client.close()


async def _unimplemented_as_unsupported(
    stream: ServerStream[common_pb2.KvEventBatch],
) -> AsyncIterator[common_pb2.KvEventBatch]:
    async with stream:
        try:
            async for batch in stream:
                yield batch
        except WorkerCallError as exc:
            if exc.code is grpc.StatusCode.UNIMPLEMENTED:
                raise KvEventsUnsupported(str(exc)) from None
            if exc.code in _EVENTS_LOST:
                raise KvEventsLost(str(exc)) from None
            raise


def loads_by_rank(response: pb.GetLoadsResponse) -> list[int]:
    """Running plus waiting requests per DP rank from a ``GetLoadsResponse`` (ranks it does not
    report count 0; a rank number out of range is ignored)."""
    size = max(int(response.dp_rank_count), len(response.loads), 1)
    counts = [0] * size
    for load in response.loads:
        if 0 <= load.dp_rank < size:
            counts[load.dp_rank] += int(load.num_running_reqs) + int(load.num_waiting_reqs)
    return counts


def client_settings(wire: WireSettings) -> ClientSettings:
    """The wire client's settings from the ``wire`` configuration section."""
    return ClientSettings(
        transport=wire.transport,
        keepalive_time_s=wire.keepalive_time_s,
        keepalive_timeout_s=wire.keepalive_timeout_s,
        connect_timeout_s=wire.connect_timeout_s,
        max_reconnect_backoff_s=wire.max_reconnect_backoff_s,
        busy_read_interval_s=wire.busy_read_interval_ms / 1000,
    )


def classify(exc: BaseException) -> WorkerRequestError | None:
    """Client errors (4xx) never count against a worker; 429 push-back is retried, not counted;
    a refused call (nothing ran) is sent again, not counted."""
    if not isinstance(exc, WorkerCallError):
        return None
    if isinstance(exc, UnsupportedByEngine):
        refused = WorkerRequestError(exc.message, status=400, worker_fault=False, detail=str(exc))
        refused.code = "unsupported_by_engine"
        refused.param = exc.field
        return refused
    if isinstance(exc, StreamRefused):
        return WorkerRequestError(
            "the worker refused the request while closing its connection",
            status=exc.http_status,
            worker_fault=False,
            retryable=True,
            refused=True,
            detail=str(exc),
        )
    pushback = exc.code in _PUSHBACK
    fault = exc.worker_fault and not pushback
    # The worker's own explanation of a refused request is for the client, and so is what was
    # malformed in its answer; transport details of a fault (addresses, socket errors) are for
    # the logs only.
    if not fault:
        public = exc.message or f"the worker refused the request ({exc.code.name})"
    elif isinstance(exc, MalformedResponse):
        public = exc.message
    else:
        public = f"the worker failed the request ({exc.code.name})"
    return WorkerRequestError(
        public,
        status=exc.http_status,
        worker_fault=fault,
        retryable=fault or exc.http_status in _RETRYABLE_STATUS,
        detail=str(exc),
    )


def _labels(info: Any) -> dict[str, str]:
    raw = json_format.MessageToDict(info, preserving_proto_field_name=True)
    return {key: _text(value) for key, value in raw.items() if value not in ("", None)}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, separators=(",", ":"))
