#!/usr/bin/env bash
# README's example against the real libcudart (issue 22, item 6): on a machine without a CUDA
# driver or GPU, what it prints must name the CUDA error and say how to run on cudasim instead.
# Where a device is present the example just runs: skipped (exit 77).
# Usage: readme_no_driver.sh EXAMPLE
set -u
out=$("$1" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ]; then
    echo "a driver and a device are present: nothing to check"
    exit 77
fi
grep -Eq "^CUDA: cudaError(InsufficientDriver|NoDevice) \([0-9]+\)" <<<"$out" &&
    grep -q "cudasim first in LD_LIBRARY_PATH" <<<"$out"
