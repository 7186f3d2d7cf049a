#!/usr/bin/env bash
# Type-check the source tree as the package `turnout` without installing it:
# a throw-away tree of symlinks gives core/ and plugins/ their import names.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/turnout"
for entry in "$root"/core/*; do ln -s "$entry" "$tree/turnout/"; done
ln -s "$root/plugins" "$tree/turnout/plugins"
cd "$tree"
MYPYPATH="$tree" "${MYPY:-mypy}" --config-file "$root/pyproject.toml" -p turnout "$@"
