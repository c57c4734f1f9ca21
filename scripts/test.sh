#!/usr/bin/env bash
# Builds streampool and runs every test suite. Usage: scripts/test.sh [BUILD_DIR [meson options]]
# e.g. scripts/test.sh build-asan -Db_sanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${1:-build}
shift || true
# The setup summary says which CUDA runtime (real or cudasim) the build uses.
if [ -d "$build" ]; then
  meson setup --reconfigure "$build" "$@" | sed -n '/^streampool /,$p'
else
  meson setup "$build" "$@" | sed -n '/^streampool /,$p'
fi
ninja -C "$build"
# The pytorch suite's PyTorch, from PyPI into a venv made once and reused (tests/torch/venv.sh).
tests/torch/venv.sh
meson test -C "$build" --print-errorlogs
