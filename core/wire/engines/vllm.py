"""vLLM's ``VllmEngine`` service (``vllm+grpc://``) behind the router's generation flow.

Request: sampling fields one to one (SGLang's ``top_k`` -1 is vLLM's 0, ``max_new_tokens`` is
``max_tokens``, a logit bias is keyed by token id), the four grammar kinds, logprobs with their
top-k, ``n``, stop strings and ids, the seed and the DP rank. Responses have SGLang's shape
field for field, numbered differently. Refused: what :func:`refuse_common` lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from turnout.wire.engines.base import EngineName, UnsupportedByEngine
from turnout.wire.engines.common import refuse_common, seed_of
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import vllm_engine_pb2 as vpb
from turnout.wire.transport import Message, MessageType

__all__ = ["VllmResponses", "VllmWire", "to_sglang_response", "to_vllm_request"]

_ENGINE: Final[EngineName] = "vllm"
#: SGLang's constraint field → vLLM's.
_CONSTRAINTS: Final = {
    "json_schema": "json_schema",
    "regex": "regex",
    "ebnf_grammar": "grammar",
    "structural_tag": "structural_tag",
}
_INT32_MAX: Final = 2**31 - 1
#: ``GetModelInfoResponse`` fields both protocols have under the same name.
_MODEL_INFO_FIELDS: Final = (
    "model_path",
    "is_generation",
    "max_context_length",
    "vocab_size",
    "supports_vision",
    "served_model_name",
    "tokenizer_path",
    "model_type",
    "architectures",
    "eos_token_ids",
    "pad_token_id",
    "bos_token_id",
    "max_req_input_len",
    "default_sampling_params_json",
)
_LOAD_FIELDS: Final = (
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_total_reqs",
    "num_used_tokens",
    "max_total_num_tokens",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
    "max_running_requests",
    "num_waiting_uncached_tokens",
)


def to_vllm_request(request: pb.GenerateRequest) -> vpb.GenerateRequest:
    """vLLM's ``GenerateRequest`` for SGLang's ``request``; :class:`UnsupportedByEngine` for
    what vLLM's protocol cannot carry."""
    refuse_common(_ENGINE, request)
    src = request.sampling_params
    out = vpb.GenerateRequest(request_id=request.request_id, stream=request.stream)
    out.tokenized.original_text = request.tokenized.original_text
    out.tokenized.input_ids.extend(request.tokenized.input_ids)
    params = out.sampling_params
    params.temperature = src.temperature
    params.top_p = src.top_p
    params.top_k = max(src.top_k, 0)
    params.min_p = src.min_p
    params.frequency_penalty = src.frequency_penalty
    params.presence_penalty = src.presence_penalty
    params.repetition_penalty = src.repetition_penalty
    if src.HasField("max_new_tokens"):
        params.max_tokens = src.max_new_tokens
    params.min_tokens = src.min_new_tokens
    params.stop.extend(src.stop)
    params.stop_token_ids.extend(src.stop_token_ids)
    params.skip_special_tokens = src.skip_special_tokens
    params.spaces_between_special_tokens = src.spaces_between_special_tokens
    params.ignore_eos = src.ignore_eos
    params.include_stop_str_in_output = src.no_stop_trim
    params.n = max(src.n, 1)
    for key, bias in src.logit_bias.items():
        try:
            params.logit_bias[int(key)] = bias
        except ValueError:
            raise UnsupportedByEngine(
                _ENGINE, "logit_bias", f"a bias keyed by {key!r} (not a token id)"
            ) from None
    kind = src.WhichOneof("constraint")
    if kind is not None:
        setattr(params, _CONSTRAINTS[kind], getattr(src, kind))
    if request.return_logprob:
        params.logprobs = request.top_logprobs_num
        if request.logprob_start_len == 0:
            params.prompt_logprobs = request.top_logprobs_num
    seed = seed_of(src)
    if seed is not None:
        if not -(2**31) <= seed <= _INT32_MAX:
            raise UnsupportedByEngine(_ENGINE, "seed", f"seed {seed} (beyond int32)")
        params.seed = seed
    if request.HasField("data_parallel_rank"):
        out.data_parallel_rank = request.data_parallel_rank
    return out


def to_sglang_response(message: vpb.GenerateResponse) -> pb.GenerateResponse:
    """SGLang's shape of one vLLM response message."""
    out = pb.GenerateResponse()
    if message.HasField("chunk"):
        src = message.chunk
        chunk = out.chunk
        chunk.token_ids.extend(src.token_ids)
        chunk.prompt_tokens = src.prompt_tokens
        chunk.completion_tokens = src.completion_tokens
        chunk.cached_tokens = src.cached_tokens
        chunk.index = src.index
        if src.HasField("output_logprobs"):  # the same fields, the same numbers
            chunk.output_logprobs.MergeFromString(src.output_logprobs.SerializeToString())
        if src.HasField("input_logprobs"):
            chunk.input_logprobs.MergeFromString(src.input_logprobs.SerializeToString())
    elif message.HasField("complete"):
        done = message.complete
        complete = out.complete
        complete.output_ids.extend(done.output_ids)
        complete.finish_reason = done.finish_reason
        complete.prompt_tokens = done.prompt_tokens
        complete.completion_tokens = done.completion_tokens
        complete.cached_tokens = done.cached_tokens
        complete.index = done.index
        complete.spec_accepted_tokens = done.spec_accepted_tokens
        complete.spec_draft_tokens = done.spec_draft_tokens
        which = done.WhichOneof("matched_stop")
        if which is not None:
            setattr(complete, which, getattr(done, which))
        if done.HasField("output_logprobs"):
            complete.output_logprobs.MergeFromString(done.output_logprobs.SerializeToString())
        if done.HasField("input_logprobs"):
            complete.input_logprobs.MergeFromString(done.input_logprobs.SerializeToString())
    return out


#: The tag of ``GenerateResponse.chunk``: field 1 in vLLM's message, field 2 in SGLang's.
_VLLM_CHUNK_TAG: Final = 0x0A
_SGLANG_CHUNK_TAG: Final = b"\x12"


class VllmResponses:
    """Reads vLLM's ``GenerateResponse`` bytes into SGLang's message.

    A chunk's fields 1-5 (token ids, the three counts, output logprobs) have SGLang's numbers
    and types; only prompt logprobs and the choice index do not. So the usual chunk (choice 0,
    no prompt logprobs) is SGLang's chunk once the oneof's tag is renumbered: one C parse, no
    field copied in Python. Everything else goes through :func:`to_sglang_response`.
    """

    __slots__ = ()

    @staticmethod
    def FromString(data: bytes) -> pb.GenerateResponse:
        """SGLang's message for vLLM's bytes ``data``."""
        message = vpb.GenerateResponse.FromString(data)
        if data[:1] and data[0] == _VLLM_CHUNK_TAG:
            chunk = message.chunk
            if not chunk.index and not chunk.HasField("input_logprobs"):
                return pb.GenerateResponse.FromString(_SGLANG_CHUNK_TAG + data[1:])
        return to_sglang_response(message)


def _health(message: vpb.HealthCheckResponse) -> pb.HealthCheckResponse:
    return pb.HealthCheckResponse(healthy=message.healthy, message=message.message)


def _model_info(message: vpb.GetModelInfoResponse) -> pb.GetModelInfoResponse:
    out = pb.GetModelInfoResponse()
    for name in _MODEL_INFO_FIELDS:
        value = getattr(message, name)
        if isinstance(value, (str, bool, int)):
            setattr(out, name, value)
        else:
            getattr(out, name).extend(value)
    return out


def _server_info(message: vpb.GetServerInfoResponse) -> pb.GetServerInfoResponse:
    out = pb.GetServerInfoResponse(
        active_requests=message.active_requests,
        is_paused=message.is_paused,
        last_receive_timestamp=message.last_receive_timestamp,
        uptime_seconds=message.uptime_seconds,
        server_type=message.server_type or "vllm-grpc",
    )
    args: dict[str, Any] = {"dp_size": max(message.data_parallel_size, 1), "engine": "vllm"}
    if message.max_num_seqs:
        args["max_running_requests"] = message.max_num_seqs
    if message.block_size:
        args["page_size"] = message.block_size
    out.server_args.update(args)
    return out


def _loads(message: vpb.GetLoadsResponse) -> pb.GetLoadsResponse:
    out = pb.GetLoadsResponse(
        timestamp=message.timestamp, version=message.version, dp_rank_count=message.dp_rank_count
    )
    for load in message.loads:
        mapped = out.loads.add()
        for name in _LOAD_FIELDS:
            setattr(mapped, name, getattr(load, name))
    return out


def _embed(message: vpb.EmbedResponse) -> pb.EmbedResponse:
    return pb.EmbedResponse(
        embedding=message.embedding,
        prompt_tokens=message.prompt_tokens,
        embedding_dim=message.embedding_dim,
    )


class VllmWire:
    """vLLM's ``VllmEngine`` service."""

    name: EngineName = _ENGINE
    service = "vllm.grpc.engine.VllmEngine"

    def generate_request(self, request: pb.GenerateRequest) -> Message:
        """See :func:`to_vllm_request`."""
        return to_vllm_request(request)

    def responses(self, request: pb.GenerateRequest) -> MessageType:
        """:class:`VllmResponses` (it needs nothing of the request)."""
        return VllmResponses

    def abort(self, request_id: str, reason: str) -> tuple[Message, MessageType]:
        """vLLM aborts a list of ids, without a reason."""
        return vpb.AbortRequest(request_ids=[request_id]), vpb.AbortResponse

    def health(self) -> tuple[Message, MessageType, Callable[[Any], pb.HealthCheckResponse]]:
        """``HealthCheck``: the same two fields."""
        return vpb.HealthCheckRequest(), vpb.HealthCheckResponse, _health

    def model_info(self) -> tuple[Message, MessageType, Callable[[Any], pb.GetModelInfoResponse]]:
        """``GetModelInfo``: the fields both have, by name."""
        return vpb.GetModelInfoRequest(), vpb.GetModelInfoResponse, _model_info

    def server_info(
        self,
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetServerInfoResponse]]:
        """``GetServerInfo``: DP size, running window and block size as server arguments."""
        return vpb.GetServerInfoRequest(), vpb.GetServerInfoResponse, _server_info

    def loads(
        self, request: pb.GetLoadsRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.GetLoadsResponse]] | None:
        """``GetLoads``: the core section, per DP rank."""
        mapped = vpb.GetLoadsRequest(include=request.include)
        if request.HasField("dp_rank"):
            mapped.dp_rank = request.dp_rank
        return mapped, vpb.GetLoadsResponse, _loads

    def embed(
        self, request: pb.EmbedRequest
    ) -> tuple[Message, MessageType, Callable[[Any], pb.EmbedResponse]]:
        """``Embed`` of the token ids."""
        mapped = vpb.EmbedRequest(request_id=request.request_id)
        mapped.tokenized.original_text = request.tokenized.original_text
        mapped.tokenized.input_ids.extend(request.tokenized.input_ids)
        return mapped, vpb.EmbedResponse, _embed

    def lora(self) -> bool:
        """vLLM's service has no adapter calls."""
        return False
