#!/usr/bin/env python3
"""README's "PyTorch" lines without PyTorch: the library loaded by ctypes.CDLL, its entry points
taken as addresses the way torch.cuda.memory.CUDAPluggableAllocator takes them, and called
through those addresses with PyTorch's C types; the tenant API and the stats called as README
shows. Prints TAP. Usage: test_ctypes.py PATH/libstreampool_torch.so"""
import ctypes
import json
import sys

so = sys.argv[1]
results = []


def check(name, ok):
    results.append((name, bool(ok)))


# What CUDAPluggableAllocator.__init__ does with the names it is given.
lib = ctypes.CDLL(so)
addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
alloc_addr, free_addr = addr("sp_torch_malloc"), addr("sp_torch_free")
check("the entry points have addresses", alloc_addr and free_addr)
# PyTorch turns those addresses into void*(size_t, int, cudaStream_t) and
# void(void*, size_t, int, cudaStream_t); these are the same C types.
alloc_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
    alloc_addr)
free_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                           ctypes.c_void_p)(free_addr)
for hook in ("sp_torch_empty_cache", "sp_torch_set_memory_fraction", "sp_torch_record_stream"):
    check(hook + " has an address", addr(hook))

# README's tenant lines.
lib.sp_torch_pool_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64]
lib.sp_torch_set_pool.argtypes = [ctypes.c_char_p]
lib.sp_torch_pool_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
check("pool_create", lib.sp_torch_pool_create(b"llama", 0, 40 << 30) == 0)
check("set_pool", lib.sp_torch_set_pool(b"llama") == 0)

sizes = [1, 4096 + 1, 3 << 20]
ptrs = [alloc_fn(n, 0, None) for n in sizes]  # device 0, the default stream
check("allocations succeed, 256-byte aligned", all(p and p % 256 == 0 for p in ptrs))
check("set_pool(None)", lib.sp_torch_set_pool(None) == 0)
default_ptr = alloc_fn(1 << 20, 0, None)


def stats(pool):
    buf = ctypes.create_string_buffer(1 << 16)
    need = ctypes.c_size_t()
    if lib.sp_torch_pool_stats_json(pool, 0, buf, len(buf), ctypes.byref(need)) != 0:
        return {}
    return json.loads(buf.value)


llama = stats(b"llama")
check("the tenant's stats count its allocations",
      llama.get("allocs") == 3 and llama["requested"]["current"] == sum(sizes))
check("the default pool has its own", stats(None).get("allocs") == 1)
for p, n in zip(ptrs, sizes):
    free_fn(p, n, 0, None)  # the size, device and stream of the allocation, as PyTorch passes
free_fn(default_ptr, 1 << 20, 0, None)
check("frees went to their pools", stats(b"llama").get("frees") == 3 and
      stats(None).get("frees") == 1 and stats(b"llama")["requested"]["current"] == 0)
check("shutdown", lib.sp_torch_shutdown() == 0)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
