"""vLLM's ``VllmEngine`` service over the simulated worker (``turnout sim --engine vllm``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

import grpc

from turnout.sim.engine_servicers import (
    ANY_OBJECT,
    DEFAULT_REPETITION_PENALTY,
    DEFAULT_TOP_P,
    CommonRpcs,
    Context,
    answer,
    set_seed,
)
from turnout.sim.servicer import SimServicer
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import vllm_engine_pb2 as vpb
from turnout.wire.proto import vllm_engine_pb2_grpc as vpb_grpc

__all__ = ["VllmSimServicer", "sglang_to_vllm", "vllm_to_sglang"]

_VLLM_CONSTRAINTS: Final = {
    "json_schema": "json_schema",
    "regex": "regex",
    "grammar": "ebnf_grammar",
    "structural_tag": "structural_tag",
}


def vllm_to_sglang(request: vpb.GenerateRequest) -> pb.GenerateRequest:
    """SGLang's request for a vLLM ``GenerateRequest`` (token input only)."""
    src = request.sampling_params
    out = pb.GenerateRequest(request_id=request.request_id, stream=request.stream)
    out.tokenized.original_text = request.tokenized.original_text
    out.tokenized.input_ids.extend(request.tokenized.input_ids)
    params = out.sampling_params
    params.temperature = src.temperature if src.HasField("temperature") else 1.0
    params.top_p = src.top_p or DEFAULT_TOP_P
    params.top_k = src.top_k or -1
    params.min_p = src.min_p
    params.frequency_penalty = src.frequency_penalty
    params.presence_penalty = src.presence_penalty
    params.repetition_penalty = src.repetition_penalty or DEFAULT_REPETITION_PENALTY
    if src.HasField("max_tokens"):
        params.max_new_tokens = src.max_tokens
    params.min_new_tokens = src.min_tokens
    params.stop.extend(src.stop)
    params.stop_token_ids.extend(src.stop_token_ids)
    params.skip_special_tokens = src.skip_special_tokens
    params.spaces_between_special_tokens = src.spaces_between_special_tokens
    params.ignore_eos = src.ignore_eos
    params.no_stop_trim = src.include_stop_str_in_output
    params.n = src.n or 1
    for token, bias in src.logit_bias.items():
        params.logit_bias[str(token)] = bias
    kind = src.WhichOneof("constraint")
    if kind == "json_object":
        params.json_schema = ANY_OBJECT
    elif kind == "choice":
        params.regex = "|".join(_regex_literal(c) for c in src.choice.choices)
    elif kind is not None:
        setattr(params, _VLLM_CONSTRAINTS[kind], getattr(src, kind))
    if src.HasField("seed"):
        set_seed(params, src.seed)
    out.logprob_start_len = -1
    if src.HasField("logprobs"):
        out.return_logprob = True
        out.top_logprobs_num = max(src.logprobs, 0)
    if src.HasField("prompt_logprobs"):
        out.return_logprob = True
        out.logprob_start_len = 0
        out.top_logprobs_num = max(out.top_logprobs_num, src.prompt_logprobs)
    if request.HasField("data_parallel_rank"):
        out.data_parallel_rank = request.data_parallel_rank
    return out


def _regex_literal(text: str) -> str:
    return "".join(f"\\{c}" if c in r".^$*+?{}[]\|()" else c for c in text)


def sglang_to_vllm(response: pb.GenerateResponse) -> vpb.GenerateResponse:
    """vLLM's shape of one SGLang response message."""
    out = vpb.GenerateResponse()
    if response.HasField("chunk"):
        src = response.chunk
        chunk = out.chunk
        chunk.token_ids.extend(src.token_ids)
        chunk.prompt_tokens = src.prompt_tokens
        chunk.completion_tokens = src.completion_tokens
        chunk.cached_tokens = src.cached_tokens
        chunk.index = src.index
        if src.HasField("output_logprobs"):
            chunk.output_logprobs.MergeFromString(src.output_logprobs.SerializeToString())
        if src.HasField("input_logprobs"):
            chunk.input_logprobs.MergeFromString(src.input_logprobs.SerializeToString())
    elif response.HasField("complete"):
        src_done = response.complete
        done = out.complete
        done.output_ids.extend(src_done.output_ids)
        done.finish_reason = src_done.finish_reason
        done.prompt_tokens = src_done.prompt_tokens
        done.completion_tokens = src_done.completion_tokens
        done.cached_tokens = src_done.cached_tokens
        done.index = src_done.index
        which = src_done.WhichOneof("matched_stop")
        if which is not None:
            setattr(done, which, getattr(src_done, which))
        if src_done.HasField("output_logprobs"):
            done.output_logprobs.MergeFromString(src_done.output_logprobs.SerializeToString())
        if src_done.HasField("input_logprobs"):
            done.input_logprobs.MergeFromString(src_done.input_logprobs.SerializeToString())
    return out


class VllmSimServicer(CommonRpcs, vpb_grpc.VllmEngineServicer):
    """``vllm.grpc.engine.VllmEngine`` over a :class:`SimServicer`."""

    def __init__(self, sim: SimServicer) -> None:
        self.sim = sim

    async def Generate(
        self, request: vpb.GenerateRequest, context: Context
    ) -> AsyncIterator[vpb.GenerateResponse]:
        """The simulated answer, in vLLM's messages."""
        if request.WhichOneof("input") != "tokenized":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "this worker takes tokenized input only"
            )
        # Closed with this handler: the sim books a cancelled call when its caller goes away.
        answering = answer(self.sim, vllm_to_sglang(request), context)
        async with contextlib.aclosing(answering) as run:
            async for response in run:
                yield sglang_to_vllm(response)

    async def Abort(self, request: vpb.AbortRequest, context: Context) -> vpb.AbortResponse:
        """Abort each named request."""
        for rid in request.request_ids:
            await self.sim.Abort(pb.AbortRequest(request_id=rid), context)
        return vpb.AbortResponse()

    async def HealthCheck(
        self, request: vpb.HealthCheckRequest, context: Context
    ) -> vpb.HealthCheckResponse:
        """The sim's verdict."""
        verdict = await self.sim.HealthCheck(pb.HealthCheckRequest(), context)
        return vpb.HealthCheckResponse(healthy=verdict.healthy, message=verdict.message)

    async def GetModelInfo(
        self, request: vpb.GetModelInfoRequest, context: Context
    ) -> vpb.GetModelInfoResponse:
        """The model's facts, under vLLM's field numbers."""
        info = await self.sim.GetModelInfo(pb.GetModelInfoRequest(), context)
        return vpb.GetModelInfoResponse(
            model_path=info.model_path,
            is_generation=info.is_generation,
            max_context_length=info.max_context_length,
            vocab_size=info.vocab_size,
            supports_vision=info.supports_vision,
            served_model_name=info.served_model_name,
            tokenizer_path=info.tokenizer_path,
            model_type=info.model_type,
            architectures=info.architectures,
            eos_token_ids=info.eos_token_ids,
            pad_token_id=info.pad_token_id,
            bos_token_id=info.bos_token_id,
            max_req_input_len=info.max_req_input_len,
            default_sampling_params_json=info.default_sampling_params_json,
        )

    async def GetServerInfo(
        self, request: vpb.GetServerInfoRequest, context: Context
    ) -> vpb.GetServerInfoResponse:
        """Activity, DP size, running window, block size."""
        info = await self.sim.GetServerInfo(pb.GetServerInfoRequest(), context)
        sim = self.sim
        return vpb.GetServerInfoResponse(
            active_requests=info.active_requests,
            last_receive_timestamp=info.last_receive_timestamp,
            uptime_seconds=info.uptime_seconds,
            server_type="vllm-grpc",
            data_parallel_size=sim.dp_size,
            max_num_seqs=sim.knobs.max_running,
            block_size=sim.ranks[0].cache.block_size,
        )

    async def GetLoads(
        self, request: vpb.GetLoadsRequest, context: Context
    ) -> vpb.GetLoadsResponse:
        """Each rank's load (the core section)."""
        asked = pb.GetLoadsRequest(include=request.include)
        if request.HasField("dp_rank"):
            asked.dp_rank = request.dp_rank
        loads = await self.sim.GetLoads(asked, context)
        out = vpb.GetLoadsResponse(
            timestamp=loads.timestamp, version=loads.version, dp_rank_count=loads.dp_rank_count
        )
        for load in loads.loads:
            out.loads.add(
                dp_rank=load.dp_rank,
                num_running_reqs=load.num_running_reqs,
                num_waiting_reqs=load.num_waiting_reqs,
                num_total_reqs=load.num_total_reqs,
                num_used_tokens=load.num_used_tokens,
                max_total_num_tokens=load.max_total_num_tokens,
                token_usage=load.token_usage,
                gen_throughput=load.gen_throughput,
                cache_hit_rate=load.cache_hit_rate,
                utilization=load.utilization,
                max_running_requests=load.max_running_requests,
                num_waiting_uncached_tokens=load.num_waiting_uncached_tokens,
            )
        return out

    async def Embed(self, request: vpb.EmbedRequest, context: Context) -> vpb.EmbedResponse:
        """The sim's embedding of the token ids."""
        asked = pb.EmbedRequest(request_id=request.request_id)
        asked.tokenized.original_text = request.tokenized.original_text
        asked.tokenized.input_ids.extend(request.tokenized.input_ids)
        answer = await self.sim.Embed(asked, context)
        return vpb.EmbedResponse(
            embedding=answer.embedding,
            prompt_tokens=answer.prompt_tokens,
            embedding_dim=answer.embedding_dim,
        )

    async def FlushCache(
        self, request: common_pb2.FlushCacheRequest, context: Context
    ) -> common_pb2.FlushCacheResponse:
        """Drop the prefix cache."""
        return await self.sim.FlushCache(request, context)

    async def StartProfile(
        self, request: common_pb2.StartProfileRequest, context: Context
    ) -> common_pb2.ProfileResponse:
        """Mark the profiler on."""
        return await self.sim.StartProfile(request, context)

    async def StopProfile(
        self, request: common_pb2.StopProfileRequest, context: Context
    ) -> common_pb2.ProfileResponse:
        """Mark the profiler off."""
        return await self.sim.StopProfile(request, context)
