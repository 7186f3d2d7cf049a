"""TensorRT-LLM's ``TrtllmService`` (``trtllm+grpc://``) behind the router's generation flow.

Request: sampling into ``SamplingConfig`` (``n`` is ``num_return_sequences``), logprobs into
``OutputConfig``, the four grammar kinds as ``GuidedDecodingParams``, stop strings and ids.
``max_tokens`` is required by the protocol: a request without one gets what is left of the
context length the worker reported. Responses carry logprobs per token (``TokenLogprob``),
turned into SGLang's columns; prompt logprobs cover every prompt token but the first.
Refused besides :func:`refuse_common`: ``logit_bias`` (the protocol wants a whole-vocabulary
bias tensor), a pinned DP rank (no such field), and prompt logprobs in a stream (they come
with the last message only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from turnout.wire.engines.base import EngineName, UnsupportedByEngine
from turnout.wire.engines.common import refuse_common, seed_of
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import trtllm_service_pb2 as tpb
from turnout.wire.transport import Message, MessageType

__all__ = [
    "FINISH_REASONS",
    "TrtllmResponses",
    "TrtllmWire",
    "to_sglang_response",
    "to_trtllm_request",
]

_ENGINE: Final[EngineName] = "trtllm"
_Guide = tpb.GuidedDecodingParams
#: SGLang's constraint field → TensorRT-LLM's guide type.
_GUIDES: Final = {
    "json_schema": _Guide.GUIDE_TYPE_JSON_SCHEMA,
    "regex": _Guide.GUIDE_TYPE_REGEX,
    "ebnf_grammar": _Guide.GUIDE_TYPE_EBNF_GRAMMAR,
    "structural_tag": _Guide.GUIDE_TYPE_STRUCTURAL_TAG,
}
#: TensorRT-LLM's finish reasons → the router's (``stop_word``: a stop string matched).
FINISH_REASONS: Final = {"stop_word": "stop", "cancelled": "abort", "timeout": "abort"}


def to_trtllm_request(request: pb.GenerateRequest, max_seq_len: int) -> tpb.GenerateRequest:
    """TensorRT-LLM's ``GenerateRequest`` for SGLang's ``request`` (``max_seq_len``: the
    worker's, 0 when unknown); :class:`UnsupportedByEngine` for what it cannot carry."""
    refuse_common(_ENGINE, request)
    src = request.sampling_params
    if src.logit_bias:
        raise UnsupportedByEngine(_ENGINE, "logit_bias", "a per-token bias")
    if request.HasField("data_parallel_rank") and request.data_parallel_rank >= 0:
        raise UnsupportedByEngine(_ENGINE, "data_parallel_rank", "pinning a DP rank")
    prompt = request.tokenized.input_ids
    out = tpb.GenerateRequest(request_id=request.request_id, streaming=request.stream)
    out.tokenized.original_text = request.tokenized.original_text
    out.tokenized.input_token_ids.extend(prompt)
    if src.HasField("max_new_tokens"):
        out.max_tokens = src.max_new_tokens
    elif max_seq_len > len(prompt):
        out.max_tokens = max_seq_len - len(prompt)
    else:
        raise UnsupportedByEngine(
            _ENGINE, "max_tokens", "a request without max_tokens (the worker's length is unknown)"
        )
    config = out.sampling_config
    config.beam_width = 1
    config.num_return_sequences = max(src.n, 1)
    if src.top_k > 0:
        config.top_k = src.top_k
    config.top_p = src.top_p
    config.temperature = src.temperature
    config.min_p = src.min_p
    if src.min_new_tokens:
        config.min_tokens = src.min_new_tokens
    config.repetition_penalty = src.repetition_penalty
    config.presence_penalty = src.presence_penalty
    config.frequency_penalty = src.frequency_penalty
    seed = seed_of(src)
    if seed is not None:
        if seed < 0:
            raise UnsupportedByEngine(_ENGINE, "seed", f"a negative seed ({seed})")
        config.seed = seed
    out.stop.extend(src.stop)
    out.stop_token_ids.extend(src.stop_token_ids)
    out.ignore_eos = src.ignore_eos
    out.include_stop_token_in_output = src.no_stop_trim
    kind = src.WhichOneof("constraint")
    if kind is not None:
        out.guided_decoding.guide_type = _GUIDES[kind]
        out.guided_decoding.guide = getattr(src, kind)
    if request.return_logprob:
        out.output_config.logprobs = request.top_logprobs_num
        if request.logprob_start_len == 0:
            if request.stream:
                # They come with the last message only: too late for a stream's first event.
                raise UnsupportedByEngine(
                    _ENGINE, "prompt_logprobs", "prompt logprobs (echo with logprobs) in a stream"
                )
            out.output_config.prompt_logprobs = request.top_logprobs_num
    return out


def _output_logprobs(entries: Any, top: bool) -> pb.OutputLogProbs:
    out = pb.OutputLogProbs(
        token_logprobs=[e.logprob for e in entries], token_ids=[e.token_id for e in entries]
    )
    if top:
        for entry in entries:
            out.top_logprobs.add(
                values=[t.logprob for t in entry.top_logprobs],
                token_ids=[t.token_id for t in entry.top_logprobs],
            )
    return out


def _input_logprobs(first_id: int, entries: Any, top: bool) -> pb.InputLogProbs:
    """SGLang's prompt logprobs: the first prompt token (no logprob), then one per entry."""
    out = pb.InputLogProbs(token_ids=[first_id, *(e.token_id for e in entries)])
    out.token_logprobs.add()
    for entry in entries:
        out.token_logprobs.add(value=entry.logprob)
    if top:
        out.top_logprobs.add()
        for entry in entries:
            out.top_logprobs.add(
                values=[t.logprob for t in entry.top_logprobs],
                token_ids=[t.token_id for t in entry.top_logprobs],
            )
    return out


def to_sglang_response(
    message: tpb.GenerateResponse, first_prompt_id: int = 0, top: bool = False
) -> pb.GenerateResponse:
    """SGLang's shape of one TensorRT-LLM response message (``top``: alternatives asked)."""
    out = pb.GenerateResponse(request_id=message.request_id)
    if message.HasField("chunk"):
        src = message.chunk
        chunk = out.chunk
        chunk.token_ids.extend(src.token_ids)
        chunk.index = src.sequence_index
        chunk.prompt_tokens = src.prompt_tokens
        chunk.completion_tokens = src.completion_tokens
        chunk.cached_tokens = src.cached_tokens
        if src.logprobs:
            chunk.output_logprobs.CopyFrom(_output_logprobs(src.logprobs, top))
    elif message.HasField("complete"):
        done = message.complete
        complete = out.complete
        complete.output_ids.extend(done.output_token_ids)
        complete.index = done.sequence_index
        complete.finish_reason = FINISH_REASONS.get(done.finish_reason, done.finish_reason)
        complete.prompt_tokens = done.prompt_tokens
        complete.completion_tokens = done.completion_tokens
        complete.cached_tokens = done.cached_tokens
        complete.spec_accepted_tokens = done.spec_accepted_tokens
        complete.spec_draft_tokens = done.spec_draft_tokens
        which = done.WhichOneof("matched_stop")
        if which is not None:
            setattr(complete, which, getattr(done, which))
        if done.logprobs:
            complete.output_logprobs.CopyFrom(_output_logprobs(done.logprobs, top))
        if done.prompt_logprobs:
            complete.input_logprobs.CopyFrom(
                _input_logprobs(first_prompt_id, done.prompt_logprobs, top)
            )
    return out


class TrtllmResponses:
    """Reads one request's TensorRT-LLM ``GenerateResponse`` bytes into SGLang's message
    (``first_prompt_id`` and ``top``: see :func:`to_sglang_response`)."""

    __slots__ = ("first_prompt_id", "top")

    def __init__(self, first_prompt_id: int, top: bool) -> None:
        self.first_prompt_id = first_prompt_id
        self.top = top

    def FromString(self, data: bytes) -> pb.GenerateResponse:
        """SGLang's message for TensorRT-LLM's bytes ``data``."""
        return to_sglang_response(
            tpb.GenerateResponse.FromString(data), self.first_prompt_id, self.top
        )


def _health(message: tpb.HealthCheckResponse) -> pb.HealthCheckResponse:
    return pb.HealthCheckResponse(healthy=message.status == "OK", message=message.status)


def _server_info(message: tpb.GetServerInfoResponse) -> pb.GetServerInfoResponse:
    out = pb.GetServerInfoResponse(server_type=f"trtllm-{message.backend or 'grpc'}")
    out.server_args.update(
        {"tp_size": max(message.tensor_parallel_size, 1), "dp_size": 1, "engine": "trtllm"}
    )
    return out


def _embed(message: tpb.EmbedResponse) -> pb.EmbedResponse:
    return pb.EmbedResponse(
        embedding=message.embedding,
        prompt_tokens=message.prompt_tokens,
        embedding_dim=len(message.embedding),
    )


class TrtllmWire:
    """TensorRT-LLM's ``TrtllmService``; keeps the worker's ``max_seq_len`` once reported."""

    name: EngineName = _ENGINE
    service = "trtllm.TrtllmService"

    def __init__(self) -> None:
        #: The worker's maximum sequence length (0 until ``GetModelInfo`` said).
        self.max_seq_len = 0

    def generate_request(self, request: pb.GenerateRequest) -> Message:
        """See :func:`to_trtllm_request`."""
        return to_trtllm_request(request, self.max_seq_len)

    def responses(self, request: pb.GenerateRequest) -> MessageType:
        """A :class:`TrtllmResponses` with what it needs of ``request``."""
        ids = request.tokenized.input_ids
        return TrtllmResponses(ids[0] if ids else 0, request.top_logprobs_num > 0)

    def abort(self, request_id: str, reason: str) -> tuple[Message, MessageType]:
        """``Abort`` of one id (no reason field)."""
        return tpb.AbortRequest(request_id=request_id), tpb.AbortResponse

    def health(self) -> tuple[Message, MessageType, Callable[[Any], pb.HealthCheckResponse]]:
        """``HealthCheck``: healthy iff the status is ``OK``."""
        return tpb.HealthCheckRequest(), tpb.HealthCheckResponse, _health

    def model_info(self) -> tuple[Message, MessageType, Callable[[Any], pb.GetModelInfoResponse]]:
        """``GetModelInfo``: the model id and lengths (the length is kept for ``max_tokens``)."""
        return tpb.GetModelInfoRequest(), tpb.GetModelInfoResponse, self._model_info

    def _model_info(self, message: tpb.GetModelInfoResponse) -> pb.GetModelInfoResponse:
        self.max_seq_len = max(int(message.max_seq_len), 0)
        return pb.GetModelInfoResponse(
            model_path=message.model_id,
            served_model_name=message.model_id,
            is_generation=True,
            max_context_length=message.max_seq_len,
            max_req_input_len=message.max_input_len,
            vocab_size=message.vocab_size,
        )

    def server_info(
        self,
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetServerInfoResponse]]:
        """``GetServerInfo``: the backend and TP size."""
        return tpb.GetServerInfoRequest(), tpb.GetServerInfoResponse, _server_info

    def loads(
        self, request: pb.GetLoadsRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetLoadsResponse]] | None:
        """None: the service has no ``GetLoads`` (its KV-event stream may push loads)."""
        return None

    def embed(
        self, request: pb.EmbedRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.EmbedResponse]]:
        """``Embed`` of the token ids."""
        mapped = tpb.EmbedRequest(request_id=request.request_id)
        mapped.tokenized.original_text = request.tokenized.original_text
        mapped.tokenized.input_token_ids.extend(request.tokenized.input_ids)
        return mapped, tpb.EmbedResponse, _embed

    def lora(self) -> bool:
        """The service has no adapter calls."""
        return False
