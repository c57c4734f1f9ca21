#!/usr/bin/env bash
# Builds streampool and runs the headline benchmark on the default device (cudasim where there is
# no GPU): sp-bench serve with its defaults, streampool beside cudaMalloc and raw cudaMallocAsync
# (as shipped and with the release threshold at max), steady state, median and min-max of 3 runs.
# Usage: scripts/bench.sh [sp-bench arguments]   (default: serve)
# Writes build-bench/bench.json and build-bench/bench.svg beside the table it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --bench # what sp-bench needs, not the test-only packages
build=build-bench
if [ -d "$build" ]; then
  meson setup --reconfigure "$build" -Dbuildtype=release -Dtests=disabled | sed -n '/^streampool /,$p'
else
  meson setup "$build" -Dbuildtype=release -Dtests=disabled | sed -n '/^streampool /,$p'
fi
ninja -C "$build" bench/sp-bench >/dev/null
[ $# -gt 0 ] || set -- serve
exec "$build/bench/sp-bench" "$@" --json "$build/bench.json" --plot "$build/bench.svg"
