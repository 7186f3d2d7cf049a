"""The committed stubs under core/wire/proto must be what scripts/gen_proto.sh makes today."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import grpc_tools
from google.protobuf import descriptor_pb2

from turnout.wire.proto import sglang_scheduler_pb2

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "core" / "wire" / "proto"
STUB_GLOBS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")


def _regenerate(out: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(out)], check=True, env=env)


def _stub_names(directory: Path) -> set[str]:
    return {p.name for pattern in STUB_GLOBS for p in directory.glob(pattern)}


def _generator_version(text: str) -> str | None:
    match = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", text, re.MULTILINE)
    return match.group(1) if match else None


def test_every_proto_has_committed_stubs(tmp_path: Path) -> None:
    _regenerate(tmp_path)
    assert _stub_names(tmp_path) == _stub_names(COMMITTED)
    assert len(_stub_names(COMMITTED)) == 3 * len(list((ROOT / "proto").glob("*.proto")))


def _drop_json_names(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _drop_json_names(message.nested_type)


def test_committed_descriptor_matches_proto_source(tmp_path: Path) -> None:
    """Holds whatever grpcio-tools version is installed: compares the compiled schema."""
    desc_file = tmp_path / "ours.desc"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--descriptor_set_out={desc_file}",
            "sglang_scheduler.proto",
        ],
        check=True,
    )
    fresh = descriptor_pb2.FileDescriptorSet.FromString(desc_file.read_bytes()).file[0]
    _drop_json_names(fresh.message_type)  # protoc fills them in, generated stubs leave them out
    committed = descriptor_pb2.FileDescriptorProto.FromString(
        sglang_scheduler_pb2.DESCRIPTOR.serialized_pb
    )
    assert committed == fresh, "core/wire/proto is stale: run scripts/gen_proto.sh"


def test_committed_stubs_are_byte_identical(tmp_path: Path) -> None:
    """With the grpcio-tools that made the committed stubs, regeneration changes nothing."""
    _regenerate(tmp_path)
    grpc_file = "sglang_scheduler_pb2_grpc.py"
    fresh_version = _generator_version((tmp_path / grpc_file).read_text())
    committed_version = _generator_version((COMMITTED / grpc_file).read_text())
    assert fresh_version == committed_version, (
        f"stubs were generated with grpcio-tools {committed_version}, this is "
        f"{fresh_version} ({grpc_tools.__file__}): run scripts/gen_proto.sh"
    )
    stale = [
        name
        for name in sorted(_stub_names(COMMITTED))
        if (tmp_path / name).read_text() != (COMMITTED / name).read_text()
    ]
    assert stale == [], f"stale stubs {stale}: run scripts/gen_proto.sh"
