/* Conformance of the CUDA runtime to the rules streampool relies on (shared/CUDA-SEMANTICS.md,
 * section B; test names carry the rule number). Written against the runtime API alone: the
 * same file runs on cudasim and on a GPU. Asynchrony is always held by a gate that this thread
 * opens; where a rule only lets the driver reuse memory (rather than obliging it), the test
 * asserts only what CUDA guarantees, and the cudasim-specific expectation sits under
 * SP_CUDASIM. */
#include <sched.h>
#include <stdlib.h>

#include "support/cuda_fixture.h"

static const size_t MiB = (size_t)1 << 20;

/* Rule 1: cudaMallocAsync returns at once; the memory is usable in stream order. */
static void rule01_malloc_async_returns_before_stream_runs(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    gate_hold(g, s);
    void *p = NULL;
    CK(cudaMallocAsync(&p, 4096, s));
    assert_non_null(p);
    CK(cudaMemsetAsync(p, 0x5a, 4096, s));
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady); /* nothing has run yet */
    gate_open(g);
    assert_true(device_bytes_are(p, 4096, 0x5a, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
}

/* Rule 2: another stream may use the allocation after an event wait. */
static void rule02_use_from_other_stream_after_event_wait(void **state)
{
    (void)state;
    cudaStream_t a = cfx.a, b = cfx.b;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    gate_hold(g, a);
    void *p;
    CK(cudaMallocAsync(&p, MiB, a));
    CK(cudaMemsetAsync(p, 0x11, MiB, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaMemsetAsync(p, 0x22, MiB / 2, b)); /* must land after a's memset */
    gate_open(g);
    CK(cudaStreamSynchronize(b));
    assert_true(device_bytes_are(p, MiB / 2, 0x22, b));
    assert_true(device_bytes_are((char *)p + MiB / 2, MiB / 2, 0x11, b));
    CK(cudaFreeAsync(p, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaEventDestroy(e));
}

/* Rule 3: the free may be on another stream ordered after every use. */
static void rule03_free_on_other_stream_after_use(void **state)
{
    (void)state;
    cudaStream_t a = cfx.a, b = cfx.b;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *p;
    CK(cudaMallocAsync(&p, 8192, a));
    gate_hold(g, a);
    CK(cudaMemsetAsync(p, 0x33, 8192, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaFreeAsync(p, b));
    assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady); /* b waits for a */
    gate_open(g);
    CK(cudaStreamSynchronize(b));
    CK(cudaEventDestroy(e));
}

/* Rule 4: cudaMalloc of 0 gives NULL; cudaFree(NULL) is a no-op; cudaFree of a stream-ordered
 * pointer returns without synchronizing (a held stream is still held afterwards). */
static void rule04_zero_sizes_and_cudafree_of_async_memory(void **state)
{
    (void)state;
    void *p = (void *)0x1;
    CK(cudaMalloc(&p, 0));
    assert_null(p);
    CK(cudaFree(NULL));
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    void *q;
    CK(cudaMallocAsync(&q, 4096, s));
    CK(cudaStreamSynchronize(s));
    gate_hold(g, s);
    CK(cudaFree(q)); /* would never return if it synchronized the device */
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    gate_open(g);
    CK(cudaStreamSynchronize(s));
}

/* Rule 5: out of memory is cudaErrorMemoryAllocation, the output is untouched, not sticky. */
static void rule05_out_of_memory_leaves_output_and_is_not_sticky(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p = (void *)0x1234;
    assert_int_equal(cudaMallocAsync(&p, SIZE_MAX / 2, s), cudaErrorMemoryAllocation);
    assert_ptr_equal(p, (void *)0x1234);
    assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMalloc(&p, SIZE_MAX / 2), cudaErrorMemoryAllocation);
    assert_ptr_equal(p, (void *)0x1234);
    CK(cudaMallocAsync(&p, 4096, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    (void)cudaGetLastError();
}

/* Rule 7: a default pool per device; explicit pools; destroy returns with allocations out. */
static void rule07_default_and_explicit_pools(void **state)
{
    (void)state;
    cudaMemPool_t def = NULL, cur = NULL;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    CK(cudaDeviceGetMemPool(&cur, 0));
    assert_non_null(def);
    assert_ptr_equal(def, cur);
    cudaMemPool_t pool = new_pool(0);
    assert_ptr_not_equal(pool, def);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p;
    CK(cudaMallocFromPoolAsync(&p, 3 * MiB, pool, s));
    CK(cudaMemsetAsync(p, 1, 3 * MiB, s));
    CK(cudaMemPoolDestroy(pool)); /* outstanding allocation: still returns at once */
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaDeviceSetMemPool(0, def));
    CK(cudaStreamDestroy(s));
    struct cudaMemPoolProps bad;
    memset(&bad, 0, sizeof bad);
    cudaMemPool_t none = NULL;
    assert_int_equal(cudaMemPoolCreate(&none, &bad), cudaErrorInvalidValue); /* allocType 0 */
    (void)cudaGetLastError();
}

/* Rule 8: attribute defaults, reserved >= used, and high watermarks reset only to current. */
static void rule08_pool_attributes(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(0);
    int flag = -1;
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &flag));
    assert_int_equal(flag, 1);
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag));
    assert_int_equal(flag, 1);
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &flag));
    assert_int_equal(flag, 1);
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    assert_int_equal(pool_attr(def, cudaMemPoolAttrReleaseThreshold), 0);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p;
    CK(cudaMallocFromPoolAsync(&p, 12, pool, s));
    uint64_t used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    assert_true(used >= 12);
    assert_true(reserved >= used);
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    assert_true(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) >= used);
    uint64_t v = 1;
    assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v),
                     cudaErrorInvalidValue);
    (void)cudaGetLastError();
    v = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemHigh),
                     pool_attr(pool, cudaMemPoolAttrUsedMemCurrent));
    assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v),
                     cudaErrorInvalidValue); /* read-only */
    (void)cudaGetLastError();
    CK(cudaMemPoolDestroy(pool));
    CK(cudaStreamDestroy(s));
}

/* Rules 9 and 10: a block freed on a stream is reused by that stream before new memory is
 * reserved, even while the free has not yet run. */
static void rule09_10_same_stream_reuse_before_new_memory(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    void *p, *q;
    CK(cudaMallocFromPoolAsync(&p, 4 * MiB, pool, s));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    gate_hold(g, s);
    CK(cudaFreeAsync(p, s));
    CK(cudaMallocFromPoolAsync(&q, 4 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(p, q);
#endif
    gate_open(g);
    CK(cudaFreeAsync(q, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolDestroy(pool));
}

/* Pool with only the named reuse policy enabled. */
static cudaMemPool_t pool_with_policies(int follow, int opportunistic, int internal)
{
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    pool_flag(pool, cudaMemPoolReuseFollowEventDependencies, follow);
    pool_flag(pool, cudaMemPoolReuseAllowOpportunistic, opportunistic);
    pool_flag(pool, cudaMemPoolReuseAllowInternalDependencies, internal);
    return pool;
}

/* Rule 11: a pending free on stream a is never handed to stream b without an ordering; with an
 * event wait (11a) it may be. The data a wrote before its free must survive b's writes. */
static void rule11_pending_free_not_reused_without_ordering(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(1, 1, 1);
    cudaStream_t a = cfx.a, b = cfx.b;
    gate *g = gate_new();
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, 4096));
    void *p, *q;
    CK(cudaMallocFromPoolAsync(&p, 4096, pool, a));
    gate_hold(g, a);
    CK(cudaMemsetAsync(p, 0xa1, 4096, a));
    CK(cudaMemcpyAsync(host, p, 4096, cudaMemcpyDeviceToHost, a));
    CK(cudaFreeAsync(p, a));
    CK(cudaMallocFromPoolAsync(&q, 4096, pool, b));
    assert_ptr_not_equal(p, q);
    CK(cudaMemsetAsync(q, 0xb2, 4096, b));
    gate_open(g);
    CK(cudaStreamSynchronize(a));
    for (int i = 0; i < 4096; i++)
        assert_int_equal(host[i], 0xa1);
    CK(cudaFreeAsync(q, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaFreeHost(host));
    CK(cudaMemPoolDestroy(pool));
}

static void rule11a_reuse_follows_event_dependency(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(1, 0, 0);
    cudaStream_t a = cfx.a, b = cfx.b;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *p, *q;
    CK(cudaMallocFromPoolAsync(&p, 4096, pool, a));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    gate_hold(g, a);
    CK(cudaFreeAsync(p, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaMallocFromPoolAsync(&q, 4096, pool, b));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(p, q);
#endif
    assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady); /* b is behind a's gate */
    gate_open(g);
    CK(cudaFreeAsync(q, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaEventDestroy(e));
    CK(cudaMemPoolDestroy(pool));
}

/* 11(b): a free that has executed may be reused by another stream if opportunistic reuse is on;
 * never if it is off and nothing else orders the streams. The host learns of completion only
 * through cudaEventQuery here, which is not a synchronize. */
static void rule11b_opportunistic_reuse(void **state)
{
    (void)state;
    for (int opportunistic = 0; opportunistic <= 1; opportunistic++) {
        cudaMemPool_t pool = pool_with_policies(0, opportunistic, 0);
        cudaStream_t a, b;
        cudaEvent_t e;
        CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        void *p, *q;
        CK(cudaMallocFromPoolAsync(&p, 4096, pool, a));
        CK(cudaFreeAsync(p, a));
        CK(cudaEventRecord(e, a));
        cudaError_t st;
        while ((st = cudaEventQuery(e)) == cudaErrorNotReady)
            sched_yield();
        CK(st);
        CK(cudaMallocFromPoolAsync(&q, 4096, pool, b));
#ifdef SP_CUDASIM
        if (opportunistic)
            assert_ptr_equal(p, q);
        else
            assert_ptr_not_equal(p, q);
#endif
        CK(cudaFreeAsync(q, b));
        CK(cudaStreamSynchronize(b));
        CK(cudaEventDestroy(e));
        CK(cudaStreamDestroy(a));
        CK(cudaStreamDestroy(b));
        CK(cudaMemPoolDestroy(pool));
    }
}

/* 11(c): after a host synchronize the free is reusable by any stream whatever the policies. */
static void rule11c_reuse_after_host_synchronize(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(0, 0, 0);
    cudaStream_t a = cfx.a, b = cfx.b;
    void *p, *q;
    CK(cudaMallocFromPoolAsync(&p, 4096, pool, a));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(p, a));
    CK(cudaStreamSynchronize(a));
    CK(cudaMallocFromPoolAsync(&q, 4096, pool, b));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(p, q);
#endif
    CK(cudaFreeAsync(q, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaMemPoolDestroy(pool));
}

/* Rule 12: with threshold 0 a synchronize releases unused memory; with UINT64_MAX it is kept. */
static void rule12_release_threshold_at_synchronize(void **state)
{
    (void)state;
    for (int keep = 0; keep <= 1; keep++) {
        cudaMemPool_t pool = new_pool(keep ? UINT64_MAX : 0);
        cudaStream_t s;
        CK(cudaStreamCreate(&s));
        void *p;
        CK(cudaMallocFromPoolAsync(&p, 8 * MiB, pool, s));
        uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
        assert_true(reserved >= 8 * MiB);
        CK(cudaFreeAsync(p, s));
        CK(cudaStreamSynchronize(s));
        assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), keep ? reserved : 0);
        CK(cudaStreamDestroy(s));
        CK(cudaMemPoolDestroy(pool));
    }
}

/* Rule 13: trim cannot release memory whose free the host has not seen complete. */
static void rule13_trim_needs_observed_frees(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    void *p;
    CK(cudaMallocFromPoolAsync(&p, 16 * MiB, pool, s));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    gate_hold(g, s);
    CK(cudaFreeAsync(p, s));
    CK(cudaMemPoolTrimTo(pool, 0));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
    gate_open(g);
    trim_leaves_nothing_then_destroy(pool, s);
}

/* 11(c), Programming Guide "Stream Ordered Memory Allocator", reuse policies: a synchronize
 * proves complete everything the synchronized work was ordered after, so a free on stream a
 * that b waited for through an event is observed by cudaStreamSynchronize(b) and is reusable
 * by any stream whatever the policies. A destroyed stream's free is observed by a device
 * synchronize. */
static void rule11c_synchronize_observes_frees_waited_on_through_events(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(0, 0, 0);
    cudaStream_t a, b, c;
    cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *p, *q, *r;
    CK(cudaMallocFromPoolAsync(&p, 4096, pool, a));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(p, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaStreamSynchronize(b)); /* not a */
    CK(cudaMallocFromPoolAsync(&q, 4096, pool, c));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(q, p);
#endif
    CK(cudaFreeAsync(q, c));
    CK(cudaStreamDestroy(c)); /* its free is still pending */
    CK(cudaDeviceSynchronize());
    CK(cudaMallocFromPoolAsync(&r, 4096, pool, a));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(r, p);
#endif
    CK(cudaFreeAsync(r, a));
    CK(cudaStreamSynchronize(a));
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    CK(cudaMemPoolDestroy(pool));
}

/* Two 1 MiB blocks that share a 2 MiB page on cudasim (adjacent there). */
static void two_neighbours(cudaMemPool_t pool, cudaStream_t s, void **p, void **q)
{
    CK(cudaMallocFromPoolAsync(p, 1 * MiB, pool, s));
    CK(cudaMallocFromPoolAsync(q, 1 * MiB, pool, s));
    CK(cudaStreamSynchronize(s));
#ifdef SP_CUDASIM
    assert_ptr_equal((char *)*p + MiB, *q);
#endif
}

/* 11(c): frees of two streams, once the host has observed both, are one free range any stream
 * may have: a request spanning both needs no new memory (Programming Guide, stream-ordered
 * allocator: reuse after synchronization is unconditional). */
static void rule11c_observed_frees_of_two_streams_merge(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(0, 0, 0);
    cudaStream_t a = cfx.a, b = cfx.b, c = cfx.c;
    void *p, *q, *r;
    two_neighbours(pool, a, &p, &q);
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(p, a));
    CK(cudaFreeAsync(q, b));
    CK(cudaDeviceSynchronize());
    CK(cudaMallocFromPoolAsync(&r, 2 * MiB, pool, c));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
#ifdef SP_CUDASIM
    assert_ptr_equal(r, p);
#endif
    CK(cudaFreeAsync(r, c));
    CK(cudaStreamSynchronize(c));
    CK(cudaMemPoolDestroy(pool));
}

/* 11(c) against 11: a free the host has observed stays reusable by any stream when its
 * neighbour is freed later on another stream and is still pending; the pending free is not
 * handed out. */
static void rule11c_pending_free_does_not_taint_observed_neighbour(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(0, 0, 0);
    cudaStream_t a = cfx.a, b = cfx.b, c = cfx.c;
    gate *g = gate_new();
    void *p, *q, *r, *t;
    two_neighbours(pool, a, &p, &q);
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(p, a));
    CK(cudaStreamSynchronize(a));
    gate_hold(g, b);
    CK(cudaFreeAsync(q, b));
    CK(cudaMallocFromPoolAsync(&r, 1 * MiB, pool, c));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
    assert_ptr_not_equal(r, q);
#ifdef SP_CUDASIM
    assert_ptr_equal(r, p);
#endif
    CK(cudaMallocFromPoolAsync(&t, 1 * MiB, pool, c));
    assert_ptr_not_equal(t, q); /* b's free is pending and c is not ordered after it */
    gate_open(g);
    CK(cudaFreeAsync(r, c));
    CK(cudaFreeAsync(t, c));
    CK(cudaDeviceSynchronize());
    CK(cudaMemPoolDestroy(pool));
}

/* Rule 13a (NVIDIA, "Using the CUDA Stream-Ordered Memory Allocator, Part 1"): when free memory
 * is fragmented, the driver remaps the pool's unused physical memory into a contiguous range
 * rather than growing. Two free 2 MiB blocks serve a 4 MiB request, and data written to the new
 * range is intact. */
static void rule13a_fragmented_free_memory_is_remapped(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    void *p[3], *r;
    for (int i = 0; i < 3; i++)
        CK(cudaMallocFromPoolAsync(&p[i], 2 * MiB, pool, s));
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(p[0], s));
    CK(cudaFreeAsync(p[2], s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMallocFromPoolAsync(&r, 4 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), reserved);
    CK(cudaMemsetAsync(r, 0x5a, 4 * MiB, s));
    CK(cudaMemsetAsync(p[1], 0x11, 2 * MiB, s));
    assert_true(device_bytes_are(r, 4 * MiB, 0x5a, s));
    assert_true(device_bytes_are(p[1], 2 * MiB, 0x11, s));
    CK(cudaFreeAsync(r, s));
    CK(cudaFreeAsync(p[1], s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolDestroy(pool));
}

/* Rules 9 and 13a together: a same-stream allocation may take, even remap, the pages of a free
 * that has not run yet, but the free and the remap happen in stream order (Programming Guide,
 * "Stream Ordered Memory Allocator": memory freed on a stream may be reused by later work on
 * that stream, as stream order separates the uses). Work enqueued before the free still sees
 * the block's data, however the driver arranges its pages. */
static void rule09_13a_remap_of_pending_free_keeps_earlier_work_data(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, 4 * MiB));
    memset(host, 0, 4 * MiB);
    void *x, *y;
    CK(cudaMallocFromPoolAsync(&x, 4 * MiB, pool, s));
    CK(cudaMemsetAsync(x, 0x5a, 4 * MiB, s));
    CK(cudaStreamSynchronize(s));
    gate_hold(g, s);
    CK(cudaMemcpyAsync(host, x, 4 * MiB, cudaMemcpyDeviceToHost, s)); /* before the free */
    CK(cudaFreeAsync(x, s));
    CK(cudaMallocFromPoolAsync(&y, 12 * MiB, pool, s)); /* no single range fits: remap */
#ifdef SP_CUDASIM
    /* x's two pages are remapped into y, the pool grows by the 8 MiB shortfall only */
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 12 * MiB);
#endif
    CK(cudaMemsetAsync(y, 0x11, 12 * MiB, s));
    gate_open(g);
    CK(cudaStreamSynchronize(s));
    size_t bad = 0;
    for (size_t i = 0; i < 4 * MiB; i++)
        bad += host[i] != 0x5a;
    assert_int_equal(bad, 0);
    assert_true(device_bytes_are(y, 12 * MiB, 0x11, s));
    CK(cudaFreeAsync(y, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFreeHost(host));
    CK(cudaMemPoolDestroy(pool));
}

/* Rule 13: cudaMemPoolTrimTo(pool, n): "the pool is guaranteed to have at least n bytes
 * reserved after the operation" (Runtime API); the release threshold likewise is memory the pool
 * holds on to at a synchronize (cudaMemPoolAttrReleaseThreshold). */
static void rule13_trim_and_threshold_keep_at_least_the_minimum(void **state)
{
    (void)state;
    for (int by_threshold = 0; by_threshold <= 1; by_threshold++) {
        cudaMemPool_t pool = new_pool(by_threshold ? 3 * MiB : UINT64_MAX);
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        void *p;
        CK(cudaMallocFromPoolAsync(&p, 8 * MiB, pool, s));
        CK(cudaFreeAsync(p, s));
        CK(cudaStreamSynchronize(s));
        if (!by_threshold)
            CK(cudaMemPoolTrimTo(pool, 3 * MiB));
        uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
        assert_true(reserved >= 3 * MiB);
#ifdef SP_CUDASIM
        assert_int_equal(reserved, 4 * MiB); /* whole 2 MiB pages */
#endif
        CK(cudaMemPoolTrimTo(pool, 0));
        assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0);
        CK(cudaStreamDestroy(s));
        CK(cudaMemPoolDestroy(pool));
    }
}

/* Rule 13b: cudaFreeAsync accepts memory from cudaMalloc (Programming Guide, stream-ordered
 * allocator, "cudaFreeAsync() ... can free memory allocated with cudaMalloc"); the data written
 * before the free is intact when read in stream order. */
static void rule13b_cudafreeasync_accepts_cudamalloc_memory(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    void *p;
    CK(cudaMalloc(&p, 3 * MiB));
    CK(cudaMemsetAsync(p, 0x3c, 3 * MiB, s));
    assert_true(device_bytes_are(p, 3 * MiB, 0x3c, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue); /* freed already */
    (void)cudaGetLastError();
}

/* Rule 13b: cudaFree of stream-ordered memory frees it at once, in no stream's order (Runtime
 * API cudaFree: the caller must make sure every access is done); it neither waits for the
 * allocating stream nor is queued behind it. */
static void rule13b_cudafree_of_stream_ordered_memory_is_unordered(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_with_policies(0, 0, 0);
    CK(cudaDeviceSetMemPool(0, pool));
    cudaStream_t a = cfx.a, b = cfx.b;
    gate *g = gate_new();
    void *p, *q;
    CK(cudaMallocAsync(&p, 4096, a));
    CK(cudaStreamSynchronize(a));
    gate_hold(g, a);
    CK(cudaFree(p));
    assert_int_equal(cudaStreamQuery(a), cudaErrorNotReady);
    CK(cudaMallocAsync(&q, 4096, b));
#ifdef SP_CUDASIM
    assert_ptr_equal(q, p); /* free, and observed free, the moment cudaFree returned */
#endif
    gate_open(g);
    CK(cudaFreeAsync(q, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaStreamSynchronize(a));
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    CK(cudaDeviceSetMemPool(0, def));
    CK(cudaMemPoolDestroy(pool));
}

/* cudaStreamGetId (Runtime API): unique for the life of the program, special handles accepted.
 * Peer access: cudaDeviceCanAccessPeer's answer agrees with cudaMemPoolSetAccess and
 * cudaMemPoolGetAccess (a pool is read-write from its own device; a device that cannot access
 * its peer gets no access). IPC: a device that lists no pool handle types refuses export. */
static void stream_ids_peer_access_and_ipc(void **state)
{
    (void)state;
    cudaStream_t s1, s2;
    CK(cudaStreamCreate(&s1));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    unsigned long long id1, id1b, id2, legacy, legacy0, per_thread;
    CK(cudaStreamGetId(s1, &id1));
    CK(cudaStreamGetId(s1, &id1b));
    CK(cudaStreamGetId(s2, &id2));
    CK(cudaStreamGetId(cudaStreamLegacy, &legacy));
    CK(cudaStreamGetId(0, &legacy0));
    CK(cudaStreamGetId(cudaStreamPerThread, &per_thread));
    assert_int_equal(id1, id1b);
    assert_int_equal(legacy, legacy0);
    assert_true(id1 != id2 && id1 != legacy && id2 != legacy && per_thread != legacy &&
                per_thread != id1 && per_thread != id2);
    assert_int_equal(cudaStreamGetId(s1, NULL), cudaErrorInvalidValue);
    CK(cudaStreamDestroy(s1));
    cudaStream_t s3;
    CK(cudaStreamCreate(&s3));
    unsigned long long id3;
    CK(cudaStreamGetId(s3, &id3));
    assert_true(id3 != id1 && id3 != id2); /* even if the handle value is reused */
    CK(cudaStreamDestroy(s2));
    CK(cudaStreamDestroy(s3));

    int n = 0;
    CK(cudaGetDeviceCount(&n));
    for (int dev = 0; dev < n; dev++) {
        cudaMemPool_t pool;
        CK(cudaDeviceGetDefaultMemPool(&pool, dev));
        struct cudaMemLocation own = {.type = cudaMemLocationTypeDevice, .id = dev};
        enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
        CK(cudaMemPoolGetAccess(&flags, pool, &own));
        assert_int_equal(flags, cudaMemAccessFlagsProtReadWrite);
        int can = -1;
        for (int peer = 0; peer < n; peer++) {
            if (peer == dev)
                continue;
            CK(cudaDeviceCanAccessPeer(&can, peer, dev));
            struct cudaMemAccessDesc desc = {
                .location = {.type = cudaMemLocationTypeDevice, .id = peer},
                .flags = cudaMemAccessFlagsProtReadWrite};
            cudaError_t err = cudaMemPoolSetAccess(pool, &desc, 1);
            struct cudaMemLocation where = {.type = cudaMemLocationTypeDevice, .id = peer};
            CK(cudaMemPoolGetAccess(&flags, pool, &where));
            if (can) {
                CK(err);
                assert_int_equal(flags, cudaMemAccessFlagsProtReadWrite);
                desc.flags = cudaMemAccessFlagsProtNone;
                CK(cudaMemPoolSetAccess(pool, &desc, 1));
            } else {
                assert_int_not_equal(err, cudaSuccess);
                assert_int_equal(flags, cudaMemAccessFlagsProtNone);
            }
            (void)cudaGetLastError();
        }
        int handle_types = -1;
        CK(cudaDeviceGetAttribute(&handle_types, cudaDevAttrMemoryPoolSupportedHandleTypes, dev));
        if (handle_types == 0) {
            int fd = -1;
            /* a device without IPC has no IPC-capable pool: the Runtime API documents
             * cudaErrorInvalidValue (not cudaErrorNotSupported) for exporting one */
            assert_int_equal(cudaMemPoolExportToShareableHandle(
                                 &fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
                             cudaErrorInvalidValue);
            (void)cudaGetLastError();
        }
    }
    assert_int_equal(cudaDeviceCanAccessPeer(&(int){0}, 0, n), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
}

/* Rule 14: the legacy stream waits for earlier work on blocking streams, and later work on
 * blocking streams waits for it. */
static void rule14_legacy_stream_synchronizes_with_blocking_streams(void **state)
{
    (void)state;
    order_log log = {0};
    order_mark m1 = {&log, 1}, m2 = {&log, 2}, m3 = {&log, 3};
    cudaStream_t blocking;
    gate *g1 = gate_new(), *g2 = gate_new();
    CK(cudaStreamCreate(&blocking));
    gate_hold(g1, blocking);
    mark(blocking, &m1);
    mark(0, &m2); /* legacy: after blocking's earlier work */
    gate_open(g1);
    CK(cudaDeviceSynchronize());
    assert_int_equal(atomic_load(&log.len), 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    gate_hold(g2, cudaStreamLegacy);
    mark(blocking, &m3); /* blocking: after the legacy stream's earlier work */
    assert_int_equal(cudaStreamQuery(blocking), cudaErrorNotReady);
    gate_open(g2);
    CK(cudaStreamSynchronize(blocking));
    assert_int_equal(atomic_load(&log.len), 3);
    assert_int_equal(log.order[2], 3);
    CK(cudaStreamDestroy(blocking));
}

/* Rule 15: non-blocking streams do not synchronize with the legacy stream; the per-thread
 * stream does. */
static void rule15_nonblocking_and_per_thread_streams(void **state)
{
    (void)state;
    cudaStream_t nb;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    gate_hold(g, nb);
    order_log log = {0};
    order_mark m = {&log, 7};
    mark(cudaStreamLegacy, &m);
    CK(cudaStreamSynchronize(cudaStreamLegacy)); /* would hang if it waited for nb */
    assert_int_equal(atomic_load(&log.len), 1);
    assert_int_equal(cudaStreamQuery(nb), cudaErrorNotReady);
    gate_open(g);
    CK(cudaStreamSynchronize(nb));
    CK(cudaStreamDestroy(nb));

    order_log log2 = {0};
    order_mark pt = {&log2, 1}, legacy = {&log2, 2};
    gate *g2 = gate_new();
    gate_hold(g2, cudaStreamPerThread);
    mark(cudaStreamPerThread, &pt);
    mark(cudaStreamLegacy, &legacy);
    gate_open(g2);
    CK(cudaDeviceSynchronize());
    assert_int_equal(atomic_load(&log2.len), 2);
    assert_int_equal(log2.order[0], 1);
    assert_int_equal(log2.order[1], 2);
}

/* Rule 16: destroying a stream with pending work returns at once; the work still runs. */
static void rule16_destroy_with_pending_work(void **state)
{
    (void)state;
    cudaStream_t s;
    cudaEvent_t e;
    gate *g = gate_new();
    order_log log = {0};
    order_mark m = {&log, 1};
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e));
    gate_hold(g, s);
    mark(s, &m);
    CK(cudaEventRecord(e, s));
    CK(cudaStreamDestroy(s));
    assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
    gate_open(g);
    CK(cudaEventSynchronize(e));
    assert_int_equal(atomic_load(&log.len), 1);
    CK(cudaEventDestroy(e));
}

/* Rule 17: cudaStreamQuery says NotReady while work is pending, Success after. */
static void rule17_stream_query(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    CK(cudaStreamQuery(s));
    gate_hold(g, s);
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    assert_int_equal(cudaGetLastError(), cudaSuccess); /* NotReady is not an error */
    gate_open(g);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamQuery(s));
}

/* Rule 18: a stream waits for the event's record as of the wait call; a later record of the
 * same event (here on an idle stream) does not release it. */
static void rule18_wait_event_captures_record_at_call_time(void **state)
{
    (void)state;
    cudaStream_t a = cfx.a, b = cfx.b, c = cfx.c;
    cudaEvent_t e;
    gate *g = gate_new();
    order_log log = {0};
    order_mark ma = {&log, 1}, mb = {&log, 2};
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    gate_hold(g, a);
    mark(a, &ma);
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    mark(b, &mb);
    CK(cudaEventRecord(e, c)); /* complete at once; b must still wait for a */
    CK(cudaEventSynchronize(e));
    assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady);
    gate_open(g);
    CK(cudaStreamSynchronize(b));
    assert_int_equal(atomic_load(&log.len), 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    CK(cudaEventDestroy(e));
}

/* Rule 19: a host function runs after all earlier work on its stream and before later work. */
static void rule19_host_function_in_stream_order(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    void *d;
    unsigned char *host;
    CK(cudaMallocAsync(&d, 256, s));
    CK(cudaMallocHost((void **)&host, 256));
    memset(host, 0, 256);
    order_log log = {0};
    order_mark m1 = {&log, 1}, m2 = {&log, 2};
    CK(cudaMemsetAsync(d, 0x7e, 256, s));
    CK(cudaMemcpyAsync(host, d, 256, cudaMemcpyDeviceToHost, s));
    mark(s, &m1);
    mark(s, &m2);
    CK(cudaStreamSynchronize(s));
    assert_int_equal(host[0], 0x7e);
    assert_int_equal(host[255], 0x7e);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    assert_int_equal(cudaLaunchHostFunc(s, NULL, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaFreeAsync(d, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFreeHost(host));
}

/* Rule 20: a record captures the work enqueued before it, not after; a never-recorded event is
 * complete. */
static void rule20_event_record_captures_work_at_call_time(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    cudaEvent_t e, never;
    gate *g1 = gate_new(), *g2 = gate_new();
    CK(cudaEventCreate(&e));
    CK(cudaEventCreate(&never));
    CK(cudaEventQuery(never));
    CK(cudaEventSynchronize(never));
    gate_hold(g1, s);
    CK(cudaEventRecord(e, s));
    gate_hold(g2, s);
    assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
    gate_open(g1);
    CK(cudaEventSynchronize(e)); /* returns although g2 still holds s */
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    gate_open(g2);
    CK(cudaStreamSynchronize(s));
    CK(cudaEventDestroy(e));
    CK(cudaEventDestroy(never));
}

/* Rule 21: elapsed time and its errors. */
static void rule21_event_elapsed_time(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    cudaEvent_t a, b, notiming;
    gate *g = gate_new();
    float ms = -1;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming));
    assert_int_equal(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
    CK(cudaEventRecord(a, s));
    gate_hold(g, s);
    CK(cudaEventRecord(b, s));
    assert_int_equal(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady);
    gate_open(g);
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
    assert_true(ms >= 0.0f);
    CK(cudaEventRecord(notiming, s));
    CK(cudaEventSynchronize(notiming));
    assert_int_equal(cudaEventElapsedTime(&ms, a, notiming), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaEventDestroy(notiming));
}

/* Rule 22: cudaMalloc and cudaFree synchronize the device. A helper thread opens the gate;
 * whenever it does, the gated work must be complete when cudaMalloc returns. */
static void *open_gate_thread(void *arg)
{
    gate_open(arg);
    return NULL;
}

static void rule22_cudamalloc_synchronizes_device(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    gate *g = gate_new();
    order_log log = {0};
    order_mark m = {&log, 1};
    gate_hold(g, s);
    mark(s, &m);
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_thread, g), 0);
    void *p;
    CK(cudaMalloc(&p, 4096));
    assert_int_equal(atomic_load(&log.len), 1);
    CK(cudaStreamQuery(s));
    pthread_join(opener, NULL);
    gate *g2 = gate_new();
    gate_hold(g2, s);
    mark(s, &m);
    assert_int_equal(pthread_create(&opener, NULL, open_gate_thread, g2), 0);
    CK(cudaFree(p));
    assert_int_equal(atomic_load(&log.len), 2);
    pthread_join(opener, NULL);
}

/* cudaMemcpy (the Runtime API's synchronous behaviour): it runs on the legacy stream, so it is
 * ordered after earlier work of blocking streams; a copy to the host returns with the bytes
 * there; host to device, device to device, host to host and cudaMemcpyDefault all copy; a kind
 * outside cudaMemcpyKind is cudaErrorInvalidMemcpyDirection, NULL pointers cudaErrorInvalidValue,
 * neither sticky; zero bytes is a no-op. */
static void memcpy_sync_kinds_order_and_errors(void **state)
{
    (void)state;
    enum { N = 8192 };
    unsigned char *h = malloc(N), *back = malloc(N); /* pageable */
    assert_non_null(h);
    assert_non_null(back);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 7 + 1);
    void *p, *q;
    CK(cudaMallocAsync(&p, N, 0));
    CK(cudaMallocAsync(&q, N, 0));
    CK(cudaMemcpy(p, h, N, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(q, p, N, cudaMemcpyDeviceToDevice)); /* queued on the legacy stream */
    memset(back, 0, N);
    CK(cudaMemcpy(back, q, N, cudaMemcpyDeviceToHost)); /* after the D2D, in legacy order */
    assert_memory_equal(back, h, N);
    memset(back, 0, N);
    CK(cudaMemcpy(q, h + 1, N - 1, cudaMemcpyDefault));
    CK(cudaMemcpy(back, q, N - 1, cudaMemcpyDefault));
    assert_memory_equal(back, h + 1, N - 1);
    memset(back, 0, N);
    CK(cudaMemcpy(back, h, N, cudaMemcpyHostToHost));
    assert_memory_equal(back, h, N);
    CK(cudaMemcpy(back, p, 0, cudaMemcpyDeviceToHost));
    assert_int_equal(cudaMemcpy(back, p, N, (enum cudaMemcpyKind)7),
                     cudaErrorInvalidMemcpyDirection);
    assert_int_equal(cudaMemcpyAsync(back, p, N, (enum cudaMemcpyKind)7, 0),
                     cudaErrorInvalidMemcpyDirection);
    assert_int_equal(cudaMemcpy(NULL, p, N, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaGetLastError()); /* not sticky */

    /* ordered after a blocking stream's earlier work: the gate opens from another thread,
     * whenever it does, the copy back must see the memset queued before it */
    cudaStream_t b;
    gate *g = gate_new();
    CK(cudaStreamCreate(&b));
    gate_hold(g, b);
    CK(cudaMemsetAsync(p, 0x3c, N, b));
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_thread, g), 0);
    CK(cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost));
    pthread_join(opener, NULL);
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 0x3c);
    CK(cudaFreeAsync(p, 0));
    CK(cudaFreeAsync(q, 0));
    CK(cudaStreamSynchronize(0));
    CK(cudaStreamDestroy(b));
    free(h);
    free(back);
}

/* Rule 23: the last error is per thread; Get resets it, Peek does not. */
static void *other_thread_last_error(void *arg)
{
    *(cudaError_t *)arg = cudaGetLastError();
    return NULL;
}

static void rule23_last_error(void **state)
{
    (void)state;
    (void)cudaGetLastError();
    assert_int_equal(cudaStreamCreate(NULL), cudaErrorInvalidValue);
    assert_int_equal(cudaPeekAtLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaPeekAtLastError(), cudaErrorInvalidValue);
    cudaError_t other = cudaErrorUnknown;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread_last_error, &other), 0);
    pthread_join(t, NULL);
    assert_int_equal(other, cudaSuccess);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_string_equal(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    assert_string_equal(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    int v = 0;
    CK(cudaRuntimeGetVersion(&v));
    assert_true(v >= 11020);
    CK(cudaDriverGetVersion(&v));
    assert_true(v >= 11020);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0));
    assert_int_equal(v, 1);
    assert_int_equal(cudaSetDevice(9999), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
}

/* cudaMallocManaged (Runtime API reference): a size of 0, a NULL output and any flags but
 * exactly cudaMemAttachGlobal or cudaMemAttachHost are cudaErrorInvalidValue, the output left
 * as it was; the memory is reachable from the host (after a synchronize, on devices without
 * concurrent managed access) and from streams in stream order, and goes back with cudaFree. */
static void managed_memory_contract(void **state)
{
    (void)state;
    int supported = 0;
    CK(cudaDeviceGetAttribute(&supported, cudaDevAttrManagedMemory, 0));
    assert_int_equal(supported, 1);
    void *untouched = (void *)0x1234;
    assert_int_equal(cudaMallocManaged(NULL, 4096, cudaMemAttachGlobal), cudaErrorInvalidValue);
    assert_int_equal(cudaMallocManaged(&untouched, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    const unsigned bad_flags[] = {0, cudaMemAttachSingle, cudaMemAttachGlobal | cudaMemAttachHost,
                                  0x100};
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++)
        assert_int_equal(cudaMallocManaged(&untouched, 4096, bad_flags[i]), cudaErrorInvalidValue);
    assert_ptr_equal(untouched, (void *)0x1234);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue); /* not sticky */
    CK(cudaMallocManaged(&untouched, 16, cudaMemAttachGlobal)); /* the device still works */
    CK(cudaFree(untouched));

    const unsigned flags[] = {cudaMemAttachGlobal, cudaMemAttachHost};
    for (size_t i = 0; i < 2; i++) {
        unsigned char *m = NULL;
        CK(cudaMallocManaged((void **)&m, MiB, flags[i]));
        assert_non_null(m);
        assert_int_equal((uintptr_t)m % 256, 0);
        memset(m, 0x3c, MiB); /* the host writes it directly */
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        if (flags[i] == cudaMemAttachGlobal) {
            /* a stream sees the host's bytes and writes over half of them */
            assert_true(device_bytes_are(m, MiB, 0x3c, s));
            CK(cudaMemsetAsync(m, 0x7e, MiB / 2, s));
            CK(cudaStreamSynchronize(s));
        }
        CK(cudaDeviceSynchronize());
        unsigned char first = flags[i] == cudaMemAttachGlobal ? 0x7e : 0x3c;
        assert_int_equal(m[0], first);
        assert_int_equal(m[MiB / 2 - 1], first);
        assert_int_equal(m[MiB / 2], 0x3c);
        assert_int_equal(m[MiB - 1], 0x3c);
        CK(cudaStreamDestroy(s));
        CK(cudaFree(m));
        assert_int_equal(cudaFree(m), cudaErrorInvalidValue); /* freed once only */
        (void)cudaGetLastError();
    }
}

/* Handles: a destroyed event is rejected, not used. */
static void bad_handles_are_rejected(void **state)
{
    (void)state;
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaEventDestroy(e));
    assert_int_equal(cudaStreamCreateWithFlags(&(cudaStream_t){0}, 0x80), cudaErrorInvalidValue);
    assert_int_equal(cudaMemsetAsync(NULL, 0, 0, 0), cudaSuccess);
    assert_int_equal(cudaFreeAsync((void *)0x10, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpyAsync(NULL, NULL, 16, cudaMemcpyHostToHost, 0),
                     cudaErrorInvalidValue);
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
    CK(cudaStreamIsCapturing(0, &cs));
    assert_int_equal(cs, cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}

TEST_MAIN("cuda_conformance",
    CFX(rule01_malloc_async_returns_before_stream_runs),
    CFX(rule02_use_from_other_stream_after_event_wait),
    CFX(rule03_free_on_other_stream_after_use),
    CFX(rule04_zero_sizes_and_cudafree_of_async_memory),
    RESET(rule05_out_of_memory_leaves_output_and_is_not_sticky),
    RESET(rule07_default_and_explicit_pools),
    RESET(rule08_pool_attributes),
    CFX(rule09_10_same_stream_reuse_before_new_memory),
    CFX(rule11_pending_free_not_reused_without_ordering),
    CFX(rule11a_reuse_follows_event_dependency),
    RESET(rule11b_opportunistic_reuse),
    CFX(rule11c_reuse_after_host_synchronize),
    RESET(rule12_release_threshold_at_synchronize),
    CFX(rule13_trim_needs_observed_frees),
    RESET(rule11c_synchronize_observes_frees_waited_on_through_events),
    CFX(rule11c_observed_frees_of_two_streams_merge),
    CFX(rule11c_pending_free_does_not_taint_observed_neighbour),
    CFX(rule13a_fragmented_free_memory_is_remapped),
    CFX(rule09_13a_remap_of_pending_free_keeps_earlier_work_data),
    RESET(rule13_trim_and_threshold_keep_at_least_the_minimum),
    CFX(rule13b_cudafreeasync_accepts_cudamalloc_memory),
    CFX(rule13b_cudafree_of_stream_ordered_memory_is_unordered),
    RESET(stream_ids_peer_access_and_ipc),
    RESET(rule14_legacy_stream_synchronizes_with_blocking_streams),
    RESET(rule15_nonblocking_and_per_thread_streams),
    RESET(rule16_destroy_with_pending_work),
    CFX(rule17_stream_query),
    CFX(rule18_wait_event_captures_record_at_call_time),
    CFX(rule19_host_function_in_stream_order),
    CFX(rule20_event_record_captures_work_at_call_time),
    CFX(rule21_event_elapsed_time),
    CFX(rule22_cudamalloc_synchronizes_device),
    RESET(rule23_last_error),
    RESET(bad_handles_are_rejected),
    RESET(managed_memory_contract),
    RESET(memcpy_sync_kinds_order_and_errors)
)
