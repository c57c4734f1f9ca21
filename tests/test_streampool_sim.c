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
    /* the fence is best effort: its failure is skipped and counted, once (a miss asks about
     * each stream at most once), and fresh memory serves the request */
    SP(sp_alloc(pool, &q, 4096, other));
    cudasimClearFaults();
    assert_ptr_not_equal(q, p);
    gate_open(g);
    SP(sp_free(pool, q, other));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.ooms, 1);
    assert_int_equal(st.allocs, 2);
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

/* A miss that found a stream's frees unsettled makes that stream fence its next large frees
 * right behind them, not only the first: once its work passes them, another stream reuses all
 * of them, though the stream has queued more work since (a stream query would say busy, and a
 * fence recorded then would complete only after that work). */
static void asked_stream_fences_its_next_large_frees(void **state)
{
    (void)state;
    gate *g1 = gate_new(), *g2 = gate_new();
    void *x[3], *y, *z[3];
    for (int i = 0; i < 3; i++)
        SP(sp_alloc(fx.pool, &x[i], 4 * MiB, fx.a)); /* a 4 MiB segment each */
    gate_hold(g1, fx.a);
    SP(sp_free(fx.pool, x[0], fx.a));
    SP(sp_alloc(fx.pool, &y, 4 * MiB, fx.b)); /* asks about a: busy, so b grows */
    assert_int_equal(stats_of(fx.pool).driver_allocs, 4);
    SP(sp_free(fx.pool, x[1], fx.a));
    SP(sp_free(fx.pool, x[2], fx.a));
    gate_hold(g2, fx.a); /* more work behind the frees */
    gate_open(g1);
    gate_wait_arrival(g2); /* a is past its frees and busy */
    for (int i = 0; i < 3; i++)
        SP(sp_alloc(fx.pool, &z[i], 4 * MiB, fx.b));
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 4); /* without fences behind x[1] and x[2]: 5 */
    assert_int_equal(st.cross_stream_reuses, 1); /* one fence covers all three: one ask */
    for (int i = 0; i < 3; i++) /* x's segments, each taken whole */
        assert_true(z[i] == x[0] || z[i] == x[1] || z[i] == x[2]);
    assert_true(z[0] != z[1] && z[1] != z[2] && z[0] != z[2]);
    gate_open(g2);
    for (int i = 0; i < 3; i++)
        SP(sp_free(fx.pool, z[i], fx.b));
    SP(sp_free(fx.pool, y, fx.b));
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

/* A fence another stream's ask recorded stays where it was: a later free of the asked stream
 * gets a fence of its own, so the free the stream has already passed is settled for the next
 * asker, though the stream is busy with later work (found in review: the fence was moved). */
static void askers_fence_stays_where_it_was_recorded(void **state)
{
    (void)state;
    gate *g1 = gate_new(), *g2 = gate_new();
    void *y, *x, *p1, *p2;
    SP(sp_alloc(fx.pool, &y, 16 * MiB, fx.a)); /* a huge segment */
    SP(sp_alloc(fx.pool, &x, 2 * MiB, fx.a));  /* a medium segment of 2 MiB */
    SP(sp_free(fx.pool, y, fx.a));
    gate_hold(g1, fx.a);
    SP(sp_free(fx.pool, x, fx.a));             /* x's free behind g1 */
    SP(sp_alloc(fx.pool, &p1, 2 * MiB, fx.b)); /* asks about a: busy, a fence behind g1; b grows */
    assert_int_equal(stats_of(fx.pool).driver_allocs, 3);
    gate_hold(g2, fx.a);                    /* more work on a */
    void *y2;
    SP(sp_alloc(fx.pool, &y2, 16 * MiB, fx.a)); /* a's own range back, no miss */
    assert_ptr_equal(y2, y);
    SP(sp_free(fx.pool, y2, fx.a));             /* fence_interest: a fence of its own */
    gate_open(g1);
    gate_wait_arrival(g2);                /* a is past x's free (and busy at g2) */
    SP(sp_alloc(fx.pool, &p2, 2 * MiB, fx.b));  /* x's free is complete: b should reuse x */
    sp_stats st = stats_of(fx.pool);
    gate_open(g2);
    assert_ptr_equal(p2, x);
    assert_int_equal(st.driver_allocs, 3);
    assert_int_equal(st.cross_stream_reuses, 1);
    SP(sp_free(fx.pool, p1, fx.b));
    SP(sp_free(fx.pool, p2, fx.b));
}

/* Stream a frees x[0] (4 MiB) behind gate g1, b's 4 MiB miss asks about it (a is busy: a fence
 * behind g1, and b grows), then a frees x[1] (second_bytes) behind g2. Once x[0]'s free is
 * complete and x[1]'s is not, b's next 4 MiB miss must take x[0] without the driver, whatever it
 * asks about x[1]. */
static void miss_takes_the_completed_older_free(size_t second_bytes)
{
    sp_pool *pool = fx.pool;
    cudaStream_t a = fx.a, b = fx.b;
    gate *g1 = gate_new(), *g2 = gate_new();
    void *x[2], *p1, *p2;
    SP(sp_alloc(pool, &x[0], 4 * MiB, a));
    SP(sp_alloc(pool, &x[1], second_bytes, a));
    gate_hold(g1, a);
    SP(sp_free(pool, x[0], a));
    SP(sp_alloc(pool, &p1, 4 * MiB, b));
    assert_int_equal(stats_of(pool).driver_allocs, 3);
    gate_hold(g2, a); /* a's next piece of work */
    SP(sp_free(pool, x[1], a));
    gate_open(g1);
    gate_wait_arrival(g2); /* x[0]'s free is complete, x[1]'s not */
    SP(sp_alloc(pool, &p2, 4 * MiB, b));
    sp_stats st = stats_of(pool);
    gate_open(g2);
    assert_ptr_equal(p2, x[0]);
    assert_int_equal(st.driver_allocs, 3);
    SP(sp_free(pool, p1, b));
    SP(sp_free(pool, p2, b));
}

/* The same with no allocation on the asked stream between its frees: free, more work, free.
 * x[1] is a 2 MiB segment, too small for b's misses, so never asked about: fence_interest gives
 * its free a fence of its own, behind g2. */
static void later_free_gets_a_fence_of_its_own(void **state)
{
    (void)state;
    miss_takes_the_completed_older_free(2 * MiB);
}

/* One unanswered ask about a stream's newest free does not hide that stream's older frees from
 * the same miss: a completed older fence covering them still settles them (found in review).
 * x[1] is 4 MiB: b's second miss asks about it first (newest in its bin). */
static void older_fence_settles_older_frees_in_the_same_miss(void **state)
{
    (void)state;
    miss_takes_the_completed_older_free(4 * MiB);
}

/* A miss asks the driver about free neighbours that tags keep apart only if, merged, they would
 * hold the request: two streams' pending 3 MiB frees side by side cannot serve 7 MiB, so that
 * miss makes only the driver allocation; once both streams are idle, a 6 MiB miss asks, merges
 * them and takes the merged range without the driver. */
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
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &m, 6 * MiB, fx.c)); /* 3 + 3: asks about a and b (idle), merges, takes */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 2);
    assert_int_equal(cudasimCallCount(NULL), 2);
    assert_ptr_equal(m, x);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.held.current, 8 * MiB + 8 * MiB);
    SP(sp_free(fx.pool, m, fx.c));
    SP(sp_free(fx.pool, w, fx.c));
    SP(sp_free(fx.pool, z, fx.c));
}

/* A stream released after giving segments back to the driver, when a miss had already found
 * all its frees complete (a stream query: the host has not observed them, rule 13): a later trim
 * still lets the driver release those pages, with no device synchronize (SP_CAPTURE_ALWAYS
 * rules it out: a capture may be under way anywhere). Found in review: they stayed reserved. */
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
    SP(sp_alloc(pool, &n, 4 * MiB, t)); /* asks about s: idle, all its frees settle */
    assert_ptr_equal(n, m);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(steady_state_same_stream_makes_no_cuda_calls),
        FX(known_complete_steals_make_no_cuda_calls),
        TRACKED(capture_check_always_asks_cuda),
        TRACKED(own_cache_is_released_on_out_of_memory),
        FX(trim_returns_memory_to_the_device),
        TRACKED(failing_driver_calls_leave_state_intact),
        TRACKED(refused_give_back_keeps_the_segment),
        FX(miss_gives_back_on_its_own_stream_without_waiting),
        FX(asked_stream_fences_its_next_large_frees),
        FX(huge_given_back_at_free_is_reused_and_trimmed),
        FX(askers_fence_stays_where_it_was_recorded),
        FX(later_free_gets_a_fence_of_its_own),
        FX(older_fence_settles_older_frees_in_the_same_miss),
        FX(coalesce_asks_only_where_the_merge_would_fit),
        TRACKED(released_streams_give_backs_are_trimmed),
    };
    return cmocka_run_group_tests_name("streampool_sim", tests, NULL, NULL);
}
