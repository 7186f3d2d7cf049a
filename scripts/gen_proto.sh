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
"$PYTHON" - "$out" "${protos[@]}" <<'PY'
import re
import sys
from pathlib import Path

out, protos = Path(sys.argv[1]), sys.argv[2:]
modules = [Path(p).stem + "_pb2" for p in protos]
for path in [*out.glob("*_pb2.py"), *out.glob("*_pb2_grpc.py"), *out.glob("*_pb2.pyi")]:
    text = path.read_text()
    for mod in modules:
        text = re.sub(rf"^import {mod}\b", f"from turnout.wire.proto import {mod}", text, flags=re.M)
        text = re.sub(rf"^from {mod} import ", f"from turnout.wire.proto.{mod} import ", text, flags=re.M)
    path.write_text(text)
PY
if [[ ! -f "$out/__init__.py" ]]; then
  printf '"""Generated protobuf/gRPC stubs (scripts/gen_proto.sh); do not edit."""\n' >"$out/__init__.py"
fi
