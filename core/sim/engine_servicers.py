"""``turnout sim --engine vllm|trtllm``: the simulated worker in vLLM's and TensorRT-LLM's
protocols.

Thin servicers: each maps its engine's request onto SGLang's ``GenerateRequest`` and lets the
one :class:`~turnout.sim.servicer.SimServicer` plan, pace, cache and record it (same knobs,
same prefix cache and KV events, same records), then maps every response back. What the
engine's protocol cannot ask (beam search, text prompts) is refused as the engine would
(INVALID_ARGUMENT).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final, cast

import grpc
import grpc.aio

from turnout.sim.servicer import SimServicer
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import trtllm_service_pb2 as tpb
from turnout.wire.proto import trtllm_service_pb2_grpc as tpb_grpc
from turnout.wire.proto import vllm_engine_pb2 as vpb
from turnout.wire.proto import vllm_engine_pb2_grpc as vpb_grpc

__all__ = ["TrtllmSimServicer", "VllmSimServicer", "add_engine_servicer"]

Context = grpc.aio.ServicerContext[Any, Any]
#: The schema of "any JSON object", for the engines' JSON-object mode.
_ANY_OBJECT: Final = json.dumps({"type": "object"})
#: SGLang's defaults for what the engines' protocols leave unset (proto3 zeros).
_DEFAULT_TOP_P: Final = 1.0
_DEFAULT_REPETITION_PENALTY: Final = 1.0


def _answer(
    sim: SimServicer, request: pb.GenerateRequest, context: Context
) -> AsyncGenerator[pb.GenerateResponse, None]:
    """The sim's ``Generate`` (an async generator: closing it ends the call's bookkeeping)."""
    return cast("AsyncGenerator[pb.GenerateResponse, None]", sim.Generate(request, context))


def _seed(params: pb.SamplingParams, seed: int) -> None:
    params.custom_params.update({"seed": seed})


# -- vLLM ---------------------------------------------------------------------------------------

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
    params.top_p = src.top_p or _DEFAULT_TOP_P
    params.top_k = src.top_k or -1
    params.min_p = src.min_p
    params.frequency_penalty = src.frequency_penalty
    params.presence_penalty = src.presence_penalty
    params.repetition_penalty = src.repetition_penalty or _DEFAULT_REPETITION_PENALTY
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
        params.json_schema = _ANY_OBJECT
    elif kind == "choice":
        params.regex = "|".join(_regex_literal(c) for c in src.choice.choices)
    elif kind is not None:
        setattr(params, _VLLM_CONSTRAINTS[kind], getattr(src, kind))
    if src.HasField("seed"):
        _seed(params, src.seed)
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


class VllmSimServicer(vpb_grpc.VllmEngineServicer):
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
        answer = _answer(self.sim, vllm_to_sglang(request), context)
        async with contextlib.aclosing(answer) as run:
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

    async def GetTokenizer(
        self, request: common_pb2.GetTokenizerRequest, context: Context
    ) -> AsyncIterator[common_pb2.GetTokenizerChunk]:
        """The model's tokenizer files."""
        async for chunk in self.sim.GetTokenizer(request, context):
            yield chunk

    async def SubscribeKvEvents(
        self, request: common_pb2.SubscribeKvEventsRequest, context: Context
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The prefix caches' events, with each rank's load."""
        async for batch in self.sim.SubscribeKvEvents(request, context):
            yield batch

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


# -- TensorRT-LLM ---------------------------------------------------------------------------

_Guide = tpb.GuidedDecodingParams
_TRT_GUIDES: Final = {
    _Guide.GUIDE_TYPE_JSON_SCHEMA: "json_schema",
    _Guide.GUIDE_TYPE_REGEX: "regex",
    _Guide.GUIDE_TYPE_EBNF_GRAMMAR: "ebnf_grammar",
    _Guide.GUIDE_TYPE_STRUCTURAL_TAG: "structural_tag",
}
#: The router's finish reasons → TensorRT-LLM's.
_TRT_FINISH: Final = {"abort": "cancelled"}


def trtllm_to_sglang(request: tpb.GenerateRequest) -> pb.GenerateRequest:
    """SGLang's request for a TensorRT-LLM ``GenerateRequest``."""
    config = request.sampling_config
    out = pb.GenerateRequest(request_id=request.request_id, stream=request.streaming)
    out.tokenized.original_text = request.tokenized.original_text
    out.tokenized.input_ids.extend(request.tokenized.input_token_ids)
    params = out.sampling_params
    params.temperature = config.temperature if config.HasField("temperature") else 1.0
    params.top_p = config.top_p if config.HasField("top_p") else _DEFAULT_TOP_P
    params.top_k = config.top_k if config.HasField("top_k") and config.top_k > 0 else -1
    params.min_p = config.min_p
    params.frequency_penalty = config.frequency_penalty
    params.presence_penalty = config.presence_penalty
    params.repetition_penalty = (
        config.repetition_penalty
        if config.HasField("repetition_penalty")
        else _DEFAULT_REPETITION_PENALTY
    )
    params.max_new_tokens = request.max_tokens
    params.min_new_tokens = config.min_tokens
    params.n = config.num_return_sequences or 1
    params.stop.extend(request.stop)
    params.stop_token_ids.extend(request.stop_token_ids)
    params.ignore_eos = request.ignore_eos
    params.no_stop_trim = request.include_stop_token_in_output
    params.skip_special_tokens = True
    params.spaces_between_special_tokens = True
    if config.HasField("seed"):
        _seed(params, config.seed)
    if request.HasField("guided_decoding"):
        guide = request.guided_decoding
        if guide.guide_type == _Guide.GUIDE_TYPE_JSON:
            params.json_schema = _ANY_OBJECT
        elif guide.guide_type in _TRT_GUIDES:
            setattr(params, _TRT_GUIDES[guide.guide_type], guide.guide)
    out.logprob_start_len = -1
    output = request.output_config
    if output.HasField("logprobs"):
        out.return_logprob = True
        out.top_logprobs_num = max(output.logprobs, 0)
    if output.HasField("prompt_logprobs"):
        out.return_logprob = True
        out.logprob_start_len = 0
        out.top_logprobs_num = max(out.top_logprobs_num, output.prompt_logprobs)
    return out


def _token_logprobs(given: pb.OutputLogProbs) -> list[tpb.TokenLogprob]:
    tops = list(given.top_logprobs)
    return [
        tpb.TokenLogprob(
            token_id=token,
            logprob=value,
            top_logprobs=(
                [
                    tpb.TopLogprob(token_id=t, logprob=v)
                    for t, v in zip(tops[i].token_ids, tops[i].values, strict=True)
                ]
                if i < len(tops)
                else []
            ),
        )
        for i, (token, value) in enumerate(zip(given.token_ids, given.token_logprobs, strict=True))
    ]


def _prompt_logprobs(given: pb.InputLogProbs) -> list[tpb.TokenLogprob]:
    """Every prompt token but the first (which has no logprob)."""
    tops = list(given.top_logprobs)
    entries = []
    for i, (token, value) in enumerate(zip(given.token_ids, given.token_logprobs, strict=True)):
        if not value.HasField("value"):
            continue
        top = tops[i] if i < len(tops) else pb.TopLogProbs()
        entries.append(
            tpb.TokenLogprob(
                token_id=token,
                logprob=value.value,
                top_logprobs=[
                    tpb.TopLogprob(token_id=t, logprob=v)
                    for t, v in zip(top.token_ids, top.values, strict=True)
                ],
            )
        )
    return entries


class _TrtStream:
    """One request's responses in TensorRT-LLM's shape: completes carry every output token and
    the prompt's logprobs (which SGLang sends on the first chunk)."""

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.ids: dict[int, list[int]] = {}
        self.prompt: list[tpb.TokenLogprob] = []

    def convert(self, response: pb.GenerateResponse, streaming: bool) -> tpb.GenerateResponse:
        out = tpb.GenerateResponse(request_id=self.rid)
        if response.HasField("chunk"):
            src = response.chunk
            self.ids.setdefault(src.index, []).extend(src.token_ids)
            if src.HasField("input_logprobs") and not self.prompt:
                self.prompt = _prompt_logprobs(src.input_logprobs)
            chunk = out.chunk
            chunk.token_ids.extend(src.token_ids)
            chunk.sequence_index = src.index
            chunk.prompt_tokens = src.prompt_tokens
            chunk.completion_tokens = src.completion_tokens
            chunk.cached_tokens = src.cached_tokens
            if src.HasField("output_logprobs"):
                chunk.logprobs.extend(_token_logprobs(src.output_logprobs))
        elif response.HasField("complete"):
            src_done = response.complete
            done = out.complete
            ids = self.ids.get(src_done.index, []) if streaming else list(src_done.output_ids)
            done.output_token_ids.extend(ids)
            done.sequence_index = src_done.index
            done.finish_reason = _TRT_FINISH.get(src_done.finish_reason, src_done.finish_reason)
            done.prompt_tokens = src_done.prompt_tokens
            done.completion_tokens = src_done.completion_tokens
            done.cached_tokens = src_done.cached_tokens
            which = src_done.WhichOneof("matched_stop")
            if which is not None:
                setattr(done, which, getattr(src_done, which))
            if src_done.HasField("output_logprobs"):
                done.logprobs.extend(_token_logprobs(src_done.output_logprobs))
            if src_done.HasField("input_logprobs") and not self.prompt:
                self.prompt = _prompt_logprobs(src_done.input_logprobs)
            done.prompt_logprobs.extend(self.prompt)
        return out


class TrtllmSimServicer(tpb_grpc.TrtllmServiceServicer):
    """``trtllm.TrtllmService`` over a :class:`SimServicer`."""

    def __init__(self, sim: SimServicer) -> None:
        self.sim = sim

    async def Generate(
        self, request: tpb.GenerateRequest, context: Context
    ) -> AsyncIterator[tpb.GenerateResponse]:
        """The simulated answer, in TensorRT-LLM's messages."""
        if request.sampling_config.beam_width > 1:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "beam search is not simulated (beam_width > 1)"
            )
        stream = _TrtStream(request.request_id)
        asked = trtllm_to_sglang(request)
        async with contextlib.aclosing(_answer(self.sim, asked, context)) as run:
            async for response in run:
                yield stream.convert(response, request.streaming)

    async def Abort(self, request: tpb.AbortRequest, context: Context) -> tpb.AbortResponse:
        """Abort the request."""
        answer = await self.sim.Abort(pb.AbortRequest(request_id=request.request_id), context)
        return tpb.AbortResponse(success=answer.success, message=answer.message)

    async def HealthCheck(
        self, request: tpb.HealthCheckRequest, context: Context
    ) -> tpb.HealthCheckResponse:
        """``OK``, or what is wrong."""
        verdict = await self.sim.HealthCheck(pb.HealthCheckRequest(), context)
        return tpb.HealthCheckResponse(status="OK" if verdict.healthy else verdict.message)

    async def GetModelInfo(
        self, request: tpb.GetModelInfoRequest, context: Context
    ) -> tpb.GetModelInfoResponse:
        """The served name as the model id, and the lengths."""
        info = await self.sim.GetModelInfo(pb.GetModelInfoRequest(), context)
        return tpb.GetModelInfoResponse(
            model_id=info.served_model_name or info.model_path,
            max_input_len=info.max_req_input_len,
            max_seq_len=info.max_context_length,
            max_batch_size=self.sim.knobs.max_running,
            vocab_size=info.vocab_size,
            supported_features=["guided_decoding"],
        )

    async def GetServerInfo(
        self, request: tpb.GetServerInfoRequest, context: Context
    ) -> tpb.GetServerInfoResponse:
        """A one-GPU PyTorch backend."""
        return tpb.GetServerInfoResponse(
            version="turnout-sim",
            backend="pytorch",
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            context_parallel_size=1,
            world_size=1,
        )

    async def Embed(self, request: tpb.EmbedRequest, context: Context) -> tpb.EmbedResponse:
        """The sim's embedding of the token ids."""
        asked = pb.EmbedRequest(request_id=request.request_id)
        asked.tokenized.original_text = request.tokenized.original_text
        asked.tokenized.input_ids.extend(request.tokenized.input_token_ids)
        answer = await self.sim.Embed(asked, context)
        return tpb.EmbedResponse(
            request_id=request.request_id,
            embedding=answer.embedding,
            prompt_tokens=answer.prompt_tokens,
        )

    async def GetTokenizer(
        self, request: common_pb2.GetTokenizerRequest, context: Context
    ) -> AsyncIterator[common_pb2.GetTokenizerChunk]:
        """The model's tokenizer files."""
        async for chunk in self.sim.GetTokenizer(request, context):
            yield chunk

    async def SubscribeKvEvents(
        self, request: common_pb2.SubscribeKvEventsRequest, context: Context
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The prefix caches' events, with each rank's load."""
        async for batch in self.sim.SubscribeKvEvents(request, context):
            yield batch


def add_engine_servicer(engine: str, sim: SimServicer, server: Any) -> None:
    """Serve ``sim`` on ``server`` in ``engine``'s protocol (``sglang``, ``vllm``, ``trtllm``)."""
    if engine == "vllm":
        vpb_grpc.add_VllmEngineServicer_to_server(VllmSimServicer(sim), server)  # type: ignore[no-untyped-call]
    elif engine == "trtllm":
        tpb_grpc.add_TrtllmServiceServicer_to_server(TrtllmSimServicer(sim), server)  # type: ignore[no-untyped-call]
    else:
        from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc

        pb_grpc.add_SglangSchedulerServicer_to_server(sim, server)  # type: ignore[no-untyped-call]
