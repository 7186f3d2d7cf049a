"""The simulated worker's implementation of ``sglang.grpc.scheduler.SglangScheduler``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, Literal, NoReturn

import grpc
import grpc.aio
from google.protobuf import struct_pb2, timestamp_pb2

import turnout
from turnout.sim.disagg import BootstrapServer, DisaggError, PrefillRoom, receive_kv
from turnout.sim.embedding import embed_ids, embedding_dim
from turnout.sim.lora import SimAdapters
from turnout.sim.model import (
    ChoicePlan,
    InvalidRequest,
    SimModel,
    synthetic_logprob,
    top_logprobs,
)
from turnout.sim.multimodal import InvalidMultimodal, MultimodalRecord, record_multimodal
from turnout.sim.ranks import Rank, Running
from turnout.sim.tokenizer_bundle import TokenizerArchive, build_archive
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc

__all__ = ["Role", "SimKnobs", "SimRecords", "SimServicer"]

SIM_VERSION: Final = f"turnout-sim/{turnout.__version__}"
_LOAD_SECTIONS: Final = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
#: Metadata keys of the W3C trace context, recorded per Generate request.
TRACE_CONTEXT_KEYS: Final = frozenset({"traceparent", "tracestate", "baggage"})

#: ``regular`` serves whole requests; ``prefill``/``decode`` are the two halves of a PD pair.
Role = Literal["regular", "prefill", "decode"]
#: SGLang's ``disaggregation_mode`` server argument for each role.
_MODES: Final = {"regular": "null", "prefill": "prefill", "decode": "decode"}


@dataclass
class SimKnobs:
    """Behaviour knobs; change them at any time (they are read per request / per chunk)."""

    #: Delay per generated token, milliseconds.
    delay_ms: float = 0.0
    #: Up to this much more per token, drawn uniformly per chunk (GPU-like pacing), milliseconds.
    delay_jitter_ms: float = 0.0
    #: Extra delay before the first token (prefill), milliseconds.
    ttft_ms: float = 0.0
    #: Tokens per streamed chunk (a request's ``stream_interval`` overrides it).
    tokens_per_chunk: int = 1
    #: Fail Generate (before the first chunk) and Embed with this gRPC status name (e.g.
    #: "UNAVAILABLE").
    fail_status: str | None = None
    #: Fail Generate after this many tokens of choice 0 (status ``fail_after_status``).
    fail_after_tokens: int | None = None
    fail_after_status: str = "INTERNAL"
    #: Generate and Embed never answer (until cancelled, or a Generate aborted).
    hang: bool = False
    #: HealthCheck answers healthy=false.
    unhealthy: bool = False
    #: Apply fail_status / fail_after_tokens / hang to this many more requests only (None: all).
    fault_budget: int | None = None
    #: Requests generating at once per DP rank; later ones queue (0: unlimited).
    max_running: int = 0
    #: KV capacity reported by GetLoads / GetServerInfo, tokens.
    max_total_tokens: int = 65536
    #: Prefill-decode rendezvous deadline, seconds (SGLang's bootstrap and KV waiting timeouts).
    bootstrap_timeout_s: float = 300.0
    #: Answer ``ListLoadedLoRAAdapters`` (False: UNIMPLEMENTED, as SGLang before mid 2026).
    lists_adapters: bool = True
    #: Each next token follows from the last few of the context (``SimModel.plan``), and a
    #: token's synthetic logprob from its place in the context: a request continued elsewhere
    #: from the prompt and what was generated is answered as the first simulator would have.
    context_answers: bool = False

    def update(self, changes: dict[str, Any]) -> None:
        """Set several knobs; ``ValueError`` names an unknown knob or a bad status name."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}; known: {sorted(names)}")
        for key in ("fail_status", "fail_after_status"):
            value = changes.get(key)
            if value is not None and value not in grpc.StatusCode.__members__:
                raise ValueError(f"{key} must be a gRPC status name, got {value!r}")
        for key, value in changes.items():
            setattr(self, key, value)

    def as_dict(self) -> dict[str, Any]:
        """Current values."""
        return asdict(self)


@dataclass
class SimRecords:
    """What the simulator saw, for tests to assert on.

    Each collection keeps at most about twice ``keep`` entries (the newest ``keep`` survive a
    trim), so a simulator under a long benchmark does not grow without bound.
    """

    keep: int = 10_000

    requests: list[pb.GenerateRequest] = field(default_factory=list)
    #: (kind, value) of each constraint received: kind is json_schema/regex/ebnf/structural_tag.
    constraints: list[tuple[str, str]] = field(default_factory=list)
    #: Request ids named by Abort calls, in order.
    aborted: list[str] = field(default_factory=list)
    #: request id → how its generation ended: stop/length/abort/cancelled/error.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: request id → tokens generated (all choices).
    generated: dict[str, int] = field(default_factory=dict)
    #: request id → the DP rank that served it.
    ranks: dict[str, int] = field(default_factory=dict)
    health_checks: int = 0
    #: EmbedRequests received, in order.
    embed_requests: list[pb.EmbedRequest] = field(default_factory=list)
    #: The ``mm_inputs`` of Generate and Embed requests that carried one, in order.
    multimodal: list[MultimodalRecord] = field(default_factory=list)
    #: request id → the W3C trace context (``traceparent``, …) its Generate or Embed call carried.
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    #: request id → the ``lora_id`` its Generate request named (requests without one: absent).
    lora_ids: dict[str, str] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget everything recorded."""
        self.requests.clear()
        self.constraints.clear()
        self.aborted.clear()
        self.outcomes.clear()
        self.generated.clear()
        self.ranks.clear()
        self.health_checks = 0
        self.embed_requests.clear()
        self.multimodal.clear()
        self.metadata.clear()
        self.lora_ids.clear()

    def note_request(self, request: pb.GenerateRequest) -> None:
        """Record a Generate request; trim every collection to the newest ``keep`` entries when
        the requests reach twice that (amortised: one trim per ``keep`` requests)."""
        self.requests.append(request)
        if len(self.requests) >= 2 * self.keep:
            self.trim()

    def note_embed(self, request: pb.EmbedRequest) -> None:
        """Record an Embed request (trimmed like :meth:`note_request`)."""
        self.embed_requests.append(request)
        if len(self.embed_requests) >= 2 * self.keep:
            self.trim()

    def trim(self) -> None:
        """Keep the newest ``keep`` entries of every collection."""
        keep = self.keep
        for entries in (
            self.requests,
            self.constraints,
            self.aborted,
            self.embed_requests,
            self.multimodal,
        ):
            del entries[:-keep]
        for name in ("outcomes", "generated", "ranks", "metadata", "lora_ids"):
            table: dict[str, Any] = getattr(self, name)
            if len(table) > keep:
                setattr(self, name, dict(list(table.items())[-keep:]))


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
        self.ranks = [Rank(i, self._max_running) for i in range(dp_size)]
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

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks behind this endpoint."""
        return len(self.ranks)

    def _max_running(self) -> int:
        return self.knobs.max_running

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
        cached = rank.cached_prefix(prompt)
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
        try:
            async with contextlib.AsyncExitStack() as legs:
                if room is not None:
                    prefill = await self._meet_other_leg(context, request, state, room, legs)
                await rank.acquire_slot()
                try:
                    if self.role != "decode":  # a decode server starts from the sent KV
                        await state.sleep(knobs.ttft_ms / 1000)
                    if faulty and knobs.hang:
                        await state.aborted.wait()
                    if self.role == "prefill" and not state.aborted.is_set():
                        assert prefill is not None
                        prefill.transfer()
                    stream = _Emitter(
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
                        yield response
                    outcome = stream.outcome
                finally:
                    await rank.release_slot()
        except (asyncio.CancelledError, GeneratorExit):
            # The caller went away: gRPC cancels the handler, or closes this generator at a
            # yield when the stream is gone by the time a message is sent (an abort's last one).
            outcome = "cancelled"
            raise
        finally:
            self.records.outcomes[rid] = outcome
            self._running.pop(rid, None)
            rank.running.pop(rid, None)

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
        return pb.GetModelInfoResponse(
            model_path=str(files.path),
            tokenizer_path=str(files.path),
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

    async def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetServerInfoResponse:
        """Server arguments (with ``simulated: true``), uptime and activity."""
        files = self.model.files
        args = struct_pb2.Struct()
        args.update(
            {
                "model_path": str(files.path),
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
            }
        )
        if self.bootstrap is not None:
            args.update({"disaggregation_bootstrap_port": self.bootstrap.port})
        scheduler = struct_pb2.Struct()
        scheduler.update({"simulated": True, "max_total_num_tokens": self.knobs.max_total_tokens})
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
            max_total_num_tokens=self.knobs.max_total_tokens,
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
        capacity = self.knobs.max_total_tokens
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


class _Emitter:
    """Streams the planned choices of one request chunk by chunk (choices advance together)."""

    def __init__(
        self,
        servicer: SimServicer,
        *,
        request: pb.GenerateRequest,
        plans: list[ChoicePlan],
        prompt_tokens: int,
        cached: int,
        state: Running,
        faulty: bool,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.servicer = servicer
        self.request = request
        self.plans = plans
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.state = state
        self.faulty = faulty
        self.context = context
        self.outcome = "stop"
        params = request.sampling_params
        self.per_chunk = params.stream_interval if params.HasField("stream_interval") else 0
        self.logprobs = request.return_logprob
        # In a PD pair, prompt logprobs come from the prefill leg only.
        self.input_logprobs = request.logprob_start_len >= 0 and servicer.role != "decode"
        self.top_k = max(request.top_logprobs_num, 0)
        #: Where the answer's first token sits for its synthetic logprobs: in the context for
        #: context answers (the same token at the same place, whichever worker generates it).
        self.first_position = prompt_tokens if servicer.knobs.context_answers else 0

    async def run(self) -> AsyncIterator[pb.GenerateResponse]:
        rid = self.request.request_id
        stream = self.request.stream
        knobs = self.servicer.knobs
        sent = [0] * len(self.plans)
        done = [False] * len(self.plans)
        last: list[list[int]] = [[] for _ in self.plans]
        first = True
        while not all(done):
            step = max(self.per_chunk or knobs.tokens_per_chunk, 1)
            if self.state.aborted.is_set():
                break
            fail_at = knobs.fail_after_tokens if self.faulty else None
            if fail_at is not None and sent[0] >= fail_at:
                self.outcome = "error"
                await self.context.abort(
                    grpc.StatusCode[knobs.fail_after_status],
                    f"simulated failure after {sent[0]} tokens",
                )
            if fail_at is not None:
                step = min(step, max(fail_at - sent[0], 1))
            emitted = 0
            for index, plan in enumerate(self.plans):
                if done[index]:
                    continue
                start = sent[index]
                ids = plan.token_ids[start : start + step]
                sent[index] += len(ids)
                emitted += len(ids)
                last[index] = ids
                finished = sent[index] >= len(plan.token_ids)
                if stream and (ids or first):
                    yield pb.GenerateResponse(
                        request_id=rid, chunk=self._chunk(index, plan, start, ids, first)
                    )
                if finished:
                    done[index] = True
                    yield pb.GenerateResponse(
                        request_id=rid,
                        complete=self._complete(
                            index,
                            plan,
                            last[index] if stream else plan.token_ids,
                            plan.finish_reason,
                            stream,
                        ),
                    )
            first = False
            self.state.rank.count_tokens(emitted)
            self.state.tokens += emitted
            self.servicer.records.generated[rid] = sum(sent)
            if not all(done):
                per_token = knobs.delay_ms + knobs.delay_jitter_ms * random.random()
                await self.state.sleep(per_token * step / 1000)
        if self.state.aborted.is_set() and not all(done):
            self.outcome = "abort"
            for index, plan in enumerate(self.plans):
                if not done[index]:
                    cut = ChoicePlan(plan.token_ids[: sent[index]], "length")
                    yield pb.GenerateResponse(
                        request_id=rid,
                        complete=self._complete(
                            index, cut, [] if stream else cut.token_ids, "abort", stream
                        ),
                    )
            return
        reasons = {p.finish_reason for p in self.plans}
        self.outcome = "stop" if reasons == {"stop"} else "length"

    def _chunk(
        self, index: int, plan: ChoicePlan, start: int, ids: list[int], first: bool
    ) -> pb.GenerateStreamChunk:
        end = start + len(ids)
        chunk = pb.GenerateStreamChunk(
            token_ids=ids,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=end,
            cached_tokens=self.cached,
            reasoning_tokens=min(end, plan.reasoning_tokens),
            index=index,
        )
        if self.logprobs:
            chunk.output_logprobs.CopyFrom(self._output_logprobs(ids, start))
            if first and self.input_logprobs:
                chunk.input_logprobs.CopyFrom(self._input_logprobs())
        return chunk

    def _complete(
        self, index: int, plan: ChoicePlan, output_ids: list[int], reason: str, stream: bool
    ) -> pb.GenerateComplete:
        complete = pb.GenerateComplete(
            output_ids=output_ids,
            finish_reason=reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=len(plan.token_ids),
            cached_tokens=self.cached,
            reasoning_tokens=plan.reasoning_tokens,
            index=index,
        )
        if plan.matched_token_id is not None and reason == "stop":
            complete.matched_token_id = plan.matched_token_id
        if self.logprobs and not stream:
            complete.output_logprobs.CopyFrom(self._output_logprobs(plan.token_ids, 0))
            if self.input_logprobs:
                complete.input_logprobs.CopyFrom(self._input_logprobs())
        return complete

    def _output_logprobs(self, ids: Iterable[int], start: int) -> pb.OutputLogProbs:
        ids = list(ids)
        at = self.first_position + start
        out = pb.OutputLogProbs(
            token_logprobs=[synthetic_logprob(t, at + i) for i, t in enumerate(ids)],
            token_ids=ids,
        )
        if self.top_k:
            vocab = self.servicer.model.vocab_size
            for i, t in enumerate(ids):
                values, top_ids = top_logprobs(t, at + i, self.top_k, vocab)
                out.top_logprobs.append(pb.TopLogProbs(values=values, token_ids=top_ids))
        return out

    def _input_logprobs(self) -> pb.InputLogProbs:
        prompt = list(self.request.tokenized.input_ids)[self.request.logprob_start_len :]
        out = pb.InputLogProbs(token_ids=prompt)
        vocab = self.servicer.model.vocab_size
        for i, t in enumerate(prompt):
            position = self.request.logprob_start_len + i
            entry = pb.InputTokenLogProb()
            if position > 0:  # the very first prompt token has no logprob
                entry.value = synthetic_logprob(t, position)
            out.token_logprobs.append(entry)
            if self.top_k:
                values, top_ids = top_logprobs(t, position, self.top_k, vocab)
                out.top_logprobs.append(pb.TopLogProbs(values=values, token_ids=top_ids))
        return out
