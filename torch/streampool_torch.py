"""streampool behind PyTorch, from Python: README's "PyTorch" lines in one call, tenant pools,
their stats, and a failed allocation raised as torch.OutOfMemoryError.

    import streampool_torch
    sp = streampool_torch.install("/opt/streampool/lib/libstreampool_torch.so")
    sp.pool_create("llama", 0, 40 << 30)
    with sp.pool("llama"):
        kv = torch.empty((8192, 8192), device="cuda")   # or torch.OutOfMemoryError
    print(sp.stats("llama")["requested"]["current"])

PyTorch 2.15 does not check what a pluggable allocator returns (a NULL becomes a tensor whose
data_ptr() is 0). With raise_oom (the default) the allocator PyTorch calls is oom.cpp's wrapper,
built once with the installed torch's headers and libc10 (g++ needed, a few seconds) into
${XDG_CACHE_HOME:-~/.cache}/streampool/, which throws the c10::OutOfMemoryError PyTorch turns
into torch.OutOfMemoryError, with streampool's line (pool, request, reason) as its message."""
import contextlib
import ctypes
import hashlib
import json
import os
import subprocess

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _cache_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "streampool")


def build_oom_wrapper(so):
    """The path of oom.cpp built for this torch and this libstreampool_torch (built once)."""
    so = os.path.realpath(so)
    src = os.path.join(_HERE, "oom.cpp")
    with open(src, "rb") as f:
        key = hashlib.sha256(f.read() + torch.__version__.encode() + so.encode()).hexdigest()[:16]
    out = os.path.join(_cache_dir(), f"libstreampool_torch_oom-{key}.so")
    if os.path.exists(out):
        return out
    os.makedirs(_cache_dir(), exist_ok=True)
    root = os.path.dirname(torch.__file__)
    abi = int(torch.compiled_with_cxx11_abi())
    tmp = f"{out}.{os.getpid()}.tmp"
    cmd = [os.environ.get("CXX", "g++"), "-std=c++17", "-O1", "-shared", "-fPIC",
           "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           "-I", os.path.join(root, "include"), src, "-o", tmp,
           "-L", os.path.join(root, "lib"), "-lc10", "-Wl,-rpath," + os.path.join(root, "lib"),
           so, "-Wl,-rpath," + os.path.dirname(so)]
    subprocess.run(cmd, check=True)
    os.replace(tmp, out)  # atomic: a concurrent builder never sees half a file
    return out


class Streampool:
    """The library (ctypes), the allocator object PyTorch holds, and the tenant API."""

    def __init__(self, so, raise_oom=True, make_current=True):
        self.lib = lib = ctypes.CDLL(so)
        lib.sp_torch_pool_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64]
        lib.sp_torch_pool_destroy.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.sp_torch_set_pool.argtypes = [ctypes.c_char_p]
        lib.sp_torch_current_pool.restype = ctypes.c_char_p
        lib.sp_torch_pool_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                                 ctypes.c_size_t,
                                                 ctypes.POINTER(ctypes.c_size_t)]
        lib.sp_torch_last_failure.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.sp_torch_failed_allocs.restype = ctypes.c_uint64
        if raise_oom:
            self.allocator = torch.cuda.memory.CUDAPluggableAllocator(
                build_oom_wrapper(so), "sp_torch_oom_malloc", "sp_torch_oom_free")
        else:
            self.allocator = torch.cuda.memory.CUDAPluggableAllocator(
                so, "sp_torch_malloc", "sp_torch_free")
        addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        self.allocator.allocator().set_reset_fn(addr("sp_torch_empty_cache"))
        self.allocator.allocator().set_memory_fraction_fn(addr("sp_torch_set_memory_fraction"))
        self.allocator.allocator().set_record_stream_fn(addr("sp_torch_record_stream"))
        if make_current:
            torch.cuda.memory.change_current_allocator(self.allocator)

    def pool_create(self, name, device, limit):
        return self.lib.sp_torch_pool_create(name.encode(), device, limit)

    def pool_destroy(self, name, device):
        return self.lib.sp_torch_pool_destroy(name.encode(), device)

    @contextlib.contextmanager
    def pool(self, name):
        """The calling thread allocates from pool `name` inside the block (None: default)."""
        before = self.lib.sp_torch_current_pool()
        self.lib.sp_torch_set_pool(name.encode() if name else None)
        try:
            yield
        finally:
            self.lib.sp_torch_set_pool(before or None)

    def stats(self, name=None, device=0):
        buf, need = ctypes.create_string_buffer(1 << 16), ctypes.c_size_t()
        rc = self.lib.sp_torch_pool_stats_json(name.encode() if name else None, device, buf,
                                               len(buf), ctypes.byref(need))
        if rc != 0:
            raise ValueError(f"sp_torch_pool_stats_json: status {rc}")
        return json.loads(buf.value)

    def last_failure(self):
        """(status, line) of the calling thread's latest failed allocation ((0, "") if none)."""
        buf = ctypes.create_string_buffer(1024)
        rc = self.lib.sp_torch_last_failure(buf, len(buf))
        return rc, buf.value.decode()


def install(so, raise_oom=True, make_current=True):
    """README's lines: the allocator (raising torch.OutOfMemoryError unless raise_oom is
    False), its hooks, and change_current_allocator (unless make_current is False, for a
    torch.cuda.MemPool(sp.allocator.allocator()))."""
    return Streampool(so, raise_oom, make_current)
