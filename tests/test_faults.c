/* Failure classes of issue 10 that need cudasim's fault injection (cudasim only):
 *  1. a failed ordering step (the event wait, or the fence record at release) before another
 *     stream reuses a released stream's memory never lets that stream's work overtake the
 *     released stream's pending work (internal.h's policy: synchronize, never free unordered);
 *  2. a failing fence call on another stream's cache is a skipped step: the miss takes fresh
 *     memory, it does not fail as out of memory;
 *  3. a stream destroyed without sp_stream_release (a user bug) does not make later misses of
 *     its size class fail.
 * Asynchrony is held by host-function gates that the test thread opens; nothing sleeps. */
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024;

static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t la = (uintptr_t)a, lb = (uintptr_t)b;
    return la < lb + nb && lb < la + na;
}

static unsigned long long sync_calls(void)
{
    return cudasimCallCount("cudaStreamSynchronize") + cudasimCallCount("cudaEventSynchronize") +
           cudasimCallCount("cudaDeviceSynchronize");
}

/* ---- 1. ordering before reuse of a released stream's memory ---- */

typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t a, b;
    size_t n;
    void *pb;
    int release_rc, alloc_rc;
    order_mark mark_b;
    atomic_bool done;
} reuser;

/* Releases stream a and allocates on b; either may have to wait on the host for a's gated work
 * (that is the policy when the ordering step fails), so it runs off the test thread. */
static void *release_then_reuse(void *arg)
{
    reuser *r = arg;
    r->release_rc = sp_stream_release(r->rt, r->a);
    r->alloc_rc = sp_alloc(r->pool, &r->pb, r->n, r->b);
    if (r->alloc_rc == SP_OK) {
        (void)cudaLaunchHostFunc(r->b, order_mark_fn, &r->mark_b); /* b's use begins */
        (void)cudaMemsetAsync(r->pb, 0xbb, r->n, r->b);
    }
    atomic_store(&r->done, true);
    return NULL;
}

enum { FAIL_WAIT, FAIL_RECORD, FAIL_RECORD_AND_SYNC };

/* On a device that holds one block of n bytes only, stream a writes a canary into its block,
 * then, held by a gate, copies it to the host and frees it; a is released; b asks for the same
 * size, so it can only have a's memory. With the chosen ordering step failing, b's allocation
 * must still be ordered after a's copy: the copy shows the canary, and if b's block overlaps
 * a's, b's use began after a's copy. */
static void reuse_after_failed_ordering(size_t n, uint64_t device, int fault)
{
    sp_runtime *rt = exact_runtime_on_device_of(device);
    sp_pool *pool = default_pool(rt);
    cudaStream_t a = new_stream(), b = new_stream();
    gate *g = gate_new();
    order_log log = {0};
    order_mark mark_a = {&log, 1};
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, n));
    memset(host, 0, n);
    void *pa;
    SP(sp_alloc(pool, &pa, n, a));
    CK(cudaMemsetAsync(pa, 0xaa, n, a));
    CK(cudaStreamSynchronize(a)); /* the canary is in place before anything of b's */
    gate_hold(g, a);
    CK(cudaMemcpyAsync(host, pa, n, cudaMemcpyDeviceToHost, a));
    mark(a, &mark_a); /* a's use ends */
    SP(sp_free(pool, pa, a));

    cudasimResetCallCounts();
    switch (fault) {
    case FAIL_WAIT:
        CK(cudasimInjectFault("cudaStreamWaitEvent", 1, cudaErrorLaunchFailure, 1));
        break;
    case FAIL_RECORD_AND_SYNC:
        CK(cudasimInjectFault("cudaStreamSynchronize", 1, cudaErrorLaunchFailure, 1));
        /* fall through */
    case FAIL_RECORD:
        CK(cudasimInjectFault("cudaEventRecord", 1, cudaErrorLaunchFailure, 1));
        break;
    }
    reuser r = {.rt = rt, .pool = pool, .a = a, .b = b, .n = n, .mark_b = {&log, 2}};
    unsigned long long syncs = sync_calls();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_then_reuse, &r), 0);
    /* until the reuser waits on the host (a synchronize began) or got memory without waiting */
    while (!atomic_load(&r.done) && sync_calls() == syncs)
        sched_yield();
    gate_open(g);
    assert_int_equal(pthread_join(t, NULL), 0);
    /* the failing step was tried */
    const char *tried = fault == FAIL_WAIT ? "cudaStreamWaitEvent" : "cudaEventRecord";
    if (cudasimCallCount(tried) == 0)
        fail_msg("fault %d, %zu bytes: %s was never called", fault, n, tried);
    cudasimClearFaults();
    CK(cudaStreamSynchronize(a));
    CK(cudaStreamSynchronize(b));

    assert_int_equal(r.alloc_rc, SP_OK);
    for (size_t k = 0; k < n; k++)
        if (host[k] != 0xaa)
            fail_msg("fault %d, %zu bytes: a's copy byte %zu is 0x%02x", fault, n, k, host[k]);
    assert_int_equal(atomic_load(&log.len), 2);
    if (overlap(pa, n, r.pb, n))
        assert_int_equal(log.order[0], 1); /* a's use ended before b's began */
    assert_true(device_bytes_are(r.pb, n, 0xbb, b));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.ooms, 0);
    assert_int_equal(st.requested.current, n);
    assert_int_equal(st.held.current, st.active.current + st.cached.current);
    SP(sp_free(pool, r.pb, b));
    CK(cudaFreeHost(host));
    CK(cudaStreamDestroy(a)); /* released by the reuser */
    drop_stream(rt, b);
    destroy_runtime(rt);
    reset_device(NULL);
}

static void reuse_after_failed_wait(void **state)
{
    (void)state;
    reuse_after_failed_ordering(3 * MiB, 4 * MiB, FAIL_WAIT);
    reuse_after_failed_ordering(64 * KiB, 2 * MiB, FAIL_WAIT);
}

static void reuse_after_failed_record(void **state)
{
    (void)state;
    reuse_after_failed_ordering(3 * MiB, 4 * MiB, FAIL_RECORD);
    reuse_after_failed_ordering(64 * KiB, 2 * MiB, FAIL_RECORD);
}

static void reuse_after_failed_record_and_sync(void **state)
{
    (void)state;
    reuse_after_failed_ordering(3 * MiB, 4 * MiB, FAIL_RECORD_AND_SYNC);
    reuse_after_failed_ordering(64 * KiB, 2 * MiB, FAIL_RECORD_AND_SYNC);
}

/* ---- 2. failing fence calls on another stream's cache ---- */

/* Stream a, held by a gate, frees blocks of n bytes; then `api` fails persistently where the
 * contract calls it, and b misses on the same size: b gets fresh memory (the device has room),
 * the failed step is counted as skipped, and nothing counts as out of memory. A miss only asks
 * (cudaStreamQuery; cudaEventQuery of a fence recorded already); fences are created and
 * recorded by a's own thread at its next step (here a free, e's) after a miss of b's marked a.
 * So for every api but cudaStreamQuery, b first misses once (and uses up the slab that a small
 * miss takes) to mark a; for cudaEventQuery, a's step records the fence before the fault. */
static void fresh_memory_despite(const char *api, size_t n)
{
    sp_runtime *rt = exact_runtime_on_device_of(256 * MiB);
    sp_pool *pool = default_pool(rt);
    cudaStream_t a = new_stream(), b = new_stream();
    gate *g = gate_new();
    enum { N = 4 };
    void *pa[N], *e;
    for (int i = 0; i < N; i++)
        SP(sp_alloc(pool, &pa[i], n, a));
    SP(sp_alloc(pool, &e, n, a)); /* freed at a's step */
    gate_hold(g, a);
    for (int i = 0; i < N; i++)
        SP(sp_free(pool, pa[i], a));
    bool by_miss = strcmp(api, "cudaStreamQuery") == 0;
    bool fenced_first = strcmp(api, "cudaEventQuery") == 0;
    void *warm[2 * MiB / (64 * KiB)];
    size_t warms = by_miss ? 0 : n < MiB ? 2 * MiB / n : 1;
    assert_true(warms <= sizeof warm / sizeof warm[0]);
    for (size_t i = 0; i < warms; i++) /* the first asks a (busy) and marks it */
        SP(sp_alloc(pool, &warm[i], n, b));
    if (fenced_first) {
        SP(sp_free(pool, e, a)); /* a's step: a fence behind its frees */
        assert_int_equal(stats_of(pool).fences_recorded, 1);
    }
    sp_stats before = stats_of(pool);
    cudasimResetCallCounts();
    CK(cudasimInjectFault(api, 1, cudaErrorLaunchFailure, 1));
    if (!by_miss && !fenced_first)
        SP(sp_free(pool, e, a)); /* a's step: its fence fails */
    sp_stats after_step = stats_of(pool);
    void *pb;
    int rc = sp_alloc(pool, &pb, n, b);
    unsigned long long failed_calls = cudasimCallCount(api);
    cudasimClearFaults();
    if (rc != SP_OK)
        fail_msg("%s failing, %zu bytes: sp_alloc gave %d", api, n, rc);
    sp_stats st = stats_of(pool);
    if (failed_calls == 0)
        fail_msg("%s failing, %zu bytes: neither a's step nor b's miss called it", api, n);
    assert_true(st.skipped_steps > before.skipped_steps);
    assert_int_equal(st.fences_recorded, before.fences_recorded);
    assert_int_equal(st.ooms, 0);
    for (int i = 0; i < N; i++)
        assert_false(overlap(pb, n, pa[i], n)); /* a's memory stays a's until its fence */
    assert_int_equal(st.requested.current, after_step.requested.current + n);
    if (st.driver_allocs != after_step.driver_allocs + 1)
        fail_msg("%s failing, %zu bytes: %llu driver allocations, not 1", api, n,
                 (unsigned long long)(st.driver_allocs - after_step.driver_allocs));
    gate_open(g);
    SP(sp_free(pool, pb, b));
    if (by_miss)
        SP(sp_free(pool, e, a));
    for (size_t i = 0; i < warms; i++)
        SP(sp_free(pool, warm[i], b));
    drop_streams_and_runtime(rt, a, b);
    reset_device(NULL);
}

static void fresh_memory_despite_fence_failures(void **state)
{
    (void)state;
    /* event create: the library creates its fences with cudaEventCreateWithFlags */
    static const char *const apis[] = {"cudaEventCreateWithFlags", "cudaEventRecord",
                                       "cudaEventQuery", "cudaStreamQuery"};
    static const size_t sizes[] = {64 * KiB, 3 * MiB};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
            fresh_memory_despite(apis[i], sizes[s]);
}

/* ---- 3. a stream destroyed without sp_stream_release ---- */

/* A stream allocates and frees blocks of n bytes, then is destroyed without being released (a
 * user bug; cudasim may hand its handle value to a later stream). Later misses of that size on
 * other streams still succeed, on a device with room and on one so small that they can only
 * have the dead stream's memory. */
static void dead_stream_does_not_fail_misses(size_t n, uint64_t device)
{
    sp_runtime *rt = exact_runtime_on_device_of(device);
    sp_pool *pool = default_pool(rt);
    cudaStream_t dead = new_stream();
    void *p;
    SP(sp_alloc(pool, &p, n, dead));
    CK(cudaMemsetAsync(p, 0x11, n, dead));
    SP(sp_free(pool, p, dead));
    CK(cudaStreamDestroy(dead)); /* no sp_stream_release */
    for (int round = 0; round < 6; round++) {
        cudaStream_t s = new_stream();
        void *q = NULL;
        int rc = sp_alloc(pool, &q, n, s);
        if (rc != SP_OK)
            fail_msg("%zu bytes on a %llu MiB device, round %d: sp_alloc gave %d", n,
                     (unsigned long long)(device / MiB), round, rc);
        CK(cudaMemsetAsync(q, 0x22, n, s));
        assert_true(device_bytes_are(q, n, 0x22, s));
        SP(sp_free(pool, q, s));
        if (round % 2) /* half of them destroyed without release too */
            CK(cudaStreamDestroy(s));
        else
            drop_stream(rt, s);
    }
    sp_stats st = stats_of(pool);
    assert_int_equal(st.ooms, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.held.current, st.active.current + st.cached.current);
    destroy_runtime(rt);
    reset_device(NULL);
}

static void destroyed_unreleased_stream(void **state)
{
    (void)state;
    dead_stream_does_not_fail_misses(64 * KiB, 256 * MiB);
    dead_stream_does_not_fail_misses(3 * MiB, 256 * MiB);
    dead_stream_does_not_fail_misses(64 * KiB, 2 * MiB);
    dead_stream_does_not_fail_misses(3 * MiB, 4 * MiB);
}

#define T(fn) cmocka_unit_test_teardown(fn, teardown_faults)

TEST_MAIN("faults",
    T(reuse_after_failed_wait),
    T(reuse_after_failed_record),
    T(reuse_after_failed_record_and_sync),
    T(fresh_memory_despite_fence_failures),
    T(destroyed_unreleased_stream)
)
