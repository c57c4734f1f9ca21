/* streampool on cudasim only: what needs the emulator's call counters, capacity and fault
 * injection (zero driver calls in steady state, out-of-memory recovery, failing CUDA calls). */
#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

static void steady_state_same_stream_makes_no_cuda_calls(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    static const size_t sizes[] = {256, 4 * KiB, 100 * KiB, 3 * MiB, 64 * MiB};
    void *p[5];
    for (int i = 0; i < 5; i++) /* warm up: one driver allocation per size */
        SP(sp_alloc(fx.pool, &p[i], sizes[i], s));
    for (int i = 0; i < 5; i++)
        SP(sp_free(fx.pool, p[i], s));
    cudasimResetCallCounts();
    for (int round = 0; round < 1000; round++) {
        for (int i = 0; i < 5; i++)
            SP(sp_alloc(fx.pool, &p[i], sizes[i], s));
        for (int i = 0; i < 5; i++)
            SP(sp_free(fx.pool, p[i], s));
    }
    assert_int_equal(cudasimCallCount(NULL), 0);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.same_stream_hits, 5000);
    /* one slab for the three small sizes, a segment each for 3 MiB (4 MiB: whole driver pages)
     * and 64 MiB */
    assert_int_equal(st.driver_allocs, 3);
    assert_int_equal(st.slabs, 1);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.segment_bytes, 68 * MiB);
    SP(sp_stream_release(fx.rt, s));
    CK(cudaStreamDestroy(s));
}

/* Once a stream's frees are known complete, taking its blocks costs no CUDA call: one stream
 * query for the first, none for the rest. */
static void known_complete_steals_make_no_cuda_calls(void **state)
{
    (void)state;
    void *p[8], *q[8];
    for (int i = 0; i < 8; i++)
        SP(sp_alloc(fx.pool, &p[i], 64 * KiB, fx.a));
    for (int i = 0; i < 8; i++)
        SP(sp_free(fx.pool, p[i], fx.a));
    CK(cudaStreamSynchronize(fx.a));
    cudasimResetCallCounts();
    for (int i = 0; i < 8; i++)
        SP(sp_alloc(fx.pool, &q[i], 64 * KiB, fx.b));
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount(NULL), 1);
    assert_int_equal(stats_of(fx.pool).cross_stream_reuses, 8);
    for (int i = 0; i < 8; i++)
        SP(sp_free(fx.pool, q[i], fx.b));
}

/* SP_CAPTURE_ALWAYS asks CUDA on every call; the default (declared captures) never does. */
static void capture_check_always_asks_cuda(void **state)
{
    (void)state;
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.capture_check = SP_CAPTURE_ALWAYS;
    sp_runtime *rt;
    sp_pool *pool;
    rt = track_runtime(0, &cfg);
    SP(sp_runtime_default_pool(rt, &pool));
    void *p;
    SP(sp_alloc(pool, &p, 512, 0));
    SP(sp_free(pool, p, 0));
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &p, 512, 0));
    SP(sp_free(pool, p, 0));
    assert_int_equal(cudasimCallCount("cudaStreamIsCapturing"), 2);
    assert_int_equal(cudasimCallCount(NULL), 2);
    cfg.capture_check = (sp_capture_check)5;
    sp_runtime *bad = NULL;
    assert_int_equal(sp_runtime_create(0, &cfg, &bad), SP_ERR_CONFIG);
    assert_int_equal(sp_runtime_create(7, NULL, &bad), SP_ERR_NO_DEVICE);
    assert_null(bad);
    destroy_runtime(rt);
}

/* A miss that would grow past the device first gives the pool's own free segments of other
 * streams back to the driver (ordered after their frees, then synchronized: rule 11c), so the
 * driver reuses that memory and the request succeeds without reaching out of memory. */
static void own_cache_is_released_on_out_of_memory(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 64 * MiB));
    sp_runtime *rt;
    sp_pool *pool;
    rt = track_runtime(0, NULL);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = SP_CROSS_STREAM_NO_WAIT;
    SP(sp_pool_create(rt, "tight", &cfg, &pool));
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    void *p[6], *big;
    for (int i = 0; i < 6; i++)
        SP(sp_alloc(pool, &p[i], 8 * MiB, a));
    for (int i = 0; i < 6; i++)
        SP(sp_free(pool, p[i], a)); /* 48 MiB cached on a */
    SP(sp_alloc(pool, &big, 40 * MiB, b));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.oom_retries, 0);
    assert_int_equal(st.ooms, 0);
    assert_int_equal(st.driver_frees, 5); /* 40 MiB of a's 48 went back; 8 MiB stay cached */
    assert_int_equal(st.cached.current, 8 * MiB);
    assert_int_equal(st.held.current, 48 * MiB);
    assert_int_equal(sp_last_cuda_error(), 0); /* the stats read succeeded */
    void *huge = (void *)0x1;
    assert_int_equal(sp_alloc(pool, &huge, 60 * MiB, b), SP_ERR_OUT_OF_MEMORY);
    assert_ptr_equal(huge, (void *)0x1);
    st = stats_of(pool);
    assert_int_equal(st.ooms, 1);
    assert_int_equal(st.requested.current, 40 * MiB);
    SP(sp_free(pool, big, b));
    SP(sp_stream_release(rt, a));
    SP(sp_stream_release(rt, b));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
    CK(cudaDeviceSynchronize());
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total); /* everything went back to the device */
}

static void trim_returns_memory_to_the_device(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    size_t free0, free1, total;
    CK(cudaMemGetInfo(&free0, &total));
    void *p[4];
    for (int i = 0; i < 4; i++)
        SP(sp_alloc(fx.pool, &p[i], 16 * MiB, s));
    for (int i = 0; i < 4; i++)
        SP(sp_free(fx.pool, p[i], s));
    CK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 64 * MiB); /* cached, still held */
    SP(sp_pool_trim(fx.pool, 16 * MiB));
    assert_int_equal(stats_of(fx.pool).pool_reserved, 16 * MiB);
    SP(sp_pool_trim(fx.pool, 0));
    CK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0);
    assert_int_equal(stats_of(fx.pool).pool_reserved, 0);
    SP(sp_stream_release(fx.rt, s));
    CK(cudaStreamDestroy(s));
}

/* Failing CUDA calls: errors are reported, nothing leaks, the pool keeps working. */
static void failing_driver_calls_leave_state_intact(void **state)
{
    (void)state;
    sp_runtime *rt;
    sp_pool *pool;
    rt = track_runtime(0, NULL);
    SP(sp_runtime_default_pool(rt, &pool));
    void *p = (void *)0x5, *q;
    CK(cudasimInjectFault("cudaMallocFromPoolAsync", 1, cudaErrorLaunchFailure, 0));
    assert_int_equal(sp_alloc(pool, &p, 4096, 0), SP_ERR_CUDA);
    assert_int_equal(sp_last_cuda_error(), cudaErrorLaunchFailure);
    assert_ptr_equal(p, (void *)0x5);
    assert_int_equal(cudaGetLastError(), cudaSuccess); /* streampool reported it; not left over */
    CK(cudasimInjectFault("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation, 1));
    assert_int_equal(sp_alloc(pool, &p, 4096, 0), SP_ERR_OUT_OF_MEMORY);
    cudasimClearFaults();
    SP(sp_alloc(pool, &p, 4096, 0));
    gate *g = gate_new();
    gate_hold(g, 0); /* a busy stream: a steal from it needs a fence */
    CK(cudasimInjectFault("cudaEventRecord", 1, cudaErrorLaunchFailure, 1));
    SP(sp_free(pool, p, 0));
    cudaStream_t other;
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    /* the miss would raise the high-water mark: it asks stream 0 once (busy), never records a
     * fence, marks it, and fresh memory serves the request */
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &q, 4096, other));
    assert_ptr_not_equal(q, p);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    /* the marked owner's next free fences its frees: the fence is best effort, its failure is
     * skipped and counted, once */
    void *r;
    SP(sp_alloc(pool, &r, 4096, 0));
    assert_ptr_equal(r, p); /* its own, at once */
    SP(sp_free(pool, r, 0));
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 1);
    cudasimClearFaults();
    gate_open(g);
    SP(sp_free(pool, q, other));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.ooms, 1);
    assert_int_equal(st.allocs, 3);
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(st.skipped_steps, 1);
    assert_int_equal(st.driver_allocs, 2);
    SP(sp_stream_release(rt, other));
    CK(cudaStreamDestroy(other));
    destroy_runtime(rt);
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    CK(cudaDeviceSynchronize());
}

/* Giving memory back never forgets it: a segment the driver refuses to take back stays the
 * pool's, counted as held, and the trim reports the error; the next trim gives it back. */
static void refused_give_back_keeps_the_segment(void **state)
{
    (void)state;
    sp_runtime *rt;
    sp_pool *pool;
    rt = track_runtime(0, NULL);
    SP(sp_runtime_default_pool(rt, &pool));
    cudaStream_t s = new_stream();
    void *p;
    SP(sp_alloc(pool, &p, 4 * MiB, s));
    SP(sp_free(pool, p, s));
    CK(cudasimInjectFault("cudaFreeAsync", 1, cudaErrorLaunchFailure, 0));
    assert_int_equal(sp_pool_trim(pool, 0), SP_ERR_CUDA);
    assert_int_equal(sp_last_cuda_error(), cudaErrorLaunchFailure);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 4 * MiB);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.give_back_failures, 1);
    assert_int_equal(st.driver_frees, 0);
    cudasimClearFaults();
    SP(sp_alloc(pool, &p, 4 * MiB, s)); /* still usable */
    SP(sp_free(pool, p, s));
    SP(sp_pool_trim(pool, 0));
    st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.driver_allocs, 1);
    drop_stream(rt, s);
    destroy_runtime(rt);
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total);
}

/* A huge miss gives the stream's own free segment back on that stream, in its order, while a
 * gate holds the stream busy: no host wait (a synchronize would hang here) and the driver serves
 * the new segment from the given-back pages at once (rule 9): the reservation does not grow. */
static void miss_gives_back_on_its_own_stream_without_waiting(void **state)
{
    (void)state;
    gate *g = gate_new();
    void *a, *b;
    SP(sp_alloc(fx.pool, &a, 40 * MiB, fx.a));
    gate_hold(g, fx.a);
    CK(cudaMemsetAsync(a, 0x5a, 40 * MiB, fx.a)); /* a use of a, pending behind the gate */
    SP(sp_free(fx.pool, a, fx.a));
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &b, 20 * MiB, fx.a)); /* 40 > 20 + 20 / 8: a goes back, a new 20 */
    assert_int_equal(cudasimCallCount("cudaFreeAsync"), 1);
    assert_int_equal(cudasimCallCount("cudaMallocFromPoolAsync"), 1);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1); /* busy: not synchronized */
    assert_int_equal(cudasimCallCount(NULL), 3);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.held.current, 20 * MiB);
    uint64_t reserved = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(fx.pool), cudaMemPoolAttrReservedMemCurrent,
                               &reserved));
    assert_int_equal(reserved, 40 * MiB);
    gate_open(g);
    CK(cudaMemsetAsync(b, 0x11, 20 * MiB, fx.a)); /* after a's memset, in stream order */
    assert_true(device_bytes_are(b, 20 * MiB, 0x11, fx.a));
    SP(sp_free(fx.pool, b, fx.a));
}

/* A huge segment given back at free time (a free of another size) sits in the driver's pool
 * until a host synchronize observes its free (rule 13); a trim synchronizes the stream that
 * freed it (its free counts as not yet settled), so that the device gets every page back. The
 * driver reuses the pages for the stream's next request at once. */
static void huge_given_back_at_free_is_reused_and_trimmed(void **state)
{
    (void)state;
    gate *g = gate_new();
    void *a, *b;
    SP(sp_alloc(fx.pool, &a, 40 * MiB, fx.a));
    SP(sp_free(fx.pool, a, fx.a)); /* the first huge free: kept */
    SP(sp_alloc(fx.pool, &a, 40 * MiB, fx.a));
    SP(sp_alloc(fx.pool, &b, 20 * MiB, fx.a));
    gate_hold(g, fx.a);
    CK(cudaMemsetAsync(b, 0x5a, 20 * MiB, fx.a)); /* a use of b, pending behind the gate */
    cudasimResetCallCounts();
    SP(sp_free(fx.pool, b, fx.a)); /* 20 after 40: back to the driver at once, in s's order */
    assert_int_equal(cudasimCallCount("cudaFreeAsync"), 1);
    assert_int_equal(cudasimCallCount(NULL), 1);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 40 * MiB);
    assert_int_equal(st.segments, 1);
    SP(sp_alloc(fx.pool, &b, 20 * MiB, fx.a)); /* the driver reuses the pages on s (rule 9) */
    uint64_t reserved = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(fx.pool), cudaMemPoolAttrReservedMemCurrent,
                               &reserved));
    assert_int_equal(reserved, 60 * MiB);
    gate_open(g);
    SP(sp_free(fx.pool, a, fx.a)); /* 40 after 20: back at once; the pool keeps no tag of s */
    SP(sp_pool_trim(fx.pool, 0)); /* only a synchronize lets the driver release a's pages */
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(fx.pool), cudaMemPoolAttrReservedMemCurrent,
                               &reserved));
    assert_int_equal(reserved, 20 * MiB); /* b, live */
    SP(sp_free(fx.pool, b, fx.a)); /* 20 after 40: back at once */
    SP(sp_pool_trim(fx.pool, 0));
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 0);
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(fx.pool), cudaMemPoolAttrReservedMemCurrent,
                               &reserved));
    assert_int_equal(reserved, 0);
}

/* A pool whose high-water mark is 16 MiB with nothing held: two 8 MiB segments taken on s, freed
 * and trimmed (the trim synchronizes s: nothing of s is pending after it). */
static void peak_then_trim(sp_pool *pool, cudaStream_t s)
{
    void *w[2];
    for (int i = 0; i < 2; i++)
        SP(sp_alloc(pool, &w[i], 8 * MiB, s));
    for (int i = 0; i < 2; i++)
        SP(sp_free(pool, w[i], s));
    SP(sp_pool_trim(pool, 0));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.held.peak, 16 * MiB);
}

/* On a: a 4 MiB block (*x) and a 2 MiB one (*z) allocated and freed, the 2 MiB first; then a
 * is held busy behind g, its frees pending. */
static void two_frees_then_busy(sp_pool *pool, cudaStream_t a, gate *g, void **x, void **z)
{
    SP(sp_alloc(pool, x, 4 * MiB, a));
    SP(sp_alloc(pool, z, 2 * MiB, a));
    SP(sp_free(pool, *z, a));
    SP(sp_free(pool, *x, a));
    gate_hold(g, a);
}

/* g opened and a synchronized by the host (not streampool: nothing settles by it), the next
 * step of a's owner, a 2 MiB allocation on a, gets z back behind one stream query and no other
 * CUDA call. Returns the block. */
static void *owner_steps_once_idle(sp_pool *pool, cudaStream_t a, gate *g, void *z)
{
    gate_open(g);
    CK(cudaStreamSynchronize(a));
    cudasimResetCallCounts();
    void *z2;
    SP(sp_alloc(pool, &z2, 2 * MiB, a));
    assert_ptr_equal(z2, z);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount(NULL), 1);
    return z2;
}

/* A miss asks once about the pending free that would serve it best (one call, never a record);
 * found busy, its stream is marked and the miss grows. The marked stream's owner publishes at
 * its next step (one stream query); a stream not marked makes no call at its next step. */
static void a_miss_asks_once_and_leaves_a_busy_stream_to_its_owner(void **state)
{
    (void)state;
    sp_pool *pool = fx.pool;
    cudaStream_t a = fx.a, b = fx.b;
    peak_then_trim(pool, a);
    gate *g = gate_new();
    void *x, *y, *z, *y2;
    two_frees_then_busy(pool, a, g, &x, &z);
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &y, 4 * MiB, b)); /* asks a once: busy; marks it and grows */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 0);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    assert_int_equal(cudasimCallCount("cudaMallocFromPoolAsync"), 1);
    assert_int_equal(cudasimCallCount(NULL), 2);
    assert_ptr_not_equal(y, x);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 10 * MiB);
    assert_int_equal(st.cross_stream_reuses, 0);
    /* b was not marked: its own step makes no call */
    SP(sp_free(pool, y, b));
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &y2, 4 * MiB, b));
    assert_ptr_equal(y2, y);
    assert_int_equal(cudasimCallCount(NULL), 0);
    /* a was: once idle, its next large allocation asks its own stream, once */
    void *z2 = owner_steps_once_idle(pool, a, g, z);
    SP(sp_free(pool, z2, a));
    SP(sp_free(pool, y2, b));
}

/* The marked stream's owner publishes at its next step (a large allocation: one stream query,
 * idle, which settles every free it made), and the next miss that wants its memory reuses it
 * with no CUDA call at all. */
static void the_marked_owner_publishes_at_its_next_step_and_the_next_miss_reuses_with_no_call(
    void **state)
{
    (void)state;
    sp_pool *pool = fx.pool;
    cudaStream_t a = fx.a, b = fx.b;
    peak_then_trim(pool, a);
    gate *g = gate_new();
    void *x, *y, *z, *z2, *v;
    two_frees_then_busy(pool, a, g, &x, &z);
    SP(sp_alloc(pool, &y, 4 * MiB, b)); /* a busy: its one ask marks a; b grows */
    assert_ptr_not_equal(y, x);
    z2 = owner_steps_once_idle(pool, a, g, z);
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &v, 4 * MiB, b)); /* x's free is settled: reused, no call */
    assert_ptr_equal(v, x);
    assert_int_equal(cudasimCallCount(NULL), 0);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.held.current, 10 * MiB);
    SP(sp_free(pool, v, b));
    SP(sp_free(pool, y, b));
    SP(sp_free(pool, z2, a));
}

/* A marked owner whose stream is busy, and whose next step is a free: a fence right behind
 * that free covers every free it made (one record, no query); once the stream passes it, the
 * next miss reuses the memory behind one event query of that fence. */
static void a_busy_owner_fences_its_frees_at_its_next_free_and_the_fence_settles_them(
    void **state)
{
    (void)state;
    sp_pool *pool = fx.pool;
    cudaStream_t a = fx.a, b = fx.b;
    peak_then_trim(pool, a);
    gate *g = gate_new(), *g2 = gate_new();
    void *x, *y, *z, *v;
    SP(sp_alloc(pool, &x, 4 * MiB, a));
    SP(sp_alloc(pool, &z, 2 * MiB, a));
    gate_hold(g, a);
    SP(sp_free(pool, x, a)); /* behind the gate */
    SP(sp_alloc(pool, &y, 4 * MiB, b)); /* below the mark: no call, grows, marks a */
    assert_ptr_not_equal(y, x);
    cudasimResetCallCounts();
    SP(sp_free(pool, z, a)); /* a's step: a fence behind its frees */
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 1);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 0);
    assert_int_equal(stats_of(pool).fences_recorded, 1);
    gate_hold(g2, a); /* more work on a, after the fence */
    gate_open(g);
    gate_wait_arrival(g2); /* a is past its frees and its fence, and busy */
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &v, 4 * MiB, b)); /* the fence's query settles x */
    assert_ptr_equal(v, x);
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 0);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.held.current, 10 * MiB);
    gate_open(g2);
    SP(sp_free(pool, v, b));
    SP(sp_free(pool, y, b));
}

/* At the high-water mark a miss may ask about its best candidate, once, and never records a
 * fence: of two idle streams' pending ranges in the same bin it asks about the smaller (c's,
 * though a's was met first), and takes it. */
static void a_miss_that_would_raise_the_high_water_mark_asks_once_about_its_best_candidate(
    void **state)
{
    (void)state;
    sp_pool *pool = fx.pool;
    cudaStream_t a = fx.a, b = fx.b, c = fx.c;
    void *u, *x, *p;
    SP(sp_alloc(pool, &u, 4 * MiB, c));
    SP(sp_alloc(pool, &x, 4 * MiB + 64 * KiB, a)); /* a 6 MiB segment; the same bin as u */
    SP(sp_free(pool, u, c));
    SP(sp_free(pool, x, a));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 10 * MiB);
    assert_int_equal(st.held.peak, 10 * MiB);
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &p, 4 * MiB, b)); /* a new segment would raise the mark */
    assert_ptr_equal(p, u);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    assert_int_equal(cudasimCallCount(NULL), 1);
    st = stats_of(pool);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.held.peak, 10 * MiB);
    SP(sp_free(pool, p, b));
}

/* A miss asks the driver about free neighbours that tags keep apart only if, merged, they would
 * hold the request: two streams' pending 3 MiB frees side by side cannot serve 7 MiB, so that
 * miss makes only the driver allocation; once b's frees are settled by its host's word (a
 * synchronized request end: no call) and a is idle, a 6 MiB miss (at the high-water mark) asks
 * about a, its one ask, merges the two and takes the merged range without the driver. */
static void coalesce_asks_only_where_the_merge_would_fit(void **state)
{
    (void)state;
    gate *ga = gate_new(), *gb = gate_new();
    void *p, *x, *y, *w, *z, *m;
    SP(sp_alloc(fx.pool, &p, 8 * MiB, fx.c)); /* one 8 MiB segment */
    SP(sp_free(fx.pool, p, fx.c));
    SP(sp_alloc(fx.pool, &x, 3 * MiB, fx.c)); /* carved from it on its own stream: no ask */
    SP(sp_alloc(fx.pool, &y, 3 * MiB, fx.c));
    SP(sp_alloc(fx.pool, &w, 2 * MiB, fx.c)); /* stays live: the segment cannot go back */
    assert_ptr_equal((char *)y, (char *)x + 3 * MiB);
    assert_int_equal(stats_of(fx.pool).driver_allocs, 1);
    gate_hold(ga, fx.a);
    gate_hold(gb, fx.b);
    SP(sp_free(fx.pool, x, fx.a)); /* pending behind the gates, on two streams: kept apart */
    SP(sp_free(fx.pool, y, fx.b));
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &z, 7 * MiB, fx.c)); /* 3 + 3 < 7: nothing to ask about */
    assert_int_equal(cudasimCallCount("cudaMallocFromPoolAsync"), 1);
    assert_int_equal(cudasimCallCount(NULL), 1);
    assert_int_equal(stats_of(fx.pool).driver_allocs, 2);
    gate_open(ga);
    gate_open(gb);
    CK(cudaStreamSynchronize(fx.a));
    CK(cudaStreamSynchronize(fx.b));
    sp_request req;
    SP(sp_request_begin(fx.pool, fx.b, NULL, &req));
    cudasimResetCallCounts();
    SP(sp_request_end(fx.pool, req, SP_REQUEST_SYNCHRONIZED, NULL));
    assert_int_equal(cudasimCallCount(NULL), 0);
    SP(sp_alloc(fx.pool, &m, 6 * MiB, fx.c)); /* 3 + 3: asks about a (idle), merges, takes */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount(NULL), 1);
    assert_ptr_equal(m, x);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.held.current, 8 * MiB + 8 * MiB);
    SP(sp_free(fx.pool, m, fx.c));
    SP(sp_free(fx.pool, w, fx.c));
    SP(sp_free(fx.pool, z, fx.c));
}

/* A stream released after giving segments back to the driver, when its frees were all known
 * complete already (a stream query at its owner's step, after another stream's miss wanted its
 * memory: the host has not observed them, rule 13): a later trim still lets the driver release
 * those pages, with no device synchronize (SP_CAPTURE_ALWAYS rules it out: a capture may be
 * under way anywhere). Found in review: they stayed reserved. */
static void released_streams_give_backs_are_trimmed(void **state)
{
    (void)state;
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.capture_check = SP_CAPTURE_ALWAYS;
    sp_runtime *rt = track_runtime(0, &cfg);
    sp_pool *pool;
    SP(sp_runtime_default_pool(rt, &pool));
    cudaStream_t s = new_stream(), t = new_stream();
    void *a, *b, *m, *n;
    SP(sp_alloc(pool, &a, 40 * MiB, s));
    SP(sp_free(pool, a, s)); /* the first huge free: kept */
    SP(sp_alloc(pool, &a, 40 * MiB, s));
    SP(sp_alloc(pool, &b, 20 * MiB, s));
    SP(sp_free(pool, b, s)); /* 20 after 40: back to the driver at once, on s */
    SP(sp_free(pool, a, s)); /* 40 after 20: back at once too */
    SP(sp_alloc(pool, &m, 4 * MiB, s));
    SP(sp_free(pool, m, s)); /* a medium range, tagged with s */
    while (cudaStreamQuery(s) == cudaErrorNotReady) /* s is done; no host synchronize of it */
        sched_yield();
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &n, 4 * MiB, t)); /* asks about s, once: idle, all its frees settle */
    assert_ptr_equal(n, m);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    SP(sp_stream_release(rt, s));
    CK(cudaStreamDestroy(s));
    SP(sp_free(pool, n, t));
    SP(sp_pool_trim(pool, 0));
    uint64_t reserved = 1;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemCurrent,
                               &reserved));
    assert_int_equal(reserved, 0); /* on main: 56 MiB of a's and b's pages stayed */
    assert_int_equal(stats_of(pool).held.current, 0);
    drop_stream(rt, t);
    destroy_runtime(rt);
}

TEST_MAIN("streampool_sim",
    FX(steady_state_same_stream_makes_no_cuda_calls),
    FX(known_complete_steals_make_no_cuda_calls),
    TRACKED(capture_check_always_asks_cuda),
    TRACKED(own_cache_is_released_on_out_of_memory),
    FX(trim_returns_memory_to_the_device),
    TRACKED(failing_driver_calls_leave_state_intact),
    TRACKED(refused_give_back_keeps_the_segment),
    FX(miss_gives_back_on_its_own_stream_without_waiting),
    FX(huge_given_back_at_free_is_reused_and_trimmed),
    FX(a_miss_asks_once_and_leaves_a_busy_stream_to_its_owner),
    FX(the_marked_owner_publishes_at_its_next_step_and_the_next_miss_reuses_with_no_call),
    FX(a_busy_owner_fences_its_frees_at_its_next_free_and_the_fence_settles_them),
    FX(a_miss_that_would_raise_the_high_water_mark_asks_once_about_its_best_candidate),
    FX(coalesce_asks_only_where_the_merge_would_fit),
    TRACKED(released_streams_give_backs_are_trimmed)
)
