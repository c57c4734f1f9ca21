#!/usr/bin/env python3
"""The pytorch suite: real PyTorch (from PyPI, in the virtual environment tests/torch/venv.sh
makes) on cudasim, through every entry point README's "PyTorch" section documents for
libstreampool_torch, beside PyTorch's own allocator and its cudaMallocAsync backend as the
control. Prints TAP; the figures go out as TAP comments.

Each scenario runs in a process of its own (an allocator is chosen once per process), started
from the venv's interpreter with cudasim's libcudart.so.13 preloaded (torch's libraries find
their runtime through their own RUNPATH, which LD_LIBRARY_PATH does not override; a preloaded
library of the same SONAME does) and the stand-in libcuda.so.1 on the library path.

Usage: test_pytorch.py CUDASIM_LIBCUDART SIM_LIBCUDA_DIR LIBSTREAMPOOL_TORCH
       test_pytorch.py --scenario NAME LIBSTREAMPOOL_TORCH     (inside the venv, the runner's)
"""
import json
import os
import subprocess
import sys
import time

TORCH_VERSION = "2.15.0"
DEVICE_MEMORY = 4 << 30          # CUDASIM_DEVICE_MEMORY for every scenario
MiB = 1 << 20


def venv_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("SP_TORCH_VENV") or os.path.join(cache, "streampool", "torch-venv")


# ---------------------------------------------------------------- inside the venv: scenarios

class Checks:
    """Named checks and figures of one scenario, written as one JSON object at the end."""

    def __init__(self):
        self.checks, self.figures = [], []

    def check(self, name, ok, detail=""):
        self.checks.append((name, bool(ok), str(detail)))

    def figure(self, text):
        self.figures.append(text)


def streampool_lib(so):
    import ctypes
    lib = ctypes.CDLL(so)
    lib.sp_torch_pool_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64]
    lib.sp_torch_set_pool.argtypes = [ctypes.c_char_p]
    lib.sp_torch_pool_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                             ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.sp_torch_last_failure.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.sp_torch_failed_allocs.restype = ctypes.c_uint64

    def stats(pool=None, device=0):
        buf, need = ctypes.create_string_buffer(1 << 16), ctypes.c_size_t()
        rc = lib.sp_torch_pool_stats_json(pool, device, buf, len(buf), ctypes.byref(need))
        return json.loads(buf.value) if rc == 0 else {"status": rc}
    lib.stats = stats
    return lib


def pluggable(so, make_current=True):
    """README's lines: the allocator, its hooks, and (make_current) change_current_allocator."""
    import ctypes
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(so, "sp_torch_malloc", "sp_torch_free")
    lib = streampool_lib(so)
    addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    alloc.allocator().set_reset_fn(addr("sp_torch_empty_cache"))
    alloc.allocator().set_memory_fraction_fn(addr("sp_torch_set_memory_fraction"))
    alloc.allocator().set_record_stream_fn(addr("sp_torch_record_stream"))
    if make_current:
        torch.cuda.memory.change_current_allocator(alloc)
    return alloc, lib


def brief(st, keys=("allocs", "frees", "bad_frees")):
    out = {k: st.get(k) for k in keys}
    for k in ("requested", "held"):
        if k in st:
            out[k] = st[k]["current"]
    return json.dumps(out, sort_keys=True)


def bytes_survive(c, tag):
    """h2d, d2d, d2h copies (plain and from pinned memory, non-blocking) and a memset
    (torch.zeros) keep every byte."""
    import torch
    h = torch.arange(1 << 18, dtype=torch.float32)          # 1 MiB
    d = h.cuda()                                             # h2d
    d2 = torch.empty_like(d)
    d2.copy_(d)                                              # d2d
    c.check(f"h2d, d2d, d2h keep every byte", torch.equal(d2.cpu(), h))
    hp = h.pin_memory()
    c.check(f"pin_memory() gives pinned memory (cudaPointerGetAttributes)",
            hp.is_pinned() and not h.is_pinned())
    d3 = hp.to("cuda", non_blocking=True)
    back = torch.empty_like(hp)
    back.copy_(d3, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    c.check(f"non-blocking copies through pinned memory keep every byte",
            torch.equal(back, h))
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).cuda()
    c.check(f"a transposed (strided) device tensor copies back right",
            torch.equal(t.t().cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4).t()))
    z = torch.zeros(1000, device="cuda")
    c.check(f"torch.zeros is a memset that reads back as zeros",
            torch.equal(z.cpu(), torch.zeros(1000)))
    return [d, d2, d3, t, z]


def kernels_cannot_run(c, tag):
    import torch
    try:
        torch.ones(4, device="cuda")
        c.check(f"a kernel (torch.ones) fails: no kernel image on the emulator", False,
                "it ran")
    except Exception as e:  # torch.AcceleratorError in 2.15
        c.check(f"a kernel (torch.ones) fails: no kernel image on the emulator",
                "no kernel image is available" in str(e), str(e).splitlines()[0])


def scenario_native(c, so, backend):
    """PyTorch's own caching allocator, or its cudaMallocAsync backend: the control."""
    import torch
    c.check("torch sees one cudasim device", torch.cuda.is_available() and
            torch.cuda.device_count() == 1 and torch.cuda.get_device_name(0) == "cudasim")
    c.check("the backend is " + backend, torch.cuda.get_allocator_backend() == backend,
            torch.cuda.get_allocator_backend())
    c.check("total memory is the emulated device's",
            torch.cuda.get_device_properties(0).total_memory == DEVICE_MEMORY)
    x = torch.empty(1 << 20, device="cuda")
    c.check("memory_allocated counts a 4 MiB tensor exactly",
            torch.cuda.memory_allocated() == 4 * MiB, torch.cuda.memory_allocated())
    c.figure(f"{backend}: after a 4 MiB tensor: allocated {torch.cuda.memory_allocated()}, "
             f"reserved {torch.cuda.memory_reserved()}, mem_get_info {torch.cuda.mem_get_info()}")
    keep = bytes_survive(c, backend)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    y.record_stream(torch.cuda.current_stream())
    del y
    hi = torch.cuda.Stream(priority=-1)
    c.check("a high-priority stream (cudaStreamCreateWithPriority)", hi.priority == -1,
            hi.priority)
    kernels_cannot_run(c, backend)
    del x, keep
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    c.figure(f"{backend}: after del and empty_cache: allocated {torch.cuda.memory_allocated()}, "
             f"reserved {torch.cuda.memory_reserved()}, free {free} of {total}")
    c.check("empty_cache gives the device back all but the pinned-copy staging",
            torch.cuda.memory_allocated() == 0 and torch.cuda.memory_reserved() <= 2 * MiB,
            (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()))


def scenario_streampool(c, so):
    """change_current_allocator, copies, record_stream, tenants per thread, empty_cache."""
    import threading
    import torch
    alloc, lib = pluggable(so)
    x = torch.empty(1 << 20, device="cuda")
    st = lib.stats()
    c.check("change_current_allocator: a 4 MiB tensor is one streampool allocation",
            st["allocs"] == 1 and st["requested"]["current"] == 4 * MiB, brief(st))
    c.check("its pointer is streampool's (sp_torch_last_status 0)", x.data_ptr() != 0 and
            lib.sp_torch_last_status() == 0)
    keep = bytes_survive(c, "streampool")
    st = lib.stats()
    c.figure(f"streampool default pool after the copies: {brief(st)}")
    # record_stream: allocated on a side stream, used on the current one, freed. The free then
    # makes the side stream wait for the current one's work (cudaEventRecord +
    # cudaStreamWaitEvent, counted by cudasim, whose libcudart.so.13 this process runs on).
    import ctypes
    sim = ctypes.CDLL("libcudart.so.13")
    sim.cudasimCallCount.restype = ctypes.c_ulonglong
    sim.cudasimCallCount.argtypes = [ctypes.c_char_p]
    waits = lambda: sim.cudasimCallCount(b"cudaStreamWaitEvent")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        plain = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    before = waits()
    del plain
    c.check("a tensor freed on its own stream makes no stream wait", waits() == before,
            waits() - before)
    frees = lib.stats()["frees"]
    y.record_stream(torch.cuda.current_stream())
    c.check("record_stream reaches sp_torch_record_stream", lib.sp_torch_last_status() == 0)
    before = waits()
    del y
    st = lib.stats()
    c.check("the recorded tensor's free goes to streampool once, after one stream wait",
            st["frees"] == frees + 1 and waits() == before + 1, (brief(st), waits() - before))
    kernels_cannot_run(c, "streampool")
    # tenants: a pool per thread (sp_torch_set_pool), each with its own limit and counts
    for name in (b"llama", b"mistral"):
        c.check(f"pool_create {name.decode()}", lib.sp_torch_pool_create(name, 0, 1 << 30) == 0)
    held, errors = {}, []

    def tenant(name, n):
        try:
            lib.sp_torch_set_pool(name)
            held[name] = [torch.empty(n * MiB, dtype=torch.uint8, device="cuda")
                          for _ in range(3)]
            torch.cuda.current_stream().synchronize()
            lib.sp_torch_set_pool(None)
        except Exception as e:  # reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=tenant, args=(b"llama", 2)),
               threading.Thread(target=tenant, args=(b"mistral", 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.check("tenant threads ran", not errors, errors)
    llama, mistral = lib.stats(b"llama"), lib.stats(b"mistral")
    c.check("llama's thread: 3 allocations of 2 MiB in llama",
            llama["allocs"] == 3 and llama["requested"]["current"] == 6 * MiB, brief(llama))
    c.check("mistral's thread: 3 allocations of 3 MiB in mistral",
            mistral["allocs"] == 3 and mistral["requested"]["current"] == 9 * MiB,
            brief(mistral))
    c.figure(f"tenants: llama {brief(llama)}; mistral {brief(mistral)}")
    del held[b"llama"], held[b"mistral"], x, keep
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    pools = {"default": lib.stats(), "llama": lib.stats(b"llama"),
             "mistral": lib.stats(b"mistral")}
    c.check("after del and empty_cache every pool holds 0 bytes, every allocation freed",
            all(p["held"]["current"] == 0 and p["allocs"] == p["frees"] and
                p["bad_frees"] == 0 for p in pools.values()),
            {k: brief(v) for k, v in pools.items()})
    for k, v in pools.items():
        c.figure(f"streampool {k} pool after empty_cache: {brief(v)}, trims {v['trims']}, "
                 f"trimmed_bytes {v['trimmed_bytes']}, driver_allocs {v['driver_allocs']}")
    try:
        torch.cuda.memory_allocated()
        c.figure("torch.cuda.memory_allocated() answers under a pluggable allocator")
    except Exception as e:
        c.figure("torch.cuda.memory_allocated() under a pluggable allocator: "
                 + str(e).splitlines()[0])


def scenario_mempool(c, so):
    """torch.cuda.MemPool(allocator.allocator()) + use_mem_pool, PyTorch's own allocator
    current: the pool's segments come from streampool, in the tenant the thread chose."""
    import torch
    alloc, lib = pluggable(so, make_current=False)
    a = torch.empty(1000, device="cuda")            # PyTorch's own allocator
    c.check("pool_create llama", lib.sp_torch_pool_create(b"llama", 0, 1 << 30) == 0)
    pool = torch.cuda.MemPool(alloc.allocator())
    lib.sp_torch_set_pool(b"llama")
    with torch.cuda.use_mem_pool(pool):
        k = torch.empty(1000, device="cuda")
        big = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
    lib.sp_torch_set_pool(None)
    st = lib.stats(b"llama")
    c.check("use_mem_pool: the MemPool's segments are streampool allocations in llama",
            st["allocs"] == 2 and st["requested"]["current"] == 2 * MiB + 20 * MiB, brief(st))
    c.figure(f"MemPool: PyTorch took a 2 MiB small segment and a 20 MiB large one: {brief(st)}; "
             f"default pool allocs {lib.stats()['allocs']}")
    k.copy_(torch.arange(1000, dtype=torch.float32).cuda())
    c.check("bytes copied into the MemPool's tensor survive",
            torch.equal(k.cpu(), torch.arange(1000, dtype=torch.float32)))
    c.check("the other tensor stayed with PyTorch's allocator",
            torch.cuda.memory_allocated() >= 4096 and a.data_ptr() != 0)
    del k, big
    torch.cuda.synchronize()
    st = lib.stats(b"llama")
    c.check("PyTorch keeps the segments cached while the MemPool lives", st["frees"] == 0,
            brief(st))
    del pool
    torch.cuda.empty_cache()
    st = lib.stats(b"llama")
    c.check("deleting the MemPool and empty_cache free both segments to streampool",
            st["frees"] == 2 and st["requested"]["current"] == 0, brief(st))
    c.figure(f"MemPool deleted, torch.cuda.empty_cache(): {brief(st)} (PyTorch's own allocator "
             "is current, so its empty_cache does not reach streampool's reset hook)")
    lib.sp_torch_empty_cache()
    st = lib.stats(b"llama")
    c.check("sp_torch_empty_cache then gives llama's cached bytes back",
            st["held"]["current"] == 0, brief(st))
    # A NULL from a MemPool's allocator is PyTorch's own allocator's to handle: it raises.
    c.check("pool_create small (8 MiB)", lib.sp_torch_pool_create(b"small", 0, 8 << 20) == 0)
    small = torch.cuda.MemPool(alloc.allocator())
    lib.sp_torch_set_pool(b"small")
    try:
        with torch.cuda.use_mem_pool(small):
            torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
        c.check("a NULL inside use_mem_pool is torch.OutOfMemoryError (PyTorch's own allocator "
                "checks it)", False, "no exception")
    except torch.OutOfMemoryError as e:
        c.check("a NULL inside use_mem_pool is torch.OutOfMemoryError (PyTorch's own allocator "
                "checks it)", True, str(e).splitlines()[0][:120])
    finally:
        lib.sp_torch_set_pool(None)


def scenario_null(c, so):
    """What PyTorch 2.15 does with alloc_fn's NULL, and streampool's line on stderr."""
    import torch
    alloc, lib = pluggable(so)
    c.check("pool_create small (8 MiB)", lib.sp_torch_pool_create(b"small", 0, 8 << 20) == 0)
    lib.sp_torch_set_pool(b"small")
    raised = None
    try:
        t = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
        t2 = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")  # the same failure
    except Exception as e:
        raised = e
    lib.sp_torch_set_pool(None)
    c.check("PyTorch 2.15 raises nothing for a NULL from alloc_fn", raised is None, repr(raised))
    if raised is None:
        c.check("it returns a tensor whose data_ptr() is 0",
                t.data_ptr() == 0 and t2.data_ptr() == 0 and t.numel() == 16 * MiB,
                (t.data_ptr(), t.numel()))
        del t, t2
    c.check("sp_torch_last_status is SP_ERR_NEVER_FITS (-19)", lib.sp_torch_last_status() == -19,
            lib.sp_torch_last_status())
    import ctypes
    buf = ctypes.create_string_buffer(512)
    c.check("sp_torch_last_failure has the thread's line",
            lib.sp_torch_last_failure(buf, len(buf)) == -19 and
            b'16777216 bytes on device 0' in buf.value and b'pool "small"' in buf.value,
            buf.value.decode())
    c.check("sp_torch_failed_allocs counts both", lib.sp_torch_failed_allocs() == 2)
    print(json.dumps({"stderr_line": buf.value.decode()}), file=sys.stderr)
    # Using such a tensor fails only when something touches its memory: a copy into it is
    # cudaMemcpyAsync to NULL, cudaErrorInvalidValue ("invalid argument").
    lib.sp_torch_set_pool(b"small")
    t = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    lib.sp_torch_set_pool(None)
    try:
        t.copy_(torch.ones(16 * MiB, dtype=torch.uint8))
        torch.cuda.synchronize()
        c.check("a copy into the data_ptr() 0 tensor fails: invalid argument", False, "no error")
    except Exception as e:
        c.check("a copy into the data_ptr() 0 tensor fails: invalid argument",
                "invalid argument" in str(e), str(e).splitlines()[0])


def scenario_oom(c, so):
    """The Python helper (torch/streampool_torch.py): a NULL becomes torch.OutOfMemoryError."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "torch"))
    import streampool_torch
    sp = streampool_torch.install(so)
    c.check("pool_create small (8 MiB)", sp.pool_create("small", 0, 8 << 20) == 0)
    x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    c.check("an allocation that fits still works through the helper", x.data_ptr() != 0)
    with sp.pool("small"):
        try:
            torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
            c.check("torch.OutOfMemoryError for a request the pool cannot hold", False,
                    "no exception")
        except torch.OutOfMemoryError as e:
            c.check("torch.OutOfMemoryError for a request the pool cannot hold",
                    "SP_ERR_NEVER_FITS" in str(e) and 'pool "small"' in str(e),
                    str(e).splitlines()[0])
        ok = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
        c.check("the pool still serves what fits after the error", ok.data_ptr() != 0)
    st = sp.stats("small")
    c.check("the failed request left nothing allocated", st["requested"]["current"] == 2 * MiB,
            brief(st))


def scenario_fraction_before(c, so):
    """set_per_process_memory_fraction before the first allocation: the default pool's limit."""
    import torch
    alloc, lib = pluggable(so)
    torch.cuda.set_per_process_memory_fraction(0.25)   # 1 GiB of the 4 GiB device
    c.check("the fraction is applied before the runtime exists", lib.sp_torch_last_status() == 0,
            lib.sp_torch_last_status())
    a = torch.empty(768 * MiB, dtype=torch.uint8, device="cuda")
    b = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
    c.check("768 MiB fits under 1 GiB; 512 MiB more does not (NULL, SP_ERR_LIMIT)",
            a.data_ptr() != 0 and b.data_ptr() == 0 and lib.sp_torch_last_status() == -4,
            (a.data_ptr() != 0, b.data_ptr(), lib.sp_torch_last_status()))
    st = lib.stats()
    c.check("the pool counted one limit rejection", st["limit_rejections"] == 1, brief(st))
    del a, b


def scenario_fraction_after(c, so):
    """set_per_process_memory_fraction after the first allocation: sp_pool_set_limit changes
    the default pool's limit at once, live allocations staying valid."""
    import torch
    alloc, lib = pluggable(so)
    a = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
    torch.cuda.set_per_process_memory_fraction(0.25)   # 1 GiB, 512 MiB of it live
    status = lib.sp_torch_last_status()
    c.check("the fraction applies after the first allocation", status == 0, status)
    b = torch.empty(768 * MiB, dtype=torch.uint8, device="cuda")
    c.check("768 MiB more is refused under the new 1 GiB limit (NULL, SP_ERR_LIMIT)",
            b.data_ptr() == 0 and lib.sp_torch_last_status() == -4,
            (b.data_ptr(), lib.sp_torch_last_status()))
    c.check("the live tensor stays valid", a.data_ptr() != 0)
    torch.cuda.set_per_process_memory_fraction(0.5)    # raised to 2 GiB
    b = torch.empty(768 * MiB, dtype=torch.uint8, device="cuda")
    c.check("raised to 2 GiB, the same 768 MiB fits", b.data_ptr() != 0 and
            lib.sp_torch_last_status() == 0, lib.sp_torch_last_status())
    st = lib.stats()
    c.figure(f"fraction after the first allocation: 0.25 then 0.5 of 4 GiB: {brief(st)}, "
             f"limit_rejections {st['limit_rejections']}")
    del a, b


def scenario_two_devices(c, so):
    """Two devices (CUDASIM_DEVICE_COUNT=2): each has its runtime; a copy between them."""
    import torch
    alloc, lib = pluggable(so)
    h = torch.arange(1 << 16, dtype=torch.float32)           # 256 KiB
    a = h.to("cuda:0")
    b = h.to("cuda:1")
    s0, s1 = lib.stats(device=0), lib.stats(device=1)
    c.check("a tensor on cuda:1 is an allocation of device 1's runtime, bytes intact",
            torch.equal(b.cpu(), h) and s1["allocs"] == 1 and
            s1["requested"]["current"] == 1 << 18 and s0["allocs"] == 1, (brief(s0), brief(s1)))
    # PyTorch copies between devices with cudaMemcpyAsync unless the allocator says it needs
    # pool-specific peer access (a C++ virtual; CUDAPluggableAllocator answers no). Pool memory
    # of a device the copying stream's device has no access to: a device fault, sticky.
    try:
        moved = a.to("cuda:1")
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        c.check("a cuda:0 -> cuda:1 copy of streampool (pool) memory without peer access faults",
                False, "no error; bytes intact: %s" % torch.equal(moved.cpu(), h))
    except Exception as e:
        c.check("a cuda:0 -> cuda:1 copy of streampool (pool) memory without peer access faults",
                "illegal memory access" in str(e), str(e).splitlines()[0])


SCENARIOS = {
    "native": lambda c, so: scenario_native(c, so, "native"),
    "cudaMallocAsync": lambda c, so: scenario_native(c, so, "cudaMallocAsync"),
    "streampool": scenario_streampool,
    "mempool": scenario_mempool,
    "null": scenario_null,
    "oom_helper": scenario_oom,
    "fraction_before": scenario_fraction_before,
    "fraction_after": scenario_fraction_after,
    "two_devices": scenario_two_devices,
}


def run_scenario(name, so):
    import warnings
    warnings.filterwarnings("ignore")  # numpy is not installed: torch says so once
    c = Checks()
    try:
        SCENARIOS[name](c, so)
    except Exception as e:
        import traceback
        c.check(f"{name} ran to the end", False, traceback.format_exc().replace("\n", " | "))
    print("SP_RESULT " + json.dumps({"checks": c.checks, "figures": c.figures}))


# ---------------------------------------------------------------- the runner (TAP)

def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--scenario":
        return run_scenario(sys.argv[2], sys.argv[3])
    libcudart, driver_dir, so = sys.argv[1:4]
    ci = os.environ.get("CI") == "true"
    python = os.path.join(venv_dir(), "bin", "python")
    stamp = os.path.join(venv_dir(), ".streampool-torch")
    if not (os.path.exists(python) and os.path.exists(stamp)):
        msg = (f"no PyTorch venv at {venv_dir()}: scripts/test.sh makes it "
               "(tests/torch/venv.sh)")
        if ci:
            print(f"Bail out! {msg}; under CI=true the pytorch suite never skips")
            return 1
        print(f"1..0 # SKIP {msg}")
        return 0
    env = dict(os.environ)
    env.update({"LD_PRELOAD": libcudart,
                "LD_LIBRARY_PATH": driver_dir + os.pathsep + os.path.dirname(libcudart),
                "CUDASIM_DEVICE_MEMORY": str(DEVICE_MEMORY), "PYTHONDONTWRITEBYTECODE": "1"})
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env.pop("SP_ALLOC_CONF", None)
    results, n, failed = [], 0, False
    for name in SCENARIOS:
        senv = dict(env)
        if name == "cudaMallocAsync":
            senv["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        if name == "two_devices":
            senv["CUDASIM_DEVICE_COUNT"] = "2"
        start = time.monotonic()
        p = subprocess.run([python, os.path.abspath(__file__), "--scenario", name, so], env=senv,
                           capture_output=True, text=True, timeout=300)
        took = time.monotonic() - start
        line = next((l for l in p.stdout.splitlines() if l.startswith("SP_RESULT ")), None)
        if p.returncode != 0 or line is None:
            results.append((f"{name}: the scenario process ended cleanly", False,
                            f"exit {p.returncode}: " + p.stderr[-2000:].replace("\n", " | ")))
            continue
        r = json.loads(line[len("SP_RESULT "):])
        results.append((f"{name}: ran in {took:.1f} s", True, ""))
        for check in r["checks"]:
            results.append((f"{name}: {check[0]}", check[1], check[2]))
        for fig in r["figures"]:
            results.append((None, fig, ""))
        if name == "null":
            lines = [l for l in p.stderr.splitlines() if l.startswith("streampool_torch: ")]
            want = next((json.loads(l)["stderr_line"] for l in p.stderr.splitlines()
                         if l.startswith('{"stderr_line"')), None)
            results.append(("null: stderr got exactly one line for the two failed requests, "
                            "naming the pool, the request and the reason",
                            lines == [want] and "SP_ERR_NEVER_FITS" in (want or ""),
                            " | ".join(lines)))
    total = sum(1 for r in results if r[0] is not None)
    print(f"1..{total}")
    for name, ok, detail in results:
        if name is None:
            print(f"# {ok}")
            continue
        n += 1
        print(f"{'ok' if ok else 'not ok'} {n} - {name}")
        if not ok:
            failed = True
            print(f"# {detail}")
        elif detail:
            print(f"# {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
