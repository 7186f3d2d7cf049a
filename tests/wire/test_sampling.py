"""SamplingParams / GenerateRequest builders and the status table."""

from __future__ import annotations

import grpc
import pytest

from turnout.wire import (
    GRPC_TO_HTTP,
    Constraint,
    InvalidSamplingParams,
    WorkerCallError,
    build_generate_request,
    build_sampling_params,
    http_status_for,
    parse_worker_url,
)


def test_defaults_are_sglang_defaults_not_proto_zeros() -> None:
    p = build_sampling_params(max_new_tokens=16)
    assert p.temperature == 1.0
    assert p.top_p == 1.0
    assert p.top_k == -1
    assert p.min_p == 0.0
    assert p.repetition_penalty == 1.0
    assert (p.frequency_penalty, p.presence_penalty) == (0.0, 0.0)
    assert p.n == 1
    assert p.skip_special_tokens is True
    assert p.spaces_between_special_tokens is True
    assert p.HasField("max_new_tokens")
    assert p.max_new_tokens == 16
    assert not p.HasField("stream_interval")
    assert p.WhichOneof("constraint") is None
    assert not build_sampling_params(max_new_tokens=None).HasField("max_new_tokens")


def test_explicit_values_and_zero_temperature_survive() -> None:
    p = build_sampling_params(
        max_new_tokens=0,
        temperature=0.0,
        top_k=5,
        n=3,
        stop_token_ids=[7, 9],
        stop=["</end>"],
        ignore_eos=True,
        min_new_tokens=0,
        logit_bias={"12": -100.0},
        custom_params={"seed": 3},
    )
    assert p.temperature == 0.0
    assert p.max_new_tokens == 0
    assert p.HasField("max_new_tokens")
    assert p.top_k == 5
    assert list(p.stop_token_ids) == [7, 9]
    assert list(p.stop) == ["</end>"]
    assert p.ignore_eos
    assert p.n == 3
    assert dict(p.logit_bias) == {"12": -100.0}
    assert p.custom_params["seed"] == 3


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("json_schema", "json_schema"),
        ("regex", "regex"),
        ("ebnf", "ebnf_grammar"),
        ("structural_tag", "structural_tag"),
    ],
)
def test_constraint_sets_one_oneof_member(kind: str, field: str) -> None:
    p = build_sampling_params(max_new_tokens=4, constraint=Constraint(kind, "x"))  # type: ignore[arg-type]
    assert p.WhichOneof("constraint") == field
    assert getattr(p, field) == "x"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": float("inf")}, "top_p"),
        ({"repetition_penalty": 1e39}, "repetition_penalty"),  # beyond float32
        ({"logit_bias": {"5": float("-inf")}}, "logit_bias"),
        ({"top_k": 2**31}, "top_k"),
        ({"n": 0}, "n"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 2**40}, "max_new_tokens"),
        ({"min_new_tokens": 2**31}, "min_new_tokens"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"stop_token_ids": [2**32]}, "stop_token_ids"),
        ({"stream_interval": 0}, "stream_interval"),
    ],
)
def test_values_the_wire_cannot_carry_are_rejected_by_name(
    kwargs: dict[str, object], name: str
) -> None:
    kwargs.setdefault("max_new_tokens", 8)
    with pytest.raises(InvalidSamplingParams, match=name):
        build_sampling_params(**kwargs)  # type: ignore[arg-type]


def test_what_values_mean_is_left_to_the_request_layer_and_the_worker() -> None:
    """Ranges with a meaning (top_p in (0, 1], top_k -1 or >= 1 …) are checked where requests are
    decoded (turnout.generation.requests); the wire builder carries any value its types can hold."""
    p = build_sampling_params(
        max_new_tokens=2, min_new_tokens=5, top_p=0.0, top_k=0, temperature=-1.0
    )
    assert (p.min_new_tokens, p.max_new_tokens, p.top_k) == (5, 2, 0)


def test_bad_constraint() -> None:
    with pytest.raises(InvalidSamplingParams, match="kind"):
        Constraint("xml", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidSamplingParams, match="empty"):
        Constraint("regex", "")


def test_generate_request_logprob_start_len() -> None:
    sp = build_sampling_params(max_new_tokens=4)
    r = build_generate_request(request_id="r1", input_ids=[1, 2, 3], sampling_params=sp)
    assert r.logprob_start_len == -1
    assert not r.return_logprob
    assert r.stream
    assert list(r.tokenized.input_ids) == [1, 2, 3]
    assert not r.HasField("data_parallel_rank")
    r = build_generate_request(
        request_id="r2",
        input_ids=[1, 2, 3],
        original_text="hi",
        sampling_params=sp,
        top_logprobs_num=5,
        prompt_logprobs_start=0,
        stream=False,
        data_parallel_rank=0,
        token_ids_logprob=[4, 6],
    )
    assert r.return_logprob
    assert list(r.token_ids_logprob) == [4, 6]
    assert r.sampling_params == sp
    assert r.top_logprobs_num == 5
    assert r.logprob_start_len == 0
    assert r.tokenized.original_text == "hi"
    assert not r.stream
    assert r.HasField("data_parallel_rank")
    # Round trip over the wire format keeps everything.
    assert type(r).FromString(r.SerializeToString()) == r


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"request_id": ""}, "request_id"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [1, -5]}, "input_ids"),
        ({"top_logprobs_num": -1}, "top_logprobs_num"),
        ({"prompt_logprobs_start": 5}, "prompt_logprobs_start"),
    ],
)
def test_generate_request_rejects_bad_input(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "request_id": "r",
        "input_ids": [1, 2],
        "sampling_params": build_sampling_params(max_new_tokens=1),
    }
    args.update(kwargs)
    with pytest.raises(InvalidSamplingParams, match=match):
        build_generate_request(**args)  # type: ignore[arg-type]


def test_status_table() -> None:
    assert http_status_for(grpc.StatusCode.INVALID_ARGUMENT) == 400
    assert http_status_for(grpc.StatusCode.NOT_FOUND) == 404
    assert http_status_for(grpc.StatusCode.RESOURCE_EXHAUSTED) == 429
    assert http_status_for(grpc.StatusCode.UNAVAILABLE) == 503
    assert http_status_for(grpc.StatusCode.DEADLINE_EXCEEDED) == 504
    assert http_status_for(grpc.StatusCode.UNIMPLEMENTED) == 501
    for code in grpc.StatusCode:
        if code not in GRPC_TO_HTTP:
            assert http_status_for(code) == 500


def test_worker_fault_flag() -> None:
    assert WorkerCallError(grpc.StatusCode.UNAVAILABLE, "down").worker_fault
    assert WorkerCallError(grpc.StatusCode.INTERNAL, "boom").worker_fault
    assert WorkerCallError(grpc.StatusCode.DEADLINE_EXCEEDED, "slow").worker_fault
    assert not WorkerCallError(grpc.StatusCode.INVALID_ARGUMENT, "bad").worker_fault
    err = WorkerCallError(grpc.StatusCode.NOT_FOUND, "nope", worker="grpc://w:1", method="Abort")
    assert (err.http_status, err.message, err.code) == (404, "nope", grpc.StatusCode.NOT_FOUND)
    assert str(err) == "grpc://w:1 Abort: NOT_FOUND: nope"


@pytest.mark.parametrize(
    ("url", "target", "tls"),
    [
        ("grpc://127.0.0.1:30000", "127.0.0.1:30000", False),
        ("grpcs://worker.example:443", "worker.example:443", True),
        ("localhost:5", "localhost:5", False),
        ("grpc://[::1]:7000", "[::1]:7000", False),
    ],
)
def test_parse_worker_url(url: str, target: str, tls: bool) -> None:
    assert parse_worker_url(url) == (target, tls)


@pytest.mark.parametrize(
    "url", ["http://h:1", "grpc://h", "grpc://:5", "grpc://h:1/x", "grpc://h:x"]
)
def test_parse_worker_url_rejects(url: str) -> None:
    with pytest.raises(ValueError, match="worker URL"):
        parse_worker_url(url)


def test_matched_stop() -> None:
    from turnout.wire import matched_stop, pb

    assert matched_stop(pb.GenerateComplete(matched_token_id=0)) == 0
    assert matched_stop(pb.GenerateComplete(matched_stop_str="END")) == "END"
    assert matched_stop(pb.GenerateComplete(finish_reason="length")) is None
