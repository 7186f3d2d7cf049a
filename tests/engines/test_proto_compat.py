"""Our vLLM and TensorRT-LLM services put the same bytes on the wire as smg-grpc-proto's.

The same descriptor comparison as the SGLang scheduler's (tests/wire/test_proto_compat.py), run
for ``vllm.grpc.engine.VllmEngine`` and ``trtllm.TrtllmService``: every RPC, and every message
and enum they reach, field by field and both ways.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from google.protobuf.descriptor import ServiceDescriptor

from tests.wire.test_proto_compat import (
    _mismatches,
    _pool_with_well_known_types,
    _reachable,
    _serialized_descriptor,
)
from turnout.wire.proto import trtllm_service_pb2, vllm_engine_pb2

SERVICES = {
    "vllm.grpc.engine.VllmEngine": (vllm_engine_pb2, "vllm_engine_pb2.py"),
    "trtllm.TrtllmService": (trtllm_service_pb2, "trtllm_service_pb2.py"),
}


@pytest.fixture(scope="module", params=sorted(SERVICES))
def pair(request: pytest.FixtureRequest) -> tuple[ServiceDescriptor, ServiceDescriptor]:
    """(ours, upstream) descriptors of one engine service."""
    spec = importlib.util.find_spec("smg_grpc_proto")
    if spec is None or spec.origin is None:
        pytest.skip("smg-grpc-proto is not installed (test-only dependency)")
    full_name: str = request.param
    module, upstream_file = SERVICES[full_name]
    generated = Path(spec.origin).parent / "generated"
    pool = _pool_with_well_known_types()
    for name in ("common_pb2.py", upstream_file):
        pool.AddSerializedFile(_serialized_descriptor(generated / name))
    ours = module.DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]]
    return ours, pool.FindServiceByName(full_name)


def test_service_has_every_upstream_rpc(pair: tuple[ServiceDescriptor, ServiceDescriptor]) -> None:
    ours, theirs = pair
    assert ours.full_name == theirs.full_name
    assert sorted(m.name for m in ours.methods) == sorted(m.name for m in theirs.methods)
    for method in ours.methods:
        other = theirs.methods_by_name[method.name]
        assert method.input_type.full_name == other.input_type.full_name, method.name
        assert method.output_type.full_name == other.output_type.full_name, method.name
        assert method.client_streaming == other.client_streaming, method.name
        assert method.server_streaming == other.server_streaming, method.name


def test_every_message_and_enum_matches(pair: tuple[ServiceDescriptor, ServiceDescriptor]) -> None:
    ours, theirs = pair
    our_messages, our_enums = _reachable(ours)
    their_messages, their_enums = _reachable(theirs)
    assert sorted(our_messages) == sorted(their_messages)
    assert sorted(our_enums) == sorted(their_enums)
    problems = {
        name: found
        for name, desc in our_messages.items()
        if (found := _mismatches(desc, their_messages[name]))
    }
    assert problems == {}
    for name, enum in our_enums.items():
        other = their_enums[name]
        assert [(v.name, v.number) for v in enum.values] == [
            (v.name, v.number) for v in other.values
        ], name


def test_packages_are_upstream_ones() -> None:
    assert vllm_engine_pb2.DESCRIPTOR.package == "vllm.grpc.engine"
    assert trtllm_service_pb2.DESCRIPTOR.package == "trtllm"
    assert vllm_engine_pb2.DESCRIPTOR.dependencies[0].package == "smg.grpc.common"
