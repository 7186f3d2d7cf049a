#!/usr/bin/env bash
# Regenerate turnout's gRPC stubs (turnout.wire.proto.*) from proto/*.proto with grpcio-tools.
# Usage: scripts/gen_proto.sh [OUT_DIR]   (default: core/wire/proto; the stub test passes a temp dir)
# PYTHON selects the interpreter (default: .venv/bin/python if present, else python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/core/wire/proto"}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
mkdir -p "$out"
cd "$root/proto"
protos=(*.proto)
"$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "${protos[@]}"
# protoc writes sibling imports as top-level modules ("import x_pb2"); make them package imports.
for proto in "${protos[@]}"; do
  mod=${proto%.proto}_pb2
  for f in "$out"/*_pb2.py "$out"/*_pb2_grpc.py "$out"/*_pb2.pyi; do
    sed -i -E "s/^import ${mod} as /from turnout.wire.proto import ${mod} as /; s/^import ${mod}$/from turnout.wire.proto import ${mod}/; s/^from ${mod} import /from turnout.wire.proto.${mod} import /" "$f"
  done
done
if [[ ! -f "$out/__init__.py" ]]; then
  printf '"""Generated protobuf/gRPC stubs (scripts/gen_proto.sh); do not edit."""\n' >"$out/__init__.py"
fi
