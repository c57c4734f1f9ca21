#!/usr/bin/env bash
# Installs what building and testing streampool needs on Debian 12: Meson, Ninja, pkg-config,
# CMake, g++ and make (the consumer tests build against the installed library as users do),
# cmocka (tests) and libmicrohttpd (examples/server; the build skips the example without it,
# except under CI=true). The CUDA toolkit is expected in its standard
# location (/usr/local/cuda); nothing here downloads it.
set -euo pipefail
packages=(meson ninja-build pkg-config libcmocka-dev python3 cmake g++ make binutils
          libmicrohttpd-dev)
# Test-only: promtool (Debian's prometheus) checks the metrics text and the example server's
# scrape, and clang++ (Debian's clang) builds streampool.hpp's test beside g++. CI installs them;
# elsewhere those tests skip without them (under CI=true they fail).
if [ "${CI:-}" = true ]; then
  packages+=(prometheus clang)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "streampool needs: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
if ! [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "streampool needs the CUDA toolkit (11.2 or later) in /usr/local/cuda" >&2
  exit 1
fi
# Test-only, like promtool: prometheus-client's text parser reads the metrics back.
if [ "${CI:-}" = true ] && ! python3 -c 'import prometheus_client' 2>/dev/null; then
  python3 -m pip install --quiet prometheus-client ||
    echo "setup.sh: could not install prometheus-client: the metrics test will skip" >&2
fi
