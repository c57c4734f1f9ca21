#!/usr/bin/env bash
# Installs what building and testing streampool needs on Debian 12: Meson, Ninja, pkg-config,
# CMake, g++ and make (the consumer tests build against the installed library as users do),
# cmocka (tests) and libmicrohttpd (examples/server; the build skips the example without it,
# except under CI=true). The CUDA toolkit is expected in its standard
# location (/usr/local/cuda); nothing here downloads it.
# Test-only: promtool (Debian's prometheus) and prometheus-client (python3-prometheus-client)
# check the metrics text and the example server's scrape, and clang++ (Debian's clang) builds
# streampool.hpp's test beside g++, and python3-venv makes the pytorch suite's venv
# (tests/torch/venv.sh). Run as root, setup.sh installs them too, so that every test
# runs; otherwise it names them and those tests skip without them (fail under CI=true).
# `setup.sh --list` prints the lists and installs nothing. `setup.sh --bench` (scripts/bench.sh)
# installs only what building sp-bench needs: no test framework, no test-only package (Debian's
# prometheus is a daemon that a systemd host would start), no recommended packages.
set -euo pipefail
packages=(meson ninja-build pkg-config libcmocka-dev python3 cmake g++ make binutils
          libmicrohttpd-dev)
test_packages=(prometheus python3-prometheus-client clang python3-venv)
bench_packages=(meson ninja-build pkg-config gcc libc6-dev python3)
if [ "${1:-}" = --list ]; then
  echo "required: ${packages[*]}"
  echo "test-only: ${test_packages[*]}"
  echo "bench: ${bench_packages[*]}"
  exit 0
fi
apt_flags=()
if [ "${1:-}" = --bench ]; then
  packages=("${bench_packages[@]}")
  test_packages=()
  apt_flags=(--no-install-recommends)
fi
missing() { # prints the packages of "$@" that are not installed
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t need < <(missing "${packages[@]}")
mapfile -t need_tests < <(missing "${test_packages[@]}")
if [ "$(id -u)" -eq 0 ]; then
  if [ $((${#need[@]} + ${#need_tests[@]})) -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${apt_flags[@]}" "${need[@]}" "${need_tests[@]}" >/dev/null
  fi
else
  if [ ${#need[@]} -gt 0 ]; then
    echo "streampool needs: sudo apt-get install -y ${need[*]} ${need_tests[*]}" >&2
    exit 1
  fi
  if [ ${#need_tests[@]} -gt 0 ]; then
    echo "setup.sh: the metrics and clang++ tests skip without: sudo apt-get install -y ${need_tests[*]}" >&2
  fi
fi
if ! [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "streampool needs the CUDA toolkit (11.2 or later) in /usr/local/cuda" >&2
  exit 1
fi
