#!/usr/bin/env bash
# Builds tests/cxx/test_hpp.cpp with g++ and with clang++ under -std=c++17 -Wall -Wextra -pedantic
# -Werror, against the build's libstreampool, and runs each (on cudasim where the build uses it).
# A compiler that is missing is skipped, except in CI (CI=true), where it fails. Prints TAP.
# Usage: compilers.sh SOURCE_DIR CUDA_INCLUDEDIR CCCL_INCLUDEDIR LIBSTREAMPOOL CUDA_LIBDIR
#        [CUDASIM_DIR]
set -uo pipefail
src=$1 cuda_inc=$2 cccl_inc=$3 lib=$4 cuda_lib=$5 sim=${6:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sp-hpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
compilers=(g++ clang++)
echo "1..$((2 * ${#compilers[@]}))"
n=0
failed=0
for cxx in "${compilers[@]}"; do
    exe=$tmp/test_hpp-$cxx
    if ! command -v "$cxx" >/dev/null; then
        for what in build run; do
            n=$((n + 1))
            if [ "${CI:-}" = true ]; then
                echo "not ok $n - $what with $cxx # $cxx is not installed (scripts/setup.sh)"
                failed=1
            else
                echo "ok $n - $what with $cxx # SKIP $cxx is not installed"
            fi
        done
        continue
    fi
    n=$((n + 1))
    if "$cxx" -std=c++17 -Wall -Wextra -pedantic -Werror -I"$src/include" -I"$cuda_inc" \
        -I"$cccl_inc" "$src/tests/cxx/test_hpp.cpp" -o "$exe" "$lib" -L"$cuda_lib" -lcudart \
        -Wl,-rpath,"$(dirname "$lib")" >"$tmp/log" 2>&1; then
        echo "ok $n - build with $cxx"
    else
        echo "not ok $n - build with $cxx"
        sed 's/^/# /' "$tmp/log"
        failed=1
    fi
    n=$((n + 1))
    if [ -x "$exe" ] &&
        LD_LIBRARY_PATH=$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$exe" >"$tmp/log" 2>&1; then
        echo "ok $n - run with $cxx"
    else
        echo "not ok $n - run with $cxx"
        sed 's/^/# /' "$tmp/log"
        failed=1
    fi
done
exit $failed
