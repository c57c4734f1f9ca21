/* The allocators under test, behind one interface, each starting from a clean device: the
 * synchronous cudaMalloc/cudaFree baseline, raw cudaMallocAsync on the device's default pool
 * with CUDA's release threshold (0) and with UINT64_MAX, and streampool. Also the CUDA call
 * counters, which only cudasim has. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
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
        if (sp_pool_create(a->rt, "bench", NULL, &a->pools[0]) != SP_OK)
            return -1;
        a->pool = a->pools[0];
        return 0;
    default: return 0;
    }
}

/* Tenant pools are made when first used, so a one-tenant run has exactly one pool. */
static sp_pool *tenant_pool(bench_alloc *a, int tenant)
{
    if (tenant < 0 || tenant >= BENCH_MAX_TENANTS)
        return NULL;
    if (!a->pools[tenant]) {
        char name[32];
        snprintf(name, sizeof name, "tenant-%d", tenant);
        if (sp_pool_create(a->rt, name, NULL, &a->pools[tenant]) != SP_OK)
            return NULL;
    }
    return a->pools[tenant];
}

int bench_alloc_alloc_tenant(bench_alloc *a, int tenant, void **p, size_t n, cudaStream_t s)
{
    switch (a->kind) {
    case ALLOC_CUDA_MALLOC: return cudaMalloc(p, n) == cudaSuccess ? 0 : -1;
    case ALLOC_STREAMPOOL: {
        sp_pool *pool = tenant_pool(a, tenant);
        return pool && sp_alloc(pool, p, n, s) == SP_OK ? 0 : -1;
    }
    default: return cudaMallocAsync(p, n, s) == cudaSuccess ? 0 : -1;
    }
}

int bench_alloc_free_tenant(bench_alloc *a, int tenant, void *p, cudaStream_t s)
{
    switch (a->kind) {
    case ALLOC_CUDA_MALLOC: return cudaFree(p) == cudaSuccess ? 0 : -1;
    case ALLOC_STREAMPOOL: {
        sp_pool *pool = tenant_pool(a, tenant);
        return pool && sp_free(pool, p, s) == SP_OK ? 0 : -1;
    }
    default: return cudaFreeAsync(p, s) == cudaSuccess ? 0 : -1;
    }
}

int bench_alloc_alloc(bench_alloc *a, void **p, size_t n, cudaStream_t s)
{
    return bench_alloc_alloc_tenant(a, 0, p, n, s);
}

int bench_alloc_free(bench_alloc *a, void *p, cudaStream_t s)
{
    return bench_alloc_free_tenant(a, 0, p, s);
}

void bench_alloc_stats(bench_alloc *a, sp_stats *st)
{
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    if (a->kind == ALLOC_STREAMPOOL)
        (void)sp_runtime_stats(a->rt, st);
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
        for (int i = 0; i < BENCH_MAX_TENANTS; i++)
            if (a->pools[i])
                (void)sp_pool_destroy(a->pools[i]);
        (void)sp_runtime_destroy(a->rt);
    }
    (void)cudaDeviceSynchronize();
    (void)set_default_threshold(a->default_pool, 0);
    (void)cudaMemPoolTrimTo(a->default_pool, 0);
    uint64_t zero = 0;
    (void)cudaMemPoolSetAttribute(a->default_pool, cudaMemPoolAttrReservedMemHigh, &zero);
    (void)cudaMemPoolSetAttribute(a->default_pool, cudaMemPoolAttrUsedMemHigh, &zero);
}

size_t device_total_bytes(void)
{
    size_t free_b = 0, total = 0;
    return cudaMemGetInfo(&free_b, &total) == cudaSuccess ? total : 0;
}

bool device_can_resize(void)
{
#ifdef SP_CUDASIM
    return true;
#else
    return false;
#endif
}

bool device_fresh(size_t capacity)
{
#ifdef SP_CUDASIM
    cudasimReset();
    return capacity == 0 || cudasimSetDeviceMemory(0, capacity) == cudaSuccess;
#else
    (void)capacity;
    return false;
#endif
}

/* The benchmark's own stream queries, synchronizations and memory queries. They are counted
 * here, where the benchmark makes them, not subtracted by name from cudasim's totals: streampool
 * makes the same calls itself (cudaStreamSynchronize to settle frees, cudaMemGetInfo before an
 * out-of-memory answer), and those are its calls. */
static _Atomic long long own_mem_info, own_syncs, own_queries;

size_t device_used_bytes(void)
{
    size_t free_b = 0, total = 0;
    own_mem_info++;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    return total - free_b;
}

cudaError_t bench_stream_sync(cudaStream_t s)
{
    own_syncs++;
    return cudaStreamSynchronize(s);
}

void bench_stream_drain(cudaStream_t s)
{
    for (;;) {
        own_queries++;
        if (cudaStreamQuery(s) != cudaErrorNotReady)
            return;
        sched_yield();
    }
}

static const char *const api_names[API_COUNT] = {
    [API_DRIVER_ALLOC] = "driver_alloc",
    [API_DRIVER_FREE] = "driver_free",
    [API_EVENT_RECORD] = "cudaEventRecord",
    [API_EVENT_QUERY] = "cudaEventQuery",
    [API_STREAM_WAIT_EVENT] = "cudaStreamWaitEvent",
    [API_EVENT_SYNCHRONIZE] = "cudaEventSynchronize",
    [API_STREAM_QUERY] = "cudaStreamQuery",
    [API_STREAM_SYNCHRONIZE] = "cudaStreamSynchronize",
    [API_OTHER] = "other",
};

const char *call_api_name(call_api api)
{
    return api < API_COUNT ? api_names[api] : "?";
}

#ifdef SP_CUDASIM
/* The benchmark's work that the library never asks for (only src/cuda.c calls CUDA, and none of
 * these): safe to leave out by name. Stream creation and destruction and device
 * synchronization are not here: the benchmark makes none while counting, and streampool does. */
static const char *const work_calls[] = {
    "cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchHostFunc",
};

void calls_reset(void)
{
    cudasimResetCallCounts();
    own_mem_info = own_syncs = own_queries = 0;
}

long long calls_by_allocator(void)
{
    long long n = (long long)cudasimCallCount(NULL);
    for (size_t i = 0; i < sizeof work_calls / sizeof work_calls[0]; i++)
        n -= (long long)cudasimCallCount(work_calls[i]);
    return n - own_mem_info - own_syncs - own_queries;
}

long long calls_allocating(void)
{
    return (long long)(cudasimCallCount("cudaMalloc") + cudasimCallCount("cudaMallocAsync") +
                       cudasimCallCount("cudaMallocFromPoolAsync"));
}

static long long count(const char *api)
{
    return (long long)cudasimCallCount(api);
}

long long calls_by_api(call_api api)
{
    switch (api) {
    case API_DRIVER_ALLOC: return calls_allocating();
    case API_DRIVER_FREE: return count("cudaFree") + count("cudaFreeAsync");
    case API_EVENT_RECORD: return count("cudaEventRecord");
    case API_EVENT_QUERY: return count("cudaEventQuery");
    case API_STREAM_WAIT_EVENT: return count("cudaStreamWaitEvent");
    case API_EVENT_SYNCHRONIZE: return count("cudaEventSynchronize");
    case API_STREAM_QUERY: return count("cudaStreamQuery") - own_queries;
    case API_STREAM_SYNCHRONIZE: return count("cudaStreamSynchronize") - own_syncs;
    case API_OTHER: {
        long long rest = calls_by_allocator();
        for (int a = 0; a < API_OTHER; a++)
            rest -= calls_by_api((call_api)a);
        return rest;
    }
    default: return -1;
    }
}

bool calls_available(void)
{
    return true;
}
#else
long long calls_allocating(void)
{
    return -1;
}

void calls_reset(void)
{
}

long long calls_by_allocator(void)
{
    return -1;
}

long long calls_by_api(call_api api)
{
    (void)api;
    return -1;
}

bool calls_available(void)
{
    return false;
}
#endif
