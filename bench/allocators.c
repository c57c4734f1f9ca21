/* The allocators under test, behind one interface, each starting from a clean device: the
 * synchronous cudaMalloc/cudaFree baseline, raw cudaMallocAsync on the device's default pool
 * with CUDA's release threshold (0) and with UINT64_MAX, and streampool. Also the CUDA call
 * counters, which only cudasim has. */
#include <string.h>

#include "bench.h"

#ifdef SP_CUDASIM
#include "cudasim.h"
#endif

const char *bench_alloc_name(alloc_kind kind)
{
    switch (kind) {
    case ALLOC_CUDA_MALLOC: return "cudaMalloc";
    case ALLOC_ASYNC_DEFAULT: return "cudaMallocAsync";
    case ALLOC_ASYNC_KEEP: return "cudaMallocAsync (threshold max)";
    case ALLOC_STREAMPOOL: return "streampool";
    default: return "?";
    }
}

static int set_default_threshold(cudaMemPool_t pool, uint64_t threshold)
{
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess
               ? 0 : -1;
}

int bench_alloc_open(bench_alloc *a, alloc_kind kind)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->name = bench_alloc_name(kind);
    if (cudaDeviceGetDefaultMemPool(&a->default_pool, 0) != cudaSuccess)
        return -1;
    switch (kind) {
    case ALLOC_ASYNC_DEFAULT: return set_default_threshold(a->default_pool, 0);
    case ALLOC_ASYNC_KEEP: return set_default_threshold(a->default_pool, UINT64_MAX);
    case ALLOC_STREAMPOOL:
        if (sp_runtime_create(0, NULL, &a->rt) != SP_OK)
            return -1;
        return sp_pool_create(a->rt, "bench", NULL, &a->pool) == SP_OK ? 0 : -1;
    default: return 0;
    }
}

int bench_alloc_alloc(bench_alloc *a, void **p, size_t n, cudaStream_t s)
{
    switch (a->kind) {
    case ALLOC_CUDA_MALLOC: return cudaMalloc(p, n) == cudaSuccess ? 0 : -1;
    case ALLOC_STREAMPOOL: return sp_alloc(a->pool, p, n, s) == SP_OK ? 0 : -1;
    default: return cudaMallocAsync(p, n, s) == cudaSuccess ? 0 : -1;
    }
}

int bench_alloc_free(bench_alloc *a, void *p, cudaStream_t s)
{
    switch (a->kind) {
    case ALLOC_CUDA_MALLOC: return cudaFree(p) == cudaSuccess ? 0 : -1;
    case ALLOC_STREAMPOOL: return sp_free(a->pool, p, s) == SP_OK ? 0 : -1;
    default: return cudaFreeAsync(p, s) == cudaSuccess ? 0 : -1;
    }
}

void bench_alloc_stream_done(bench_alloc *a, cudaStream_t s)
{
    if (a->kind == ALLOC_STREAMPOOL)
        (void)sp_stream_release(a->rt, s);
}

/* Leaves the device as the next allocator should find it: idle, nothing reserved. */
void bench_alloc_close(bench_alloc *a)
{
    if (a->kind == ALLOC_STREAMPOOL) {
        (void)sp_pool_destroy(a->pool);
        (void)sp_runtime_destroy(a->rt);
    }
    (void)cudaDeviceSynchronize();
    (void)set_default_threshold(a->default_pool, 0);
    (void)cudaMemPoolTrimTo(a->default_pool, 0);
    uint64_t zero = 0;
    (void)cudaMemPoolSetAttribute(a->default_pool, cudaMemPoolAttrReservedMemHigh, &zero);
    (void)cudaMemPoolSetAttribute(a->default_pool, cudaMemPoolAttrUsedMemHigh, &zero);
}

size_t device_used_bytes(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    return total - free_b;
}

#ifdef SP_CUDASIM
static const char *const work_calls[] = {
    "cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchHostFunc", "cudaStreamSynchronize",
    "cudaMemGetInfo", "cudaDeviceSynchronize", "cudaStreamCreateWithFlags", "cudaStreamDestroy",
};

void calls_reset(void)
{
    cudasimResetCallCounts();
}

long long calls_by_allocator(void)
{
    long long n = (long long)cudasimCallCount(NULL);
    for (size_t i = 0; i < sizeof work_calls / sizeof work_calls[0]; i++)
        n -= (long long)cudasimCallCount(work_calls[i]);
    return n;
}

bool calls_available(void)
{
    return true;
}
#else
void calls_reset(void)
{
}

long long calls_by_allocator(void)
{
    return -1;
}

bool calls_available(void)
{
    return false;
}
#endif
