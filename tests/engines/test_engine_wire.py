"""The engine seam, message by message: what each engine's request carries, and what it
refuses (naming the field) before anything is sent."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnout.wire import build_generate_request, build_sampling_params, pb
from turnout.wire.engines import UnsupportedByEngine
from turnout.wire.engines.trtllm import to_trtllm_request
from turnout.wire.engines.vllm import to_vllm_request
from turnout.wire.sampling import Constraint


def _request(**params: object) -> pb.GenerateRequest:
    return build_generate_request(
        request_id="r1",
        input_ids=[5, 6, 7],
        sampling_params=build_sampling_params(max_new_tokens=8, **params),  # type: ignore[arg-type]
        return_logprob=True,
        top_logprobs_num=3,
    )


def test_vllm_request_carries_the_sampling_fields() -> None:
    request = _request(
        temperature=0.5, top_k=-1, n=2, stop_token_ids=[9], logit_bias={"42": 1.5},
        constraint=Constraint("ebnf", "root ::= 'a'"), custom_params={"seed": 7},
    )  # fmt: skip
    sent = to_vllm_request(request)
    params = sent.sampling_params
    assert list(sent.tokenized.input_ids) == [5, 6, 7]
    assert (params.temperature, params.top_k, params.n, params.max_tokens) == (0.5, 0, 2, 8)
    assert list(params.stop_token_ids) == [9]
    assert dict(params.logit_bias) == {42: 1.5}
    assert params.grammar == "root ::= 'a'"
    assert (params.logprobs, params.seed) == (3, 7)
    assert not params.HasField("prompt_logprobs")


def test_trtllm_request_carries_the_sampling_fields() -> None:
    request = _request(top_k=20, n=3, constraint=Constraint("regex", "a+"))
    sent = to_trtllm_request(request, max_seq_len=4096)
    config = sent.sampling_config
    assert list(sent.tokenized.input_token_ids) == [5, 6, 7]
    assert (sent.max_tokens, config.num_return_sequences, config.top_k) == (8, 3, 20)
    assert sent.guided_decoding.guide == "a+"
    assert sent.output_config.logprobs == 3
    unbounded = _request()
    unbounded.sampling_params.ClearField("max_new_tokens")
    assert to_trtllm_request(unbounded, max_seq_len=100).max_tokens == 97


def _trtllm(request: pb.GenerateRequest) -> object:
    return to_trtllm_request(request, max_seq_len=4096)


def _with(change: Callable[[pb.GenerateRequest], None]) -> pb.GenerateRequest:
    request = _request()
    change(request)
    return request


BOTH: list[tuple[str, Callable[[pb.GenerateRequest], None]]] = [
    ("token_ids_logprob", lambda r: r.token_ids_logprob.append(3)),
    ("return_hidden_states", lambda r: setattr(r, "return_hidden_states", True)),
    ("custom_logit_processor", lambda r: setattr(r, "custom_logit_processor", "x")),
    ("input_embeds", lambda r: r.input_embeds.append(0.5)),
    ("disaggregated_params", lambda r: r.disaggregated_params.SetInParent()),
    ("image_url", lambda r: r.mm_inputs.image_urls.append("data:")),
    ("model", lambda r: setattr(r, "lora_id", "adapter-1")),
    ("logprob_start_len", lambda r: setattr(r, "logprob_start_len", 2)),
    ("custom_params", lambda r: r.sampling_params.custom_params.update({"x": 1})),
]


@pytest.mark.parametrize(("field", "change"), BOTH, ids=[f for f, _ in BOTH])
@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_both_engines_refuse_naming_the_field(
    engine: str, field: str, change: Callable[[pb.GenerateRequest], None]
) -> None:
    request = _with(change)
    translate = to_vllm_request if engine == "vllm" else _trtllm
    with pytest.raises(UnsupportedByEngine) as refused:
        translate(request)
    assert refused.value.field == field
    assert refused.value.http_status == 400
    assert not refused.value.worker_fault


TRT_ONLY: list[tuple[str, Callable[[pb.GenerateRequest], None]]] = [
    ("logit_bias", lambda r: r.sampling_params.logit_bias.update({"1": 2.0})),
    ("data_parallel_rank", lambda r: setattr(r, "data_parallel_rank", 1)),
    ("prompt_logprobs", lambda r: setattr(r, "logprob_start_len", 0)),
    ("seed", lambda r: r.sampling_params.custom_params.update({"seed": -1})),
]


@pytest.mark.parametrize(("field", "change"), TRT_ONLY, ids=[f for f, _ in TRT_ONLY])
def test_trtllm_refuses_what_vllm_carries(
    field: str, change: Callable[[pb.GenerateRequest], None]
) -> None:
    request = _with(change)
    with pytest.raises(UnsupportedByEngine) as refused:
        to_trtllm_request(request, max_seq_len=4096)
    assert refused.value.field == field
    to_vllm_request(request)  # vLLM carries it


def test_trtllm_needs_a_length_when_max_tokens_is_unset() -> None:
    request = _request()
    request.sampling_params.ClearField("max_new_tokens")
    with pytest.raises(UnsupportedByEngine, match="max_tokens"):
        to_trtllm_request(request, max_seq_len=0)


def test_a_vllm_chunk_is_read_as_sglangs_whatever_path_it_takes() -> None:
    from turnout.wire.engines.vllm import VllmResponses, to_sglang_response
    from turnout.wire.proto import vllm_engine_pb2 as vpb

    plain = vpb.GenerateResponse()
    plain.chunk.token_ids.extend([5, 6])
    plain.chunk.prompt_tokens, plain.chunk.completion_tokens, plain.chunk.cached_tokens = 9, 2, 4
    plain.chunk.output_logprobs.token_logprobs.extend([-0.5, -1.0])
    plain.chunk.output_logprobs.token_ids.extend([5, 6])
    second = vpb.GenerateResponse()
    second.CopyFrom(plain)
    second.chunk.index = 1
    second.chunk.input_logprobs.token_ids.extend([1, 2])
    second.chunk.input_logprobs.token_logprobs.add()
    second.chunk.input_logprobs.token_logprobs.add(value=-2.0)
    done = vpb.GenerateResponse()
    done.complete.output_ids.extend([5, 6])
    done.complete.finish_reason = "stop"
    done.complete.matched_token_id = 6
    done.complete.index = 1
    for message in (plain, second, done):
        read = VllmResponses.FromString(message.SerializeToString())
        assert read == to_sglang_response(message)
    assert VllmResponses.FromString(second.SerializeToString()).chunk.index == 1
    assert VllmResponses.FromString(plain.SerializeToString()).chunk.token_ids == [5, 6]


def test_per_call_deserializers_are_not_kept_by_the_native_transport() -> None:
    from turnout.wire import native
    from turnout.wire.engines.trtllm import TrtllmResponses

    before = len(native._PARSERS)
    for first in range(50):
        native._parser(TrtllmResponses(first, top=False))
    assert len(native._PARSERS) == before
