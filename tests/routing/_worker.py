"""A tiny real gRPC SGLang-scheduler worker for routing tests (loopback sockets only).

Knobs are plain attributes changed at run time. ``stop()``/``start()`` keep the port, so a
"restarted" worker comes back at the same address.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio

from turnout.testing.router import free_port
from turnout.wire import pb
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc


class TestWorker(pb_grpc.SglangSchedulerServicer):
    """Streams ``chunks`` one-token chunks then a complete, ``chunk_delay`` apart."""

    __test__ = False

    def __init__(self, model: str = "m", port: int | None = None) -> None:
        self.model = model
        self.port = port or free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.chunks = 3
        self.chunk_delay = 0.0
        self.first_delay = 0.0
        self.healthy = True
        self.health_delay = 0.0
        #: Fail Generate before the first response with this status (None: succeed).
        self.fail_code: grpc.StatusCode | None = None
        self.fail_after_first: grpc.StatusCode | None = None
        self.reported_load = 0
        #: Embed answers after this many seconds (it may be cancelled meanwhile).
        self.embed_delay = 0.0
        self.embeds = 0
        self.generates = 0
        self.served = 0
        self.health_checks = 0
        self.aborted: list[str] = []
        self.active = 0
        #: KV-event batches to stream to subscribers (None: SubscribeKvEvents is UNIMPLEMENTED).
        #: A status code queued ends the stream with it.
        self.kv_batches: asyncio.Queue[common_pb2.KvEventBatch | grpc.StatusCode] | None = None
        #: Refuse a non-zero ``start_sequence_number`` with OUT_OF_RANGE (nothing kept to resume).
        self.refuse_resume = False
        #: Load-only heartbeats every this many seconds while no batch is queued (0: none),
        #: carrying ``heartbeat_load``.
        self.heartbeat_s = 0.0
        self.heartbeat_load = common_pb2.EngineLoad()
        #: When set (loop time), heartbeats report the engine silent since then.
        self.silent_since: float | None = None
        #: The ``start_sequence_number`` of each subscription.
        self.kv_starts: list[int] = []
        self.kv_subscribers = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> TestWorker:
        server = grpc.aio.server()
        pb_grpc.add_SglangSchedulerServicer_to_server(self, server)
        server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def Generate(self, request: Any, context: Any) -> Any:
        self.generates += 1
        if self.fail_code is not None:
            await context.abort(self.fail_code, f"injected {self.fail_code.name}")
        self.active += 1
        try:
            if self.first_delay:
                await asyncio.sleep(self.first_delay)
            for i in range(self.chunks):
                if i == 1 and self.fail_after_first is not None:
                    await context.abort(self.fail_after_first, "injected mid-stream failure")
                yield pb.GenerateResponse(
                    request_id=request.request_id,
                    chunk=pb.GenerateStreamChunk(token_ids=[100 + i], completion_tokens=i + 1),
                )
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
            yield pb.GenerateResponse(
                request_id=request.request_id,
                complete=pb.GenerateComplete(output_ids=[], finish_reason="stop"),
            )
            self.served += 1
        finally:
            self.active -= 1

    async def Embed(self, request: Any, context: Any) -> Any:
        """A two-dimensional vector: (prompt tokens, this worker's port); fails with
        ``fail_code`` like Generate."""
        self.embeds += 1
        if self.fail_code is not None:
            await context.abort(self.fail_code, f"injected {self.fail_code.name}")
        self.active += 1
        try:
            if self.embed_delay:
                await asyncio.sleep(self.embed_delay)
        finally:
            self.active -= 1
        ids = list(request.tokenized.input_ids)
        return pb.EmbedResponse(
            embedding_dim=2, embedding=[float(len(ids)), float(self.port)], prompt_tokens=len(ids)
        )

    async def HealthCheck(self, request: Any, context: Any) -> Any:
        self.health_checks += 1
        if self.health_delay:
            await asyncio.sleep(self.health_delay)
        return pb.HealthCheckResponse(healthy=self.healthy, message="ok" if self.healthy else "bad")

    async def GetModelInfo(self, request: Any, context: Any) -> Any:
        return pb.GetModelInfoResponse(
            model_path=f"/models/{self.model}",
            served_model_name=self.model,
            max_context_length=4096,
        )

    async def GetServerInfo(self, request: Any, context: Any) -> Any:
        return pb.GetServerInfoResponse(sglang_version="test")

    async def GetLoads(self, request: Any, context: Any) -> Any:
        return pb.GetLoadsResponse(
            loads=[pb.SchedulerLoad(num_running_reqs=self.reported_load, num_waiting_reqs=0)]
        )

    async def SubscribeKvEvents(self, request: Any, context: Any) -> Any:
        """Streams the queued ``kv_batches``, and heartbeats while none is queued."""
        batches = self.kv_batches
        if batches is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no KV events")
            return
        self.kv_starts.append(request.start_sequence_number)
        if self.refuse_resume and request.start_sequence_number:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, "nothing to resume from")
            return
        self.kv_subscribers += 1
        try:
            while True:
                try:
                    async with asyncio.timeout(self.heartbeat_s or None):
                        batch = await batches.get()
                except TimeoutError:
                    load = common_pb2.EngineLoad()
                    load.CopyFrom(self.heartbeat_load)
                    load.load_only = True
                    if self.silent_since is not None:
                        silent = asyncio.get_running_loop().time() - self.silent_since
                        load.engine_silence_ms = int(silent * 1000)
                    batch = common_pb2.KvEventBatch(load=load)
                if isinstance(batch, grpc.StatusCode):
                    await context.abort(batch, "scripted end")
                yield batch
        finally:
            self.kv_subscribers -= 1

    async def Abort(self, request: Any, context: Any) -> Any:
        self.aborted.append(request.request_id)
        return pb.AbortResponse(success=True)


def make_request(rid: str = "r", tokens: tuple[int, ...] = (1, 2, 3)) -> Any:
    return pb.GenerateRequest(
        request_id=rid,
        tokenized=pb.TokenizedInput(input_ids=list(tokens)),
        sampling_params=pb.SamplingParams(max_new_tokens=8),
    )
