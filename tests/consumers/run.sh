#!/usr/bin/env bash
# Installs streampool (with cudasim) into a temporary prefix with README's own install recipe,
# then builds and runs README's example with README's Makefile and README's CMakeLists.txt (all
# three taken from README.md as they stand), and the consumers here as README's "Use it from
# your project" tells a user to: a Makefile with pkg-config (a C program and a C++ one), CMake
# find_package(streampool), and a Meson subproject. Every consumer links with -Wl,--as-needed
# and runs on cudasim, found first through LD_LIBRARY_PATH. Also checks that the install is a
# release build of the library alone, and that it NEEDs the real runtime and never cudasim, and
# builds a CNMeM program against libstreampool_cnmem (pkg-config streampool_cnmem, CMake
# streampool::cnmem).
# Usage: [VERBOSE=1] run.sh SOURCE_DIR [meson setup options for the install build]. Prints TAP.
set -uo pipefail
src=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sp-consumers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
# Nothing from the calling build (its cudasim, its pkg-config path) may leak into the recipes.
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH
export LDFLAGS=-Wl,--as-needed

n=0
failed=0
step() { # step NAME COMMAND...: one TAP line; the command's output as diagnostics on failure
    local name=$1
    shift
    n=$((n + 1))
    if "$@" >"$tmp/step.log" 2>&1; then
        echo "ok $n - $name"
        [ -z "${VERBOSE:-}" ] || sed 's/^/# /' "$tmp/step.log"
    else
        echo "not ok $n - $name"
        sed 's/^/# /' "$tmp/step.log"
        failed=1
    fi
}

readme_block() { # readme_block NAME OUT: README.md's <!-- recipe:NAME --> block (or example)
    python3 "$here/../extract_example.py" "$src/README.md" "$2" ${1:+"$1"}
}

# README's install recipe as written, but into the temporary prefix and build directory, with
# this build's own meson options (-Dwerror) after README's.
install_streampool() {
    local extra=""
    for o in "$@"; do extra+=" $(printf '%q' "$o")"; done
    readme_block install "$tmp/install.sh" &&
        sed -i -e "s#/opt/streampool#$prefix#g" -e "s#build-release#$tmp/build#g" \
            -e "s#^meson setup .*#&$extra#" "$tmp/install.sh" &&
        cat "$tmp/install.sh" && (cd "$src" && bash -e "$tmp/install.sh")
}

# What the recipe promises: a release build, and neither the test suites nor sp-bench.
install_is_release_library_only() {
    local opts
    opts=$(meson introspect --buildoptions "$tmp/build") || return 1
    python3 -c 'import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print("buildtype", o["buildtype"], "tests", o["tests"], "bench", o["bench"])
sys.exit(not (o["buildtype"] == "release" and o["tests"] == "disabled" and not o["bench"]))' \
        <<<"$opts" &&
        ! grep -q "sp-bench\|test_streampool\|cmocka" "$tmp/build/build.ninja"
}

# The real runtime's SONAME (libcudart.so.<major>) and where the toolkit keeps it.
real_soname() {
    local libdir
    libdir=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --variable=cuda_libdir streampool)
    readelf -d "$libdir/libcudart.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'
}

installed_library_needs_real_runtime() {
    # Whole outputs first: `producer | grep -q` under pipefail fails at random when grep exits
    # before the producer has written everything (SIGPIPE).
    local lib=$prefix/lib/libstreampool.so.0 soname dyn sim_dyn sim_syms
    soname=$(real_soname)
    dyn=$(readelf -d "$lib") && sim_dyn=$(readelf -d "$prefix/lib/cudasim/$soname") &&
        sim_syms=$(objdump -T "$prefix/lib/cudasim/$soname") || return 1
    echo "$dyn"
    [ -n "$soname" ] &&
        grep -q "(NEEDED).*\[$soname\]" <<<"$dyn" &&
        ! grep -qi -e cudasim -e RPATH -e RUNPATH <<<"$dyn" &&
        grep -q "(SONAME).*\[$soname\]" <<<"$sim_dyn" &&
        grep -q " $soname *cudaMallocAsync$" <<<"$sim_syms"
}

# Runs a consumer on the installed cudasim and checks that cudasim is what it resolved.
run_on_cudasim() {
    local exe=$1 soname
    soname=$(real_soname)
    export LD_LIBRARY_PATH=$prefix/lib/cudasim:$prefix/lib
    ldd "$exe" | grep "$soname => $prefix/lib/cudasim/$soname" && "$exe"
    local rc=$?
    unset LD_LIBRARY_PATH
    return $rc
}

recipe() { # recipe DIR: a fresh copy of tests/consumers/DIR with the consumer sources
    rm -rf "${tmp:?}/$1"
    cp -r "$here/$1" "$tmp/$1" && cp "$here/consumer.c" "$here/consumer.cpp" "$tmp/$1/"
}

readme_dir() { # readme_dir DIR: a fresh directory with README's example as example.c
    rm -rf "${tmp:?}/$1"
    mkdir -p "$tmp/$1" && readme_block "" "$tmp/$1/example.c"
}

readme_makefile() {
    readme_dir readme-make && readme_block makefile "$tmp/readme-make/Makefile" &&
        PKG_CONFIG_PATH=$prefix/lib/pkgconfig make -C "$tmp/readme-make" &&
        run_on_cudasim "$tmp/readme-make/example"
}

# -Werror=dev: a file without cmake_minimum_required or project() is not a whole CMakeLists.txt
readme_cmake() {
    readme_dir readme-cmake && readme_block cmake "$tmp/readme-cmake/CMakeLists.txt" &&
        cmake -Werror=dev -S "$tmp/readme-cmake" -B "$tmp/readme-cmake/build" \
            -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" &&
        cmake --build "$tmp/readme-cmake/build" &&
        run_on_cudasim "$tmp/readme-cmake/build/example"
}

make_pkg_config() {
    recipe make &&
        PKG_CONFIG_PATH=$prefix/lib/pkgconfig make -C "$tmp/make" &&
        readelf -d "$tmp/make/consumer" | grep NEEDED &&
        run_on_cudasim "$tmp/make/consumer"
}

make_cxx() {
    run_on_cudasim "$tmp/make/consumer-cxx"
}

cmake_find_package() {
    recipe cmake &&
        cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" \
            -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" &&
        cmake --build "$tmp/cmake/build" &&
        run_on_cudasim "$tmp/cmake/build/consumer"
}

meson_subproject() {
    recipe meson && mkdir -p "$tmp/meson/subprojects" &&
        ln -s "$src" "$tmp/meson/subprojects/streampool" &&
        meson setup "$tmp/meson/build" "$tmp/meson" -Dwerror=true -Dc_link_args="$LDFLAGS" &&
        meson test -C "$tmp/meson/build" --print-errorlogs &&
        ! grep -q "sp-bench\|test_streampool" "$tmp/meson/build/build.ninja"
}

cudasim_pc() {
    local flags
    flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs streampool cudasim) &&
        cc -std=c11 -Wall -Wextra -pedantic -Werror "$here/ci_on_cudasim.c" -o "$tmp/ci_on_cudasim" \
            $LDFLAGS $flags &&
        run_on_cudasim "$tmp/ci_on_cudasim"
}

# cnmem/example.c, a CNMeM program, built as its users would: pkg-config streampool_cnmem in a
# plain compiler line, then CMake's streampool::cnmem.
cnmem_consumers() {
    local flags
    flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs streampool_cnmem) &&
        cc -std=c11 -Wall -Wextra -pedantic -Werror "$src/cnmem/example.c" -o "$tmp/cnmem_pc" \
            $LDFLAGS $flags &&
        run_on_cudasim "$tmp/cnmem_pc" &&
        rm -rf "${tmp:?}/cnmem" && cp -r "$here/cnmem" "$tmp/cnmem" &&
        cp "$src/cnmem/example.c" "$tmp/cnmem/" &&
        cmake -S "$tmp/cnmem" -B "$tmp/cnmem/build" -DCMAKE_PREFIX_PATH="$prefix" \
            -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" &&
        cmake --build "$tmp/cnmem/build" &&
        run_on_cudasim "$tmp/cnmem/build/cnmem_example"
}

echo "1..11"
step "README's install recipe into a temporary prefix with cudasim" install_streampool "$@"
step "the install is a release build of the library alone" install_is_release_library_only
step "installed libstreampool NEEDs the real libcudart, never cudasim" \
    installed_library_needs_real_runtime
step "README's example under README's Makefile (--as-needed) runs on cudasim" readme_makefile
step "README's example under README's CMakeLists.txt (--as-needed) runs on cudasim" readme_cmake
step "Makefile + pkg-config: C consumer under --as-needed runs on cudasim" make_pkg_config
step "Makefile + pkg-config: C++ consumer (-pedantic -Werror) runs on cudasim" make_cxx
step "CMake find_package(streampool) under --as-needed runs on cudasim" cmake_find_package
step "Meson subproject (no bench, no tests) under --as-needed runs on cudasim" meson_subproject
step "cudasim.pc: a downstream test calls cudasim's extension API" cudasim_pc
step "CNMeM program: pkg-config streampool_cnmem and CMake streampool::cnmem run on cudasim" \
    cnmem_consumers
exit $failed
