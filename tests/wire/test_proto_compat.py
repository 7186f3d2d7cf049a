"""Our sglang_scheduler.proto must put the same bytes on the wire as smg-grpc-proto's.

smg-grpc-proto's modules cannot be imported next to ours (both register ``sglang_scheduler.proto``
in the default descriptor pool), so its shipped .proto sources are compiled into a private pool.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

from turnout.wire.proto import sglang_scheduler_pb2

PACKAGE = "sglang.grpc.scheduler"


def _upstream_pool(tmp_path: Path) -> descriptor_pool.DescriptorPool:
    import importlib.util

    spec = importlib.util.find_spec("smg_grpc_proto")
    if spec is None or spec.origin is None:
        pytest.skip("smg-grpc-proto is not installed (test-only dependency)")
    proto_dir = Path(spec.origin).parent / "proto"
    out = tmp_path / "upstream.desc"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            str(proto_dir / "sglang_scheduler.proto"),
        ],
        check=True,
    )
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    return pool


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> FileDescriptor:
    pool = _upstream_pool(tmp_path_factory.mktemp("smg"))
    return pool.FindFileByName("sglang_scheduler.proto")


def _all_messages(file: FileDescriptor) -> dict[str, Descriptor]:
    out: dict[str, Descriptor] = {}

    def walk(desc: Descriptor) -> None:
        out[desc.full_name] = desc
        for nested in desc.nested_types:
            walk(nested)

    for desc in file.message_types_by_name.values():
        walk(desc)
    return out


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


OURS = _all_messages(sglang_scheduler_pb2.DESCRIPTOR)


def test_we_define_everything_turnout_uses() -> None:
    needed = {
        "SamplingParams",
        "GenerateRequest",
        "TokenizedInput",
        "GenerateResponse",
        "GenerateStreamChunk",
        "GenerateComplete",
        "OutputLogProbs",
        "InputLogProbs",
        "InputTokenLogProb",
        "TopLogProbs",
        "HealthCheckRequest",
        "HealthCheckResponse",
        "AbortRequest",
        "AbortResponse",
        "GetModelInfoRequest",
        "GetModelInfoResponse",
        "GetServerInfoRequest",
        "GetServerInfoResponse",
        "GetLoadsRequest",
        "GetLoadsResponse",
        "SchedulerLoad",
        "EmbedRequest",
        "EmbedResponse",
    }
    assert {f"{PACKAGE}.{n}" for n in needed} <= set(OURS)


def _mismatches(ours: Descriptor, theirs: Descriptor) -> list[str]:
    problems = []
    their_fields = {f.number: f for f in theirs.fields}
    for field in ours.fields:
        other = their_fields.get(field.number)
        if other is None:
            problems.append(f"{field.full_name}: number {field.number} unknown upstream")
        elif _field_signature(field) != _field_signature(other):
            problems.append(
                f"{field.full_name}: {_field_signature(field)} != {_field_signature(other)}"
            )
    # A number we leave out must never be reused: upstream's reserved ranges stay reserved.
    ours_numbers = {f.number for f in ours.fields}
    allowed = set(_reserved(ours)) | {(n, n + 1) for n in their_fields if n not in ours_numbers}
    problems += [
        f"{ours.full_name}: reserved {r} not kept" for r in _reserved(theirs) if r not in allowed
    ]
    if ours.GetOptions().map_entry != theirs.GetOptions().map_entry:
        problems.append(f"{ours.full_name}: map_entry differs")
    return problems


@pytest.mark.parametrize("full_name", sorted(OURS))
def test_message_matches_upstream(upstream: FileDescriptor, full_name: str) -> None:
    theirs_all = _all_messages(upstream)
    assert full_name in theirs_all, f"{full_name} does not exist upstream"
    assert _mismatches(OURS[full_name], theirs_all[full_name]) == []


def test_service_methods_match_upstream(upstream: FileDescriptor) -> None:
    ours = sglang_scheduler_pb2.DESCRIPTOR.services_by_name["SglangScheduler"]
    theirs = upstream.services_by_name["SglangScheduler"]
    assert ours.full_name == theirs.full_name == f"{PACKAGE}.SglangScheduler"
    for method in ours.methods:
        other = theirs.methods_by_name[method.name]
        assert method.input_type.full_name == other.input_type.full_name
        assert method.output_type.full_name == other.output_type.full_name
        assert method.client_streaming == other.client_streaming
        assert method.server_streaming == other.server_streaming


def test_comparison_catches_a_mismatch(upstream: FileDescriptor) -> None:
    """The checks above can fail: a renumbered and a retyped field are both reported."""
    proto = descriptor_pb2.FileDescriptorProto()
    sglang_scheduler_pb2.DESCRIPTOR.CopyToProto(proto)
    sampling = next(m for m in proto.message_type if m.name == "SamplingParams")
    next(f for f in sampling.field if f.name == "n").number = 99
    next(f for f in sampling.field if f.name == "top_k").type = FieldDescriptor.TYPE_UINT32
    pool = descriptor_pool.DescriptorPool()
    for dep in ("google/protobuf/struct.proto", "google/protobuf/timestamp.proto"):
        dep_proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(dep_proto)
        pool.Add(dep_proto)
    pool.Add(proto)
    mutated = pool.FindMessageTypeByName(f"{PACKAGE}.SamplingParams")
    problems = _mismatches(mutated, _all_messages(upstream)[f"{PACKAGE}.SamplingParams"])
    assert len(problems) == 2
    assert any("number 99" in p for p in problems)
    assert any("top_k" in p for p in problems)
