#!/usr/bin/env bash
# The names PyTorch's CUDAPluggableAllocator and its hooks load by dlsym, and the tenant C API,
# are exactly what libstreampool_torch exports: every one is a defined function in the dynamic
# symbol table, and nothing else of ours (no internal sp__ name) is. Prints TAP.
# Usage: symbols.sh PATH/libstreampool_torch.so
set -uo pipefail
lib=$1
expected=(sp_torch_malloc sp_torch_free sp_torch_empty_cache sp_torch_set_memory_fraction
          sp_torch_record_stream sp_torch_last_status sp_torch_pool_create sp_torch_pool_destroy
          sp_torch_set_pool sp_torch_current_pool sp_torch_runtime sp_torch_pool_stats
          sp_torch_pool_stats_json sp_torch_shutdown sp_torch_last_failure
          sp_torch_failed_allocs)
# Whole output first: `nm | grep -q` under pipefail fails when grep exits before nm is done.
if ! syms=$(nm -D --defined-only "$lib"); then
    echo "Bail out! nm failed on $lib"
    exit 1
fi
echo "1..$((${#expected[@]} + 1))"
n=0
failed=0
for name in "${expected[@]}"; do
    n=$((n + 1))
    if grep -qE "^[0-9a-f]+ T ${name}\$" <<<"$syms"; then
        echo "ok $n - $name is an exported function"
    else
        echo "not ok $n - $name is an exported function"
        failed=1
    fi
done
n=$((n + 1))
# Our functions only (the toolchain's _init/_fini and the like are not ours).
ours=$(awk '$2 ~ /^[TDBR]$/ && $3 ~ /^sp_/ {print $3}' <<<"$syms" | sort)
want=$(printf '%s\n' "${expected[@]}" | sort)
if [ "$ours" = "$want" ]; then
    echo "ok $n - no other sp_ symbol is exported"
else
    echo "not ok $n - no other sp_ symbol is exported"
    diff <(echo "$want") <(echo "$ours") | sed 's/^/# /'
    failed=1
fi
exit $failed
