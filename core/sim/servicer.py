"""The simulated worker's implementation of ``sglang.grpc.scheduler.SglangScheduler``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Literal, NoReturn

import grpc
import grpc.aio
from google.protobuf import struct_pb2, timestamp_pb2

import turnout
from turnout.sim.disagg import BootstrapServer, DisaggError, PrefillRoom, receive_kv
from turnout.sim.embedding import embed_ids, embedding_dim
from turnout.sim.emitter import ChoiceEmitter
from turnout.sim.knobs import SimKnobs
from turnout.sim.kv_cache import KvEventLog, block_hashes
from turnout.sim.kv_stream import kv_event_stream
from turnout.sim.lora import SimAdapters
from turnout.sim.model import ChoicePlan, InvalidRequest, SimModel
from turnout.sim.multimodal import InvalidMultimodal, record_multimodal
from turnout.sim.ranks import Rank, Running
from turnout.sim.records import SimRecords
from turnout.sim.tokenizer_bundle import TokenizerArchive, build_archive
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc

__all__ = ["DEFAULT_KV_CACHE_TOKENS", "Role", "SimKnobs", "SimRecords", "SimServicer"]

SIM_VERSION: Final = f"turnout-sim/{turnout.__version__}"
_LOAD_SECTIONS: Final = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
#: Prefix cache per DP rank by default, tokens: more than a test or benchmark fills.
DEFAULT_KV_CACHE_TOKENS: Final = 1_000_000
#: Metadata keys of the W3C trace context, recorded per Generate request.
TRACE_CONTEXT_KEYS: Final = frozenset({"traceparent", "tracestate", "baggage"})

#: ``regular`` serves whole requests; ``prefill``/``decode`` are the two halves of a PD pair.
Role = Literal["regular", "prefill", "decode"]
#: SGLang's ``disaggregation_mode`` server argument for each role.
_MODES: Final = {"regular": "null", "prefill": "prefill", "decode": "decode"}


class SimServicer(pb_grpc.SglangSchedulerServicer):
    """Deterministic SGLang scheduler: answers from a ``SimModel``, paced by ``SimKnobs``.

    ``dp_size`` ranks (DP attention) share the endpoint, each with its own queue and load; a
    request's ``data_parallel_rank`` pins it, otherwise ranks take turns (SGLang's default
    ``round_robin``; PD workers follow ``bootstrap_room % dp_size``). A ``prefill`` or ``decode``
    role serves one half of a prefill-decode pair (see :mod:`turnout.sim.disagg`); a prefill
    servicer needs the ``bootstrap`` server its decode partners join.
    """

    def __init__(
        self,
        model: SimModel,
        knobs: SimKnobs | None = None,
        *,
        dp_size: int = 1,
        role: Role = "regular",
        bootstrap: BootstrapServer | None = None,
        adapters: SimAdapters | None = None,
        block_size: int = 16,
        kv_cache_tokens: int = DEFAULT_KV_CACHE_TOKENS,
        kv_events_keep: int = 10_000,
    ) -> None:
        if dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {dp_size!r}")
        if role not in _MODES:
            raise ValueError(f"role must be one of {sorted(_MODES)}, got {role!r}")
        if (role == "prefill") != (bootstrap is not None):
            raise ValueError("a prefill servicer (and only one) needs a bootstrap server")
        self.model = model
        self.knobs = knobs or SimKnobs()
        self.records = SimRecords()
        self.started = time.time()
        self.role: Role = role
        self.bootstrap = bootstrap
        #: The LoRA adapters loaded at start-up.
        self.adapters = adapters or SimAdapters()
        #: Every rank's KV events, numbered across the ranks (``dp_rank`` on each batch).
        self.kv_events = KvEventLog(kv_events_keep)
        self.ranks = [
            Rank(
                i,
                self._max_running,
                events=self.kv_events,
                block_size=block_size,
                kv_cache_tokens=kv_cache_tokens,
            )
            for i in range(dp_size)
        ]
        self.kv_cache_tokens = kv_cache_tokens
        self._next_rank = 0
        self._running: dict[str, Running] = {}
        self._last_receive = 0.0
        #: Called, in order, by a successful ``FlushCache`` once no request runs: the KV cache
        #: registers its flush here (which publishes a ``cleared`` event on the event stream).
        self.cache_flush_hooks: list[Callable[[], None]] = []
        #: Successful ``FlushCache`` calls so far.
        self.cache_flushes = 0
        #: The ``StartProfile`` request while the profiler runs; None while it does not.
        self.profiling: common_pb2.StartProfileRequest | None = None
        self._tokenizer_archive: TokenizerArchive | None = None
        if kv_cache_tokens:
            self.cache_flush_hooks.append(self._flush_kv_caches)

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks behind this endpoint."""
        return len(self.ranks)

    def _max_running(self) -> int:
        return self.knobs.max_running

    @property
    def capacity_tokens(self) -> int:
        """KV capacity per rank as reported: the prefix cache's, else ``max_total_tokens``."""
        return self.kv_cache_tokens or self.knobs.max_total_tokens

    # -- Generate ------------------------------------------------------------------------------

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.GenerateResponse]:
        """Stream the planned answer: chunks of delta token ids, then one complete per choice."""
        rid = request.request_id
        self._last_receive = time.time()
        self.records.note_request(request)
        self._record_trace_context(rid, context)
        kind = request.sampling_params.WhichOneof("constraint")
        if kind is not None:
            self.records.constraints.append(
                ("ebnf" if kind == "ebnf_grammar" else kind, getattr(request.sampling_params, kind))
            )
        if not request.HasField("tokenized"):
            await self._fail(
                context, rid, grpc.StatusCode.INVALID_ARGUMENT, "Tokenized input must be provided"
            )
        try:
            self._record_multimodal("Generate", rid, request)
        except InvalidMultimodal as exc:
            await self._fail(context, rid, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if request.lora_id:
            self.records.lora_ids[rid] = request.lora_id
            if not self.adapters.knows(request.lora_id):
                await self._fail(
                    context,
                    rid,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"LoRA adapter {request.lora_id!r} is not loaded",
                )
        if rid in self._running:
            await self._fail(
                context, rid, grpc.StatusCode.INVALID_ARGUMENT, f"duplicate request id {rid!r}"
            )
        try:
            plans = self.model.plan(request, context=self.knobs.context_answers)
        except InvalidRequest as exc:
            await self._fail(context, rid, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        room = self._bootstrap_room(request)
        if self.role != "regular" and room is None:
            await self._fail(
                context,
                rid,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a {self.role} server needs disaggregated_params "
                "(bootstrap_host, bootstrap_port, bootstrap_room)",
            )
        rank = self._pick_rank(request, room)
        if rank is None:
            await self._fail(
                context,
                rid,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"data_parallel_rank {request.data_parallel_rank} does not exist "
                f"(dp_size {self.dp_size})",
            )
        knobs = self.knobs
        faulty = self._take_fault()
        if faulty and knobs.fail_status:
            await self._fail(
                context,
                rid,
                grpc.StatusCode[knobs.fail_status],
                "simulated failure before the first token",
            )
        prompt = list(request.tokenized.input_ids)
        cache = rank.cache
        lora_name = self._adapter_name(request.lora_id)
        hashes = block_hashes(prompt, cache.block_size, lora_name) if cache.capacity_blocks else []
        uncached = len(prompt) - cache.peek(cache.matchable(len(prompt), hashes))
        state = Running(rid, len(prompt), rank)
        self._running[rid] = state
        rank.running[rid] = state
        rank.stats.requests += 1
        self.records.ranks[rid] = rank.index
        if self.role == "prefill":
            plans = [
                ChoicePlan(p.token_ids[:1], "length", None, min(p.reasoning_tokens, 1))
                for p in plans
            ]
        outcome = "error"
        prefill: PrefillRoom | None = None
        stream: ChoiceEmitter | None = None
        try:
            async with contextlib.AsyncExitStack() as legs:
                if room is not None:
                    prefill = await self._meet_other_leg(context, request, state, room, legs)
                await rank.acquire_slot(uncached)
                try:
                    # Matched at admission: the cache may have changed while it waited.
                    state.holding, cached = cache.hold(prompt, hashes, lora_name)
                    rank.stats.prompt_tokens += len(prompt)
                    rank.stats.cached_tokens += cached
                    rank.begin_prefill(state)
                    if self.role != "decode":  # a decode server starts from the sent KV
                        await state.sleep(knobs.ttft_ms / 1000)
                        await rank.prefill(state, len(prompt) - cached, knobs.prefill_tokens_per_s)
                    if faulty and knobs.hang:
                        await state.aborted.wait()
                    if self.role == "prefill" and not state.aborted.is_set():
                        assert prefill is not None
                        prefill.transfer()
                    stream = ChoiceEmitter(
                        self,
                        request=request,
                        plans=plans,
                        prompt_tokens=len(prompt),
                        cached=cached,
                        state=state,
                        faulty=faulty,
                        context=context,
                    )
                    async for response in stream.run():
                        # Waiting for the transport (a client that reads slowly) is not the
                        # engine going quiet: a real engine keeps stepping and buffers.
                        rank.delivering += 1
                        try:
                            yield response
                        finally:
                            rank.delivering -= 1
                            rank.last_output = time.monotonic()
                    outcome = stream.outcome
                finally:
                    await rank.release_slot()
        except (asyncio.CancelledError, GeneratorExit):
            # The caller went away: gRPC cancels the handler, or closes this generator at a
            # yield when the stream is gone by the time a message is sent (an abort's last one).
            outcome = "cancelled"
            rank.stats.cancelled += 1
            raise
        finally:
            self.records.outcomes[rid] = outcome
            self._running.pop(rid, None)
            rank.running.pop(rid, None)
            rank.end_prefill(state)
            if state.holding is not None:
                if stream is not None:  # its generated tokens are cached too, as SGLang's
                    cache.extend(state.holding, prompt + stream.generated_ids())
                cache.release(state.holding)

    def _adapter_name(self, lora_id: str) -> str | None:
        """The name of the adapter ``lora_id`` names: the prefix cache's namespace."""
        if not lora_id:
            return None
        return next((a.name for a in self.adapters.by_name.values() if a.lora_id == lora_id), None)

    def _bootstrap_room(self, request: pb.GenerateRequest) -> int | None:
        """The request's ``bootstrap_room``; None without a usable rendezvous address (as
        SGLang's servicer, an empty host or port 0 means none)."""
        if not request.HasField("disaggregated_params"):
            return None
        params = request.disaggregated_params
        if not params.bootstrap_host or params.bootstrap_port <= 0:
            return None
        return params.bootstrap_room

    def _pick_rank(self, request: pb.GenerateRequest, room: int | None) -> Rank | None:
        """The pinned rank (None when out of range), else the scheduler's own choice."""
        ranks = self.ranks
        if request.HasField("data_parallel_rank") and request.data_parallel_rank >= 0:
            pinned = request.data_parallel_rank
            return ranks[pinned] if pinned < len(ranks) else None
        if room is not None:  # SGLang's DP controller in PD mode: follow the bootstrap room
            return ranks[room % len(ranks)]
        rank = ranks[self._next_rank % len(ranks)]
        self._next_rank = rank.index + 1
        return rank

    async def _meet_other_leg(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        request: pb.GenerateRequest,
        state: Running,
        room: int,
        legs: contextlib.AsyncExitStack,
    ) -> PrefillRoom | None:
        """Wait for the other half of the PD pair (returns early when the request is aborted).

        A prefill leg holds its room in ``legs`` and gets the handle to send the KV with; a
        decode leg returns once the KV arrived. A failed rendezvous fails the call as SGLang
        does (INTERNAL, before any output).
        """
        timeout = self.knobs.bootstrap_timeout_s
        prompt = request.tokenized.input_ids
        state.rank.disagg_waiting += 1
        try:
            if self.role == "prefill":
                assert self.bootstrap is not None
                try:
                    handle = await legs.enter_async_context(self.bootstrap.prefill(room, prompt))
                except DisaggError as exc:
                    await self._fail(
                        context, state.request_id, grpc.StatusCode.INVALID_ARGUMENT, str(exc)
                    )
                await handle.wait_for_decode(timeout, state.aborted)
                return handle
            params = request.disaggregated_params
            await receive_kv(
                params.bootstrap_host,
                params.bootstrap_port,
                room,
                prompt,
                within_s=timeout,
                aborted=state.aborted,
            )
            return None
        except DisaggError as exc:
            await self._fail(context, state.request_id, grpc.StatusCode.INTERNAL, str(exc))
        finally:
            state.rank.disagg_waiting -= 1

    async def _fail(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        rid: str,
        code: grpc.StatusCode,
        message: str,
    ) -> NoReturn:
        self.records.outcomes[rid] = "error"
        await context.abort(code, message)
        raise AssertionError("context.abort returned")  # pragma: no cover

    def _take_fault(self) -> bool:
        knobs = self.knobs
        if not (knobs.fail_status or knobs.fail_after_tokens is not None or knobs.hang):
            return False
        if knobs.fault_budget is None:
            return True
        if knobs.fault_budget <= 0:
            return False
        knobs.fault_budget -= 1
        return True

    # -- unary RPCs ----------------------------------------------------------------------------

    async def Abort(
        self, request: pb.AbortRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AbortResponse:
        """Stop a running request: its stream ends with finish_reason "abort"."""
        rid = request.request_id
        self.records.aborted.append(rid)
        state = self._running.get(rid)
        if state is None:
            return pb.AbortResponse(success=False, message=f"Request {rid} not found")
        state.abort()
        return pb.AbortResponse(success=True, message=f"Request {rid} aborted")

    async def HealthCheck(
        self, request: pb.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HealthCheckResponse:
        """Healthy unless the ``unhealthy`` knob is set."""
        self.records.health_checks += 1
        if self.knobs.unhealthy:
            return pb.HealthCheckResponse(healthy=False, message="simulated fault: unhealthy")
        return pb.HealthCheckResponse(
            healthy=True, message="Health check passed (simulated worker)"
        )

    async def GetModelInfo(
        self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetModelInfoResponse:
        """The model directory's facts; ``weight_version`` says this is a simulator."""
        files = self.model.files
        config = files.config
        gen = files.generation_config
        defaults = {
            k: gen[k]
            for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
            if k in gen
        }
        shown = self._shown_model_path()
        return pb.GetModelInfoResponse(
            model_path=shown,
            tokenizer_path=shown,
            is_generation=True,
            weight_version=SIM_VERSION,
            served_model_name=files.served_model_name,
            max_context_length=files.context_length,
            vocab_size=self.model.vocab_size,
            supports_vision=isinstance(config.get("vision_config"), dict),
            model_type=str(config.get("model_type", "")),
            eos_token_ids=list(files.eos_token_ids),
            pad_token_id=int(config.get("pad_token_id") or 0),
            bos_token_id=int(config.get("bos_token_id") or 0),
            max_req_input_len=files.context_length - 1,
            architectures=[str(a) for a in config.get("architectures", [])],
            default_sampling_params_json=json.dumps(defaults) if defaults else "",
        )

    def _shown_model_path(self) -> str:
        return self.knobs.reported_model_path or str(self.model.files.path)

    async def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetServerInfoResponse:
        """Server arguments (with ``simulated: true``), uptime and activity."""
        files = self.model.files
        args = struct_pb2.Struct()
        args.update(
            {
                "model_path": self._shown_model_path(),
                "served_model_name": files.served_model_name,
                "tp_size": 1,
                "dp_size": self.dp_size,
                "enable_dp_attention": self.dp_size > 1,
                "max_running_requests": self.knobs.max_running,
                "context_length": files.context_length,
                "disaggregation_mode": _MODES[self.role],
                "simulated": True,
                "knobs": self.knobs.as_dict(),
                "lora_paths": self.adapters.server_args(),
                # SGLang's names for the prefix cache: its block size, and whether it is off.
                "page_size": self.ranks[0].cache.block_size,
                "disable_radix_cache": not self.kv_cache_tokens,
            }
        )
        if self.bootstrap is not None:
            args.update({"disaggregation_bootstrap_port": self.bootstrap.port})
        scheduler = struct_pb2.Struct()
        scheduler.update({"simulated": True, "max_total_num_tokens": self.capacity_tokens})
        start = timestamp_pb2.Timestamp()
        start.FromNanoseconds(int(self.started * 1e9))
        return pb.GetServerInfoResponse(
            server_args=args,
            scheduler_info=scheduler,
            active_requests=len(self._running),
            is_paused=False,
            last_receive_timestamp=self._last_receive,
            uptime_seconds=time.time() - self.started,
            sglang_version=SIM_VERSION,
            server_type="turnout-sim",
            start_time=start,
            max_total_num_tokens=self.capacity_tokens,
        )

    async def ListLoadedLoRAAdapters(
        self,
        request: pb.ListLoadedLoRAAdaptersRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListLoadedLoRAAdaptersResponse:
        """The adapters loaded at start-up (UNIMPLEMENTED while ``lists_adapters`` is off)."""
        if not self.knobs.lists_adapters:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        return self.adapters.listed()

    # -- run-time LoRA adapters ----------------------------------------------------------------

    async def LoadLoRAAdapter(
        self, request: pb.LoadLoRAAdapterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LoadLoRAAdapterResponse:
        """Add an adapter under the caller's ``lora_id``; refused (``success`` false) when the
        name or id is taken or a field is missing."""
        error = self.adapters.load(
            request.lora_name, request.lora_path, request.lora_id, pinned=request.pinned
        )
        return pb.LoadLoRAAdapterResponse(
            success=not error, message=error, loaded_lora_ids=self.adapters.loaded_ids()
        )

    async def UnloadLoRAAdapter(
        self, request: pb.UnloadLoRAAdapterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UnloadLoRAAdapterResponse:
        """Drop an adapter; requests naming its id are then refused (NOT_FOUND)."""
        error = self.adapters.unload(request.lora_name, request.lora_id)
        return pb.UnloadLoRAAdapterResponse(
            success=not error, message=error, loaded_lora_ids=self.adapters.loaded_ids()
        )

    # -- tokenizer, cache flush, profiler -------------------------------------------------------

    async def GetTokenizer(
        self,
        request: common_pb2.GetTokenizerRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[common_pb2.GetTokenizerChunk]:
        """The model directory's tokenizer files as a zip in 64 KiB chunks, the SHA-256 on the
        last (FAILED_PRECONDITION when the directory has none)."""
        if not self.knobs.serves_tokenizer:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        if self._tokenizer_archive is None:
            try:
                archive = await asyncio.to_thread(build_archive, self.model.files.path)
            except FileNotFoundError as exc:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            self._tokenizer_archive = archive
        for data, sha256 in self._tokenizer_archive.chunks():
            yield common_pb2.GetTokenizerChunk(data=data, sha256=sha256)

    async def FlushCache(
        self, request: common_pb2.FlushCacheRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> common_pb2.FlushCacheResponse:
        """Drop the prefix cache once no request runs, waiting up to ``timeout_s`` for that
        (0: refuse at once while any runs), as SGLang's scheduler does."""
        deadline = time.monotonic() + max(float(request.timeout_s), 0.0)
        # Polled: a request leaves ``_running`` from several places, none of which signal.
        while self._running and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))
        if self._running:
            return common_pb2.FlushCacheResponse(
                success=False,
                message=(
                    f"Cache not flushed: {len(self._running)} requests are running "
                    "(pass a timeout to wait for them)"
                ),
            )
        for hook in self.cache_flush_hooks:
            hook()
        self.cache_flushes += 1
        return common_pb2.FlushCacheResponse(success=True, message="Cache flushed successfully")

    def _flush_kv_caches(self) -> None:
        for rank in self.ranks:
            rank.cache.flush()

    async def SubscribeKvEvents(
        self,
        request: common_pb2.SubscribeKvEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The prefix caches' stores, evictions and flushes with each rank's load, resumable
        (see :mod:`turnout.sim.kv_stream`); UNIMPLEMENTED without a cache, as SGLang without
        KV events."""
        if not self.kv_cache_tokens:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "KV cache events need a prefix cache (--kv-cache-tokens > 0)",
            )
        async for batch in kv_event_stream(self, request, context):
            yield batch

    async def StartProfile(
        self, request: common_pb2.StartProfileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> common_pb2.ProfileResponse:
        """Mark the profiler on (refused while it already is)."""
        if self.profiling is not None:
            return common_pb2.ProfileResponse(
                success=False,
                message="Profiling is already in progress. Call StopProfile first.",
            )
        self.profiling = request
        return common_pb2.ProfileResponse(success=True, message="Start profiling succeeded")

    async def StopProfile(
        self, request: common_pb2.StopProfileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> common_pb2.ProfileResponse:
        """Mark the profiler off (refused while it is not on)."""
        if self.profiling is None:
            return common_pb2.ProfileResponse(
                success=False,
                message="Profiling is not in progress. Call StartProfile first.",
            )
        self.profiling = None
        return common_pb2.ProfileResponse(success=True, message="Stop profiling succeeded")

    async def GetLoads(
        self, request: pb.GetLoadsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetLoadsResponse:
        """What each DP rank really has: running (holding a slot), waiting, tokens in use."""
        include = set(request.include) or {"core"}
        unknown = include - _LOAD_SECTIONS
        if unknown:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unknown include sections {sorted(unknown)}"
            )
        ranks = self.ranks
        if request.HasField("dp_rank"):
            if not 0 <= request.dp_rank < len(ranks):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"dp_rank {request.dp_rank} does not exist (dp_size {len(ranks)})",
                )
            ranks = [ranks[request.dp_rank]]
        capacity = self.capacity_tokens
        uptime = time.time() - self.started
        mode = _MODES[self.role]
        loads = [
            r.load(capacity=capacity, uptime_s=uptime, include=include, mode=mode) for r in ranks
        ]
        count = len(loads)
        aggregate = pb.AggregateMetrics(
            total_running_reqs=sum(x.num_running_reqs for x in loads),
            total_waiting_reqs=sum(x.num_waiting_reqs for x in loads),
            total_reqs=sum(x.num_total_reqs for x in loads),
            avg_token_usage=sum(x.token_usage for x in loads) / count,
            avg_throughput=sum(x.gen_throughput for x in loads) / count,
            avg_utilization=sum(x.utilization for x in loads) / count,
        )
        return pb.GetLoadsResponse(
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            version=SIM_VERSION,
            dp_rank_count=self.dp_size,
            loads=loads,
            aggregate=aggregate,
        )

    async def Embed(
        self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.EmbedResponse:
        """The deterministic unit vector of the token ids (see :mod:`turnout.sim.embedding`).

        ``fail_status`` and ``hang`` apply as to Generate (within ``fault_budget``), and
        ``ttft_ms`` delays the answer."""
        self._last_receive = time.time()
        self.records.note_embed(request)
        self._record_trace_context(request.request_id, context)
        self._record_multimodal("Embed", request.request_id, request)
        ids = request.tokenized.input_ids
        if not ids:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "Tokenized input must be provided"
            )
        try:
            self.model.check_vocabulary(ids)
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        knobs = self.knobs
        if (knobs.fail_status or knobs.hang) and self._take_fault():
            if knobs.fail_status:
                await context.abort(
                    grpc.StatusCode[knobs.fail_status], "simulated failure of Embed"
                )
            await asyncio.Event().wait()  # hang until the call is cancelled
        if knobs.ttft_ms > 0:
            await asyncio.sleep(knobs.ttft_ms / 1000)
        vector = embed_ids(ids, embedding_dim(self.model.files.config))
        return pb.EmbedResponse(embedding_dim=len(vector), embedding=vector, prompt_tokens=len(ids))

    def _record_trace_context(self, rid: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        trace_context = {
            key: value
            for key, value in context.invocation_metadata() or ()
            if key in TRACE_CONTEXT_KEYS and isinstance(value, str)
        }
        if trace_context:
            self.records.metadata[rid] = trace_context

    def _record_multimodal(
        self,
        rpc: Literal["Generate", "Embed"],
        rid: str,
        request: pb.GenerateRequest | pb.EmbedRequest,
    ) -> None:
        """Keep the request's ``mm_inputs``, if any (``InvalidMultimodal`` as SGLang refuses)."""
        if request.HasField("mm_inputs"):
            self.records.multimodal.append(
                record_multimodal(rpc, rid, request.mm_inputs, request.tokenized.input_ids)
            )
