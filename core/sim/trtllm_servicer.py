"""TensorRT-LLM's ``TrtllmService`` over the simulated worker (``turnout sim --engine
trtllm``)."""

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
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import trtllm_service_pb2 as tpb
from turnout.wire.proto import trtllm_service_pb2_grpc as tpb_grpc

__all__ = ["TrtllmSimServicer", "trtllm_to_sglang"]

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
    params.top_p = config.top_p if config.HasField("top_p") else DEFAULT_TOP_P
    params.top_k = config.top_k if config.HasField("top_k") and config.top_k > 0 else -1
    params.min_p = config.min_p
    params.frequency_penalty = config.frequency_penalty
    params.presence_penalty = config.presence_penalty
    params.repetition_penalty = (
        config.repetition_penalty
        if config.HasField("repetition_penalty")
        else DEFAULT_REPETITION_PENALTY
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
        set_seed(params, config.seed)
    if request.HasField("guided_decoding"):
        guide = request.guided_decoding
        if guide.guide_type == _Guide.GUIDE_TYPE_JSON:
            params.json_schema = ANY_OBJECT
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


class TrtllmSimServicer(CommonRpcs, tpb_grpc.TrtllmServiceServicer):
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
        async with contextlib.aclosing(answer(self.sim, asked, context)) as run:
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
