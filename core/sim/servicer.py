"""The simulated worker's implementation of ``sglang.grpc.scheduler.SglangScheduler``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, NoReturn

import grpc
import grpc.aio
from google.protobuf import struct_pb2, timestamp_pb2

import turnout
from turnout.sim.model import (
    ChoicePlan,
    InvalidRequest,
    SimModel,
    synthetic_logprob,
    top_logprobs,
)
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc

__all__ = ["SimKnobs", "SimRecords", "SimServicer"]

SIM_VERSION: Final = f"turnout-sim/{turnout.__version__}"
_LOAD_SECTIONS: Final = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
_CACHE_BLOCK: Final = 16


@dataclass
class SimKnobs:
    """Behaviour knobs; change them at any time (they are read per request / per chunk)."""

    #: Delay per generated token, milliseconds.
    delay_ms: float = 0.0
    #: Extra delay before the first token (prefill), milliseconds.
    ttft_ms: float = 0.0
    #: Tokens per streamed chunk (a request's ``stream_interval`` overrides it).
    tokens_per_chunk: int = 1
    #: Fail Generate with this gRPC status name (e.g. "UNAVAILABLE") before the first chunk.
    fail_status: str | None = None
    #: Fail Generate after this many tokens of choice 0 (status ``fail_after_status``).
    fail_after_tokens: int | None = None
    fail_after_status: str = "INTERNAL"
    #: Generate never produces anything (until cancelled or aborted).
    hang: bool = False
    #: HealthCheck answers healthy=false.
    unhealthy: bool = False
    #: Apply fail_status / fail_after_tokens / hang to this many more requests only (None: all).
    fault_budget: int | None = None
    #: Requests generating at once; later ones queue (0: unlimited).
    max_running: int = 0
    #: KV capacity reported by GetLoads / GetServerInfo, tokens.
    max_total_tokens: int = 65536

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
    """What the simulator saw, for tests to assert on."""

    requests: list[pb.GenerateRequest] = field(default_factory=list)
    #: (kind, value) of each constraint received: kind is json_schema/regex/ebnf/structural_tag.
    constraints: list[tuple[str, str]] = field(default_factory=list)
    #: Request ids named by Abort calls, in order.
    aborted: list[str] = field(default_factory=list)
    #: request id → how its generation ended: stop/length/abort/cancelled/error.
    outcomes: dict[str, str] = field(default_factory=dict)
    #: request id → tokens generated (all choices).
    generated: dict[str, int] = field(default_factory=dict)
    health_checks: int = 0

    def clear(self) -> None:
        """Forget everything recorded."""
        self.requests.clear()
        self.constraints.clear()
        self.aborted.clear()
        self.outcomes.clear()
        self.generated.clear()
        self.health_checks = 0


@dataclass(slots=True)
class _Running:
    request_id: str
    tokens: int
    aborted: asyncio.Event = field(default_factory=asyncio.Event)


class SimServicer(pb_grpc.SglangSchedulerServicer):
    """Deterministic SGLang scheduler: answers from a ``SimModel``, paced by ``SimKnobs``."""

    def __init__(self, model: SimModel, knobs: SimKnobs | None = None) -> None:
        self.model = model
        self.knobs = knobs or SimKnobs()
        self.records = SimRecords()
        self.started = time.time()
        self._running: dict[str, _Running] = {}
        self._waiting = 0
        self._slots_used = 0
        self._slot_freed = asyncio.Condition()
        self._prefix_blocks: set[int] = set()
        self._cache_hits = 0
        self._cache_lookups = 0
        self._tokens_out = 0
        self._last_receive = 0.0

    # -- Generate ------------------------------------------------------------------------------

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.GenerateResponse]:
        """Stream the planned answer: chunks of delta token ids, then one complete per choice."""
        rid = request.request_id
        self._last_receive = time.time()
        self.records.requests.append(request)
        kind = request.sampling_params.WhichOneof("constraint")
        if kind is not None:
            self.records.constraints.append(
                ("ebnf" if kind == "ebnf_grammar" else kind, getattr(request.sampling_params, kind))
            )
        if not request.HasField("tokenized"):
            await self._fail(
                context, rid, grpc.StatusCode.INVALID_ARGUMENT, "Tokenized input must be provided"
            )
        if rid in self._running:
            await self._fail(
                context, rid, grpc.StatusCode.INVALID_ARGUMENT, f"duplicate request id {rid!r}"
            )
        try:
            plans = self.model.plan(request)
        except InvalidRequest as exc:
            await self._fail(context, rid, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
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
        cached = self._cached_prefix(prompt)
        state = _Running(rid, len(prompt))
        self._running[rid] = state
        outcome = "error"
        try:
            await self._acquire_slot()
            try:
                await self._pause(state, knobs.ttft_ms / 1000)
                if faulty and knobs.hang:
                    await state.aborted.wait()
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
                await self._release_slot()
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self.records.outcomes[rid] = outcome
            self._running.pop(rid, None)

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

    async def _acquire_slot(self) -> None:
        if self.knobs.max_running <= 0:
            self._slots_used += 1
            return
        self._waiting += 1
        try:
            async with self._slot_freed:
                await self._slot_freed.wait_for(lambda: self._slots_used < self.knobs.max_running)
                self._slots_used += 1
        finally:
            self._waiting -= 1

    async def _release_slot(self) -> None:
        self._slots_used -= 1
        if self.knobs.max_running > 0:
            async with self._slot_freed:
                self._slot_freed.notify_all()

    @staticmethod
    async def _pause(state: _Running, seconds: float) -> None:
        """Sleep, but wake up early when the request is aborted."""
        if seconds <= 0 or state.aborted.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.aborted.wait(), seconds)

    def _cached_prefix(self, prompt: list[int]) -> int:
        """Tokens of ``prompt`` seen before as a prefix (radix-cache imitation, 16-token blocks)."""
        digest = 0
        hit = 0
        new: list[int] = []
        for end in range(_CACHE_BLOCK, len(prompt) + 1, _CACHE_BLOCK):
            digest = hash((digest, tuple(prompt[end - _CACHE_BLOCK : end])))
            if digest in self._prefix_blocks and hit == end - _CACHE_BLOCK:
                hit = end
            new.append(digest)
        if len(self._prefix_blocks) > 200_000:
            self._prefix_blocks.clear()
        self._prefix_blocks.update(new)
        self._cache_lookups += len(prompt)
        self._cache_hits += hit
        return hit

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
        state.aborted.set()
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
            supports_vision=False,
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
                "dp_size": 1,
                "max_running_requests": self.knobs.max_running,
                "context_length": files.context_length,
                "simulated": True,
                "knobs": self.knobs.as_dict(),
            }
        )
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

    async def GetLoads(
        self, request: pb.GetLoadsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetLoadsResponse:
        """The requests it really has: running (holding a slot), waiting, tokens in use."""
        include = set(request.include) or {"core"}
        unknown = include - _LOAD_SECTIONS
        if unknown:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unknown include sections {sorted(unknown)}"
            )
        if request.HasField("dp_rank") and request.dp_rank != 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"dp_rank {request.dp_rank} does not exist (dp_size 1)",
            )
        running = self._slots_used
        used = sum(s.tokens for s in self._running.values())
        capacity = self.knobs.max_total_tokens
        max_running = self.knobs.max_running
        uptime = max(time.time() - self.started, 1e-6)
        load = pb.SchedulerLoad(
            dp_rank=0,
            num_running_reqs=running,
            num_waiting_reqs=self._waiting,
            num_total_reqs=running + self._waiting,
            num_used_tokens=used,
            max_total_num_tokens=capacity,
            token_usage=used / capacity if capacity else 0.0,
            gen_throughput=self._tokens_out / uptime,
            cache_hit_rate=self._cache_hits / self._cache_lookups if self._cache_lookups else 0.0,
            utilization=running / max_running if max_running else 0.0,
            max_running_requests=max_running,
        )
        every = "all" in include
        if every or "memory" in include:
            load.memory.CopyFrom(pb.MemoryMetrics(token_capacity=capacity))
        if every or "queues" in include:
            load.queues.CopyFrom(pb.QueueMetrics(waiting=self._waiting))
        aggregate = pb.AggregateMetrics(
            total_running_reqs=running,
            total_waiting_reqs=self._waiting,
            total_reqs=running + self._waiting,
            avg_token_usage=load.token_usage,
            avg_throughput=load.gen_throughput,
            avg_utilization=load.utilization,
        )
        return pb.GetLoadsResponse(
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            version=SIM_VERSION,
            dp_rank_count=1,
            loads=[load],
            aggregate=aggregate,
        )

    async def Embed(
        self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.EmbedResponse:
        """A deterministic unit vector (16 dims) derived from the token ids."""
        ids = list(request.tokenized.input_ids)
        if not ids:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "Tokenized input must be provided"
            )
        digest = hashlib.sha256(b",".join(str(t).encode() for t in ids)).digest()
        raw = [b / 255 - 0.5 for b in digest[:16]]
        norm = sum(v * v for v in raw) ** 0.5 or 1.0
        return pb.EmbedResponse(
            embedding_dim=16, embedding=[v / norm for v in raw], prompt_tokens=len(ids)
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
        state: _Running,
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
        self.top_k = max(request.top_logprobs_num, 0)

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
            self.servicer._tokens_out += emitted
            self.state.tokens += emitted
            self.servicer.records.generated[rid] = sum(sent)
            if not all(done):
                await self.servicer._pause(self.state, knobs.delay_ms * step / 1000)
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
            if first and self.request.logprob_start_len >= 0:
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
            if self.request.logprob_start_len >= 0:
                complete.input_logprobs.CopyFrom(self._input_logprobs())
        return complete

    def _output_logprobs(self, ids: Iterable[int], start: int) -> pb.OutputLogProbs:
        ids = list(ids)
        out = pb.OutputLogProbs(
            token_logprobs=[synthetic_logprob(t, start + i) for i, t in enumerate(ids)],
            token_ids=ids,
        )
        if self.top_k:
            vocab = self.servicer.model.vocab_size
            for i, t in enumerate(ids):
                values, top_ids = top_logprobs(t, start + i, self.top_k, vocab)
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
