#!/usr/bin/env bash
# streampool.hpp on RAPIDS' CCCL 3.5, from PyPI. Two modes:
#   rmm: builds tests/cxx/test_rmm_ref.cpp with g++ -std=c++20 -Wall -Wextra -Werror against the
#        headers of the librmm-cu13 26.10.0 wheel (RMM 26.10 and, in include/rapids, the CCCL
#        3.5.0 it is built with), links it to the build's libstreampool and to the wheel's
#        librmm.so (with librapids_logger.so from rapids-logger 0.3.0, which librmm.so needs);
#   hpp: builds tests/cxx/test_hpp.cpp with g++ -std=c++17 -Wall -Wextra -pedantic -Werror
#        against that CCCL alone (no RMM), as compilers.sh does against the toolkit's;
# and runs the program (on cudasim where the build uses it). The wheels come from PyPI by
# `pip download`, pinned by version and sha256; each is unpacked once into a cache that later
# runs reuse, under a lock: $SP_CACHE_DIR, else $XDG_CACHE_HOME/streampool, else
# ~/.cache/streampool. Without pip, PyPI or g++ the test skips, except under CI=true, where it
# fails. Prints TAP: comments on where the files came from and how long each step took, then the
# program's own TAP.
# Usage: rmm.sh rmm|hpp SOURCE_DIR CUDA_INCLUDEDIR LIBSTREAMPOOL CUDA_LIBDIR [CUDASIM_DIR]
set -uo pipefail
mode=$1 src=$2 cuda_inc=$3 lib=$4 cuda_lib=$5 sim=${6:-}

# The x86_64 wheels whatever the host: the headers are the same in every one, and one file keeps
# each hash exact.
wheel_platform=manylinux_2_28_x86_64
cache=${SP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/streampool}
rmm_dir=$cache/librmm-cu13-26.10.0
logger_dir=$cache/rapids-logger-0.3.0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sp-rmm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Cannot test: skips, or fails under CI. $1: why; $2: a log to show.
cannot() {
    if [ "${CI:-}" = true ]; then
        echo "1..1"
        echo "not ok 1 - $mode # $1"
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

# The wheels, as "requirement sha256 cache-directory package-directory".
rmm_sha256=39edcc7396f5291e95331089909b1e13e445fa2dbd4e7323992fb29fb04a5a1b
logger_sha256=9d9094dd241c4e0f2d0c3bad448871e62f9b915e1ef65db41b0a1cf4473b1066
wheels=("librmm-cu13==26.10.0 $rmm_sha256 $rmm_dir librmm"
        "rapids-logger==0.3.0 $logger_sha256 $logger_dir rapids_logger")

command -v g++ >/dev/null || cannot "g++ is not installed (scripts/setup.sh)"
mkdir -p "$cache" || failed "cannot create the cache $cache" /dev/null
# One run at a time fills the cache (meson runs both modes at once); an entry, once complete, is
# never touched again.
if command -v flock >/dev/null; then
    exec 9>"$cache/.lock"
    flock 9
fi
# Those not in the cache yet (DIR/.complete says an earlier run put them there), in one pip call.
: >"$tmp/requirements.txt"
missing=()
for w in "${wheels[@]}"; do
    read -r req sha dir package <<<"$w"
    if [ -f "$dir/.complete" ]; then
        echo "# $req from the cache: $dir"
    else
        echo "$req --hash=sha256:$sha" >>"$tmp/requirements.txt"
        missing+=("$w")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    start=$SECONDS
    python3 -m pip --version >/dev/null 2>&1 ||
        cannot "python3 -m pip is not there (Debian: python3-pip)"
    if ! timeout 300 python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform "$wheel_platform" --require-hashes \
        -r "$tmp/requirements.txt" -d "$tmp/wheel" >"$tmp/log" 2>&1; then
        cannot "pip download failed (no PyPI?)" "$tmp/log"
    fi
    echo "# downloaded from PyPI in $((SECONDS - start)) s:" $(cd "$tmp/wheel" && ls)
    for w in "${missing[@]}"; do
        read -r req sha dir package <<<"$w"
        # Unpacked beside the cache entry, then renamed into place and marked complete: a run
        # cut short leaves no half-filled entry for the next to trust.
        staging=$(mktemp -d "$cache/.unpack.XXXXXX")
        if ! python3 -c '
import glob, sys, zipfile
wheels, out, package = sys.argv[1:]
wheel, = [w for w in glob.glob(wheels + "/*.whl")
          if package + "/__init__.py" in zipfile.ZipFile(w).namelist()]
with zipfile.ZipFile(wheel) as z:
    z.extractall(out, [n for n in z.namelist() if n.startswith(package + "/")])
' "$tmp/wheel" "$staging" "$package" >"$tmp/log" 2>&1; then
            rm -rf "$staging"
            failed "unpack $req" "$tmp/log"
        fi
        rm -rf "$dir"
        mv "$staging/$package" "$dir" && touch "$dir/.complete"
        rm -rf "$staging"
        echo "# $req (sha256 $sha) unpacked into $dir"
    done
fi
command -v flock >/dev/null && flock -u 9
for f in "$rmm_dir/include/rmm/resource_ref.hpp" "$rmm_dir/lib64/librmm.so" \
    "$logger_dir/lib64/librapids_logger.so"; do
    [ -f "$f" ] || failed "the cached wheels lack $f" /dev/null
done

start=$SECONDS
headers=$rmm_dir/include
case $mode in
rmm)
    # librmm.so finds librapids_logger.so only through its own RUNPATH ($ORIGIN) or as a library
    # already loaded: the program itself needs it (--no-as-needed), found by its RUNPATH.
    what="test_rmm_ref.cpp with g++ -std=c++20 against $headers"
    flags=(-std=c++20 -Wall -Wextra -Werror -I"$headers" -I"$headers/rapids" -I"$src/include"
           -I"$cuda_inc" "$src/tests/cxx/test_rmm_ref.cpp" "$lib" -L"$cuda_lib" -lcudart
           -L"$rmm_dir/lib64" -lrmm -L"$logger_dir/lib64" -Wl,--no-as-needed -lrapids_logger
           -Wl,-rpath,"$(dirname "$lib")":"$rmm_dir/lib64":"$logger_dir/lib64")
    ;;
hpp)
    what="test_hpp.cpp with g++ -std=c++17 -pedantic against $headers/rapids"
    flags=(-std=c++17 -Wall -Wextra -pedantic -Werror -I"$src/include" -I"$headers/rapids"
           -I"$cuda_inc" "$src/tests/cxx/test_hpp.cpp" "$lib" -L"$cuda_lib" -lcudart
           -Wl,-rpath,"$(dirname "$lib")")
    ;;
*)
    failed "unknown mode $mode" /dev/null
    ;;
esac
exe=$tmp/test
g++ "${flags[@]}" -o "$exe" >"$tmp/log" 2>&1 || failed "build $what" "$tmp/log"
echo "# built $what in $((SECONDS - start)) s"
LD_LIBRARY_PATH=$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$exe"
