"""Our scheduler service must put the same bytes on the wire as smg-grpc-proto's.

Compares the descriptors of our generated stubs with the descriptors smg-grpc-proto ships in its
own generated modules: the service's RPCs, and every message and enum those RPCs reach, field by
field (name, number, type, label, presence, oneof) and both ways, so a field or RPC added upstream
fails here until we declare it. The package's modules cannot be imported next to ours (both
register ``sglang_scheduler.proto`` and ``common.proto`` in the default descriptor pool), so their
serialized descriptors are read out of the module source into a private pool.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    ServiceDescriptor,
)

from turnout.wire.proto import common_pb2, sglang_scheduler_pb2

PACKAGE = "sglang.grpc.scheduler"
SERVICE = f"{PACKAGE}.SglangScheduler"
WELL_KNOWN = ("google/protobuf/struct.proto", "google/protobuf/timestamp.proto")


def _serialized_descriptor(module_path: Path) -> bytes:
    """The FileDescriptorProto bytes a generated ``*_pb2.py`` hands to ``AddSerializedFile``."""
    for node in ast.walk(ast.parse(module_path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise AssertionError(f"{module_path} holds no serialized descriptor")


def _pool_with_well_known_types() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for name in WELL_KNOWN:
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
        pool.Add(proto)
    return pool


@pytest.fixture(scope="module")
def upstream() -> ServiceDescriptor:
    spec = importlib.util.find_spec("smg_grpc_proto")
    if spec is None or spec.origin is None:
        pytest.skip("smg-grpc-proto is not installed (test-only dependency)")
    generated = Path(spec.origin).parent / "generated"
    pool = _pool_with_well_known_types()
    for module in ("common_pb2.py", "sglang_scheduler_pb2.py"):
        pool.AddSerializedFile(_serialized_descriptor(generated / module))
    return pool.FindServiceByName(SERVICE)


def _reachable(
    service: ServiceDescriptor,
) -> tuple[dict[str, Descriptor], dict[str, EnumDescriptor]]:
    """Every message (map entries included) and enum the service's RPCs can carry."""
    messages: dict[str, Descriptor] = {}
    enums: dict[str, EnumDescriptor] = {}
    todo = [t for m in service.methods for t in (m.input_type, m.output_type)]
    while todo:
        desc = todo.pop()
        if desc.full_name in messages:
            continue
        messages[desc.full_name] = desc
        for field in desc.fields:
            if field.message_type is not None:
                todo.append(field.message_type)
            if field.enum_type is not None:
                enums[field.enum_type.full_name] = field.enum_type
    return messages, enums


def _field_signature(field: FieldDescriptor) -> dict[str, object]:
    return {
        "name": field.name,
        "number": field.number,
        "type": field.type,
        "repeated": field.is_repeated,
        "presence": field.has_presence,
        "message_type": field.message_type.full_name if field.message_type else None,
        "enum_type": field.enum_type.full_name if field.enum_type else None,
        "oneof": field.containing_oneof.name if field.containing_oneof else None,
    }


def _reserved(desc: Descriptor) -> list[tuple[int, int]]:
    proto = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(proto)
    return sorted((r.start, r.end) for r in proto.reserved_range)


def _mismatches(ours: Descriptor, theirs: Descriptor) -> list[str]:
    problems = []
    our_fields = {f.number: f for f in ours.fields}
    their_fields = {f.number: f for f in theirs.fields}
    for number, field in our_fields.items():
        other = their_fields.get(number)
        if other is None:
            problems.append(f"{field.full_name}: number {number} unknown upstream")
        elif _field_signature(field) != _field_signature(other):
            problems.append(
                f"{field.full_name}: {_field_signature(field)} != {_field_signature(other)}"
            )
    problems += [
        f"{ours.full_name}: upstream field {f.name} = {n} missing"
        for n, f in their_fields.items()
        if n not in our_fields
    ]
    problems += [
        f"{ours.full_name}: reserved {r} not kept"
        for r in _reserved(theirs)
        if r not in _reserved(ours)
    ]
    if ours.GetOptions().map_entry != theirs.GetOptions().map_entry:
        problems.append(f"{ours.full_name}: map_entry differs")
    return problems


OUR_SERVICE = sglang_scheduler_pb2.DESCRIPTOR.services_by_name["SglangScheduler"]
OUR_MESSAGES, OUR_ENUMS = _reachable(OUR_SERVICE)


def test_service_has_every_upstream_rpc(upstream: ServiceDescriptor) -> None:
    assert OUR_SERVICE.full_name == upstream.full_name == SERVICE
    assert sorted(m.name for m in OUR_SERVICE.methods) == sorted(m.name for m in upstream.methods)
    for method in OUR_SERVICE.methods:
        other = upstream.methods_by_name[method.name]
        assert method.input_type.full_name == other.input_type.full_name, method.name
        assert method.output_type.full_name == other.output_type.full_name, method.name
        assert method.client_streaming == other.client_streaming, method.name
        assert method.server_streaming == other.server_streaming, method.name


def test_service_reaches_the_same_messages_and_enums(upstream: ServiceDescriptor) -> None:
    their_messages, their_enums = _reachable(upstream)
    assert sorted(OUR_MESSAGES) == sorted(their_messages)
    assert sorted(OUR_ENUMS) == sorted(their_enums)


@pytest.mark.parametrize("full_name", sorted(OUR_MESSAGES))
def test_message_matches_upstream(upstream: ServiceDescriptor, full_name: str) -> None:
    theirs = _reachable(upstream)[0]
    assert full_name in theirs, f"{full_name} does not exist upstream"
    assert _mismatches(OUR_MESSAGES[full_name], theirs[full_name]) == []


@pytest.mark.parametrize("full_name", sorted(OUR_ENUMS))
def test_enum_matches_upstream(upstream: ServiceDescriptor, full_name: str) -> None:
    theirs = _reachable(upstream)[1][full_name]
    ours = OUR_ENUMS[full_name]
    assert [(v.name, v.number) for v in ours.values] == [(v.name, v.number) for v in theirs.values]


def test_common_messages_live_in_smg_common_package() -> None:
    assert common_pb2.DESCRIPTOR.package == "smg.grpc.common"
    assert common_pb2.DESCRIPTOR.name == "common.proto"
    assert sglang_scheduler_pb2.DESCRIPTOR.package == PACKAGE


def test_comparison_catches_a_mismatch(upstream: ServiceDescriptor) -> None:
    """The checks above can fail: a renumbered, a retyped and a dropped field are all reported."""
    proto = descriptor_pb2.FileDescriptorProto()
    sglang_scheduler_pb2.DESCRIPTOR.CopyToProto(proto)
    sampling = next(m for m in proto.message_type if m.name == "SamplingParams")
    next(f for f in sampling.field if f.name == "n").number = 99
    next(f for f in sampling.field if f.name == "top_k").type = FieldDescriptor.TYPE_UINT32
    complete = next(m for m in proto.message_type if m.name == "GenerateComplete")
    complete.field.remove(next(f for f in complete.field if f.name == "spec_draft_tokens"))
    pool = _pool_with_well_known_types()
    common = descriptor_pb2.FileDescriptorProto()
    common_pb2.DESCRIPTOR.CopyToProto(common)
    pool.Add(common)
    pool.Add(proto)
    theirs = _reachable(upstream)[0]
    problems = _mismatches(
        pool.FindMessageTypeByName(f"{PACKAGE}.SamplingParams"), theirs[f"{PACKAGE}.SamplingParams"]
    )
    assert any("number 99" in p for p in problems)
    assert any("top_k" in p for p in problems)
    assert any("n = 17 missing" in p for p in problems)
    dropped = _mismatches(
        pool.FindMessageTypeByName(f"{PACKAGE}.GenerateComplete"),
        theirs[f"{PACKAGE}.GenerateComplete"],
    )
    assert dropped == [f"{PACKAGE}.GenerateComplete: upstream field spec_draft_tokens = 14 missing"]
