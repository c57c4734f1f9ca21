#!/usr/bin/env bash
# Builds tests/cxx/test_rmm_ref.cpp with g++ -std=c++20 -Wall -Wextra -Werror against the headers
# of RAPIDS' librmm-cu13 26.10.0 wheel (RMM 26.10 and, in include/rapids, the CCCL 3.5.0 it is
# built with), links it to the build's libstreampool and runs it (on cudasim where the build
# uses it). The wheel comes from PyPI by `pip download`, pinned by version and sha256; its
# include/ directory is unpacked once into a cache that later runs reuse: $SP_CACHE_DIR, else
# $XDG_CACHE_HOME/streampool, else ~/.cache/streampool. Without pip, PyPI or g++ the test skips,
# except under CI=true, where it fails. Prints TAP: comments on where the headers came from and
# how long each step took, then the program's own TAP.
# Usage: rmm.sh SOURCE_DIR CUDA_INCLUDEDIR LIBSTREAMPOOL CUDA_LIBDIR [CUDASIM_DIR]
set -uo pipefail
src=$1 cuda_inc=$2 lib=$3 cuda_lib=$4 sim=${5:-}

# The wheel: headers only are used (rmm/resource_ref.hpp needs no library and none of librmm's
# dependencies, rapids-logger among them). The x86_64 wheel whatever the host: headers are the
# same in every one, and one file keeps the hash exact.
wheel_req='librmm-cu13==26.10.0'
wheel_sha256=39edcc7396f5291e95331089909b1e13e445fa2dbd4e7323992fb29fb04a5a1b
wheel_platform=manylinux_2_28_x86_64
cache=${SP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/streampool}
headers=$cache/librmm-cu13-26.10.0/include

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sp-rmm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Cannot test: skips, or fails under CI. $1: why; the rest: a log to show.
cannot() {
    if [ "${CI:-}" = true ]; then
        echo "1..1"
        echo "not ok 1 - rmm_ref # $1"
        [ $# -gt 1 ] && sed 's/^/# /' "$2"
        exit 1
    fi
    [ $# -gt 1 ] && sed 's/^/# /' "$2"
    echo "1..0 # SKIP $1"
    exit 0
}
# Tried and failed: fails everywhere.
failed() {
    echo "1..1"
    echo "not ok 1 - $1"
    sed 's/^/# /' "$2"
    exit 1
}

command -v g++ >/dev/null || cannot "g++ is not installed (scripts/setup.sh)"
start=$SECONDS
if [ -f "$headers/rmm/resource_ref.hpp" ] && [ -f "$headers/rapids/cuda/memory_resource" ]; then
    echo "# $wheel_req headers from the cache: $headers"
else
    python3 -m pip --version >/dev/null 2>&1 ||
        cannot "python3 -m pip is not there (Debian: python3-pip)"
    echo "$wheel_req --hash=sha256:$wheel_sha256" >"$tmp/requirements.txt"
    if ! timeout 300 python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform "$wheel_platform" --require-hashes \
        -r "$tmp/requirements.txt" -d "$tmp/wheel" >"$tmp/log" 2>&1; then
        cannot "pip download $wheel_req failed (no PyPI?)" "$tmp/log"
    fi
    # Unpacked beside the cache entry, then renamed into place: a run cut short leaves no
    # half-filled entry for the next to trust.
    mkdir -p "$cache" || failed "cannot create the cache $cache" /dev/null
    staging=$(mktemp -d "$cache/.librmm.XXXXXX")
    if ! python3 - "$tmp"/wheel/*.whl "$staging" >"$tmp/log" 2>&1 <<'EOF'; then
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(out, [n for n in z.namelist() if n.startswith('librmm/include/')])
EOF
        rm -rf "$staging"
        failed "unpack $wheel_req" "$tmp/log"
    fi
    rm -rf "$(dirname "$headers")"
    mkdir -p "$(dirname "$headers")" && mv "$staging/librmm/include" "$headers"
    rm -rf "$staging"
    echo "# $wheel_req (sha256 $wheel_sha256) from PyPI into $headers in $((SECONDS - start)) s"
fi

start=$SECONDS
exe=$tmp/test_rmm_ref
if ! g++ -std=c++20 -Wall -Wextra -Werror -I"$headers" -I"$headers/rapids" -I"$src/include" \
    -I"$cuda_inc" "$src/tests/cxx/test_rmm_ref.cpp" -o "$exe" "$lib" -L"$cuda_lib" -lcudart \
    -Wl,-rpath,"$(dirname "$lib")" >"$tmp/log" 2>&1; then
    failed "build test_rmm_ref.cpp with g++ -std=c++20 against $headers" "$tmp/log"
fi
echo "# built with g++ -std=c++20 in $((SECONDS - start)) s"
LD_LIBRARY_PATH=$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$exe"
