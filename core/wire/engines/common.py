"""What the vLLM and TensorRT-LLM protocols share: refusing what neither carries, the seed."""

from __future__ import annotations

from turnout.wire.engines.base import EngineName, UnsupportedByEngine
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["refuse_common", "seed_of"]


def refuse_common(engine: EngineName, request: pb.GenerateRequest) -> None:
    """Refuse (:class:`UnsupportedByEngine`) what neither engine's protocol has a field for."""
    if request.token_ids_logprob:
        raise UnsupportedByEngine(engine, "token_ids_logprob", "logprobs of chosen token ids")
    if request.return_hidden_states:
        raise UnsupportedByEngine(engine, "return_hidden_states", "returning hidden states")
    if request.custom_logit_processor:
        raise UnsupportedByEngine(engine, "custom_logit_processor", "a custom logit processor")
    if request.input_embeds:
        raise UnsupportedByEngine(engine, "input_embeds", "input embeddings")
    if request.HasField("disaggregated_params"):
        raise UnsupportedByEngine(engine, "disaggregated_params", "SGLang's PD rendezvous")
    if request.HasField("mm_inputs"):
        raise UnsupportedByEngine(engine, "image_url", "router-processed media")
    if request.lora_id:
        raise UnsupportedByEngine(engine, "model", "a LoRA adapter")
    if request.return_logprob and request.logprob_start_len > 0:
        raise UnsupportedByEngine(
            engine, "logprob_start_len", "prompt logprobs from a position other than 0"
        )
    params = request.sampling_params
    if params.HasField("custom_params"):
        extra = sorted(set(params.custom_params.fields) - {"seed"})
        if extra:
            raise UnsupportedByEngine(engine, "custom_params", f"custom parameters {extra}")


def seed_of(params: pb.SamplingParams) -> int | None:
    """The request's seed (the router passes it in ``custom_params``), if any."""
    if not params.HasField("custom_params"):
        return None
    value = params.custom_params.fields.get("seed")
    return None if value is None else int(value.number_value)
