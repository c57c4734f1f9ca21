/* Host memory failures on the paths that take memory from and give it back to the driver
 * (cudasim only: with its fault injection the driver may refuse the free too). Every byte the
 * driver gave stays accounted for: live, in a heap, or given back. malloc and calloc are
 * interposed in this executable; armed on the test thread, the Nth call there that streampool
 * makes fails (the emulator's own are not failed: it aborts). Each case tries every N until a
 * run makes fewer calls than N, each in a runtime of its own. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t MiB = 1024 * 1024;

/* ---- failing the Nth host allocation of this thread ---- */

/* The sanitizers' runtimes allocate before they are initialized: no instrumentation here. */
#define UNCHECKED __attribute__((no_sanitize("address", "thread", "undefined")))

static _Thread_local unsigned long fail_countdown; /* 0: disarmed */
static _Thread_local bool failed_one;
static _Thread_local bool resolving;
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void (*real_free)(void *);
/* what dlsym allocates while it resolves the real functions comes from here, never freed; what
 * it frees meanwhile is left (a few bytes, once) */
static _Alignas(16) char early[4096];
static size_t early_used;

UNCHECKED static void *early_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof early - early_used)
        return NULL;
    void *p = early + early_used;
    early_used += n;
    return p; /* zero: static storage, never reused */
}

/* Whether the real functions are known; false while they are being resolved. */
UNCHECKED static bool resolved(void)
{
    if (real_free)
        return true;
    if (resolving)
        return false;
    resolving = true;
    *(void **)&real_malloc = dlsym(RTLD_NEXT, "malloc");
    *(void **)&real_calloc = dlsym(RTLD_NEXT, "calloc");
    *(void **)&real_free = dlsym(RTLD_NEXT, "free");
    resolving = false;
    return true;
}

/* Whether `caller` is in libstreampool. */
UNCHECKED static bool from_streampool(const void *caller)
{
    static const void *base;
    Dl_info info;
    if (!base && dladdr((const void *)sp_alloc, &info))
        base = info.dli_fbase;
    return dladdr(caller, &info) && info.dli_fbase == base;
}

UNCHECKED static bool fail_now(const void *caller)
{
    if (!fail_countdown || !from_streampool(caller) || --fail_countdown)
        return false;
    failed_one = true;
    errno = ENOMEM;
    return true;
}

UNCHECKED void *malloc(size_t n)
{
    if (!resolved())
        return early_alloc(n);
    return fail_now(__builtin_return_address(0)) ? NULL : real_malloc(n);
}

UNCHECKED void *calloc(size_t n, size_t size)
{
    if (!resolved())
        return n && size > sizeof early / n ? NULL : early_alloc(n * size);
    return fail_now(__builtin_return_address(0)) ? NULL : real_calloc(n, size);
}

UNCHECKED void free(void *p)
{
    if (((char *)p >= early && (char *)p < early + sizeof early) || !resolved())
        return;
    real_free(p);
}

static void arm(unsigned long nth)
{
    failed_one = false;
    fail_countdown = nth;
}

/* Whether the armed failure happened. */
static bool disarm(void)
{
    fail_countdown = 0;
    return failed_one;
}

/* ---- fixture and checks ---- */

static int teardown(void **state)
{
    (void)state;
    disarm();
    cudasimClearFaults();
    int busy = destroy_tracked_runtimes();
    reset_device(NULL);
    return busy ? -1 : 0;
}

static sp_pool *fresh_pool(sp_runtime **rt)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0; /* exact counters at every read */
    *rt = track_runtime(0, &cfg);
    sp_pool *pool;
    SP(sp_runtime_default_pool(*rt, &pool));
    return pool;
}

/* Every byte the driver gave is live or in a heap, and every driver allocation not given back
 * is a segment or slab of it. */
static void assert_tracked(sp_pool *pool, unsigned long nth)
{
    sp_stats st = stats_of(pool);
    if (st.held.current != st.active.current + st.cached.current ||
        st.held.current != st.segment_bytes + st.slab_bytes ||
        st.driver_allocs - st.driver_frees != st.segments + st.slabs)
        fail_msg("host allocation %lu failed: held %llu, active %llu, cached %llu, segments %llu "
                 "(%llu bytes), slabs %llu (%llu bytes), driver allocs %llu, frees %llu", nth,
                 (unsigned long long)st.held.current, (unsigned long long)st.active.current,
                 (unsigned long long)st.cached.current, (unsigned long long)st.segments,
                 (unsigned long long)st.segment_bytes, (unsigned long long)st.slabs,
                 (unsigned long long)st.slab_bytes, (unsigned long long)st.driver_allocs,
                 (unsigned long long)st.driver_frees);
}

/* Once nothing is live, a trim gives everything back. */
static void assert_all_given_back(sp_pool *pool)
{
    SP(sp_pool_trim(pool, 0));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.segments + st.slabs, 0);
    assert_int_equal(st.driver_frees, st.driver_allocs);
    assert_int_equal(st.pool_reserved, 0);
}

/* One run of a host-failure test on a fresh pool and stream with the Nth host allocation
 * failing: sets *failed to whether the armed failure happened, and returns how many frees the
 * driver refused. */
typedef unsigned long (*host_failure_run)(sp_pool *pool, cudaStream_t s, unsigned long nth,
                                          size_t bytes, bool refuse, bool *failed);

/* Runs `run` with the 1st, 2nd, ... host allocation failing until a run in which none did, each
 * on a fresh exact runtime, its pool and a stream; after each, once nothing is live, a trim
 * gives everything back. Returns the frees the driver refused over all runs. */
static unsigned long each_host_failure(host_failure_run run, size_t bytes, bool refuse)
{
    bool failed = true;
    unsigned long refused = 0;
    for (unsigned long nth = 1; failed; nth++) {
        sp_runtime *rt;
        sp_pool *pool = fresh_pool(&rt);
        cudaStream_t s = new_stream();
        refused += run(pool, s, nth, bytes, refuse, &failed);
        assert_all_given_back(pool);
        drop_stream(rt, s);
        destroy_runtime(rt);
    }
    return refused;
}

/* ---- taking memory: a fresh segment and a fresh slab ---- */

/* A miss that takes a fresh segment (or slab) with the Nth host allocation failing, and, if
 * `refuse`, the driver refusing the free that undoes it: the miss succeeds or says
 * SP_ERR_NO_HOST_MEMORY, and nothing the driver gave is lost. */
static unsigned long grow_with_host_failure(sp_pool *pool, cudaStream_t s, unsigned long nth,
                                            size_t bytes, bool refuse, bool *failed)
{
    if (refuse)
        CK(cudasimInjectFault("cudaFreeAsync", 1, cudaErrorLaunchFailure, 0));
    void *p = NULL;
    arm(nth);
    int rc = sp_alloc(pool, &p, bytes, s);
    *failed = disarm();
    cudasimClearFaults();
    if (rc != SP_OK && rc != SP_ERR_NO_HOST_MEMORY)
        fail_msg("host allocation %lu failed: sp_alloc said %d", nth, rc);
    assert_tracked(pool, nth);
    unsigned long refused = stats_of(pool).give_back_failures;
    if (rc == SP_OK)
        SP(sp_free(pool, p, s));
    return refused;
}

/* One case of the fresh-growth tests: the request's size (a segment's or a slab's), and whether
 * the driver also refuses the undo. Each is registered under the behaviour it states (main). */
typedef struct {
    size_t bytes;
    bool refuse;
} growth_case;

static void growth_survives_host_failure(void **state)
{
    const growth_case *c = *state;
    unsigned long refused = each_host_failure(grow_with_host_failure, c->bytes, c->refuse);
    if (c->refuse) /* some N failed after the driver gave the memory */
        assert_true(refused > 0);
}

/* ---- giving memory back ---- */

/* A trim whose free the driver refuses, with the Nth host allocation failing: the segment (or
 * slab) stays in its heap, and the next trim gives it back. */
static unsigned long refused_give_back_with_host_failure(sp_pool *pool, cudaStream_t s,
                                                         unsigned long nth, size_t bytes,
                                                         bool refuse, bool *failed)
{
    (void)refuse;
    void *p;
    SP(sp_alloc(pool, &p, bytes, s));
    SP(sp_free(pool, p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudasimInjectFault("cudaFreeAsync", 1, cudaErrorLaunchFailure, 0));
    arm(nth);
    int rc = sp_pool_trim(pool, 0);
    *failed = disarm();
    cudasimClearFaults();
    sp_stats st = stats_of(pool);
    /* without host memory to list what it could give, the trim gives nothing (best effort) */
    if (rc != (st.give_back_failures ? SP_ERR_CUDA : SP_OK) && rc != SP_ERR_NO_HOST_MEMORY)
        fail_msg("host allocation %lu failed: sp_pool_trim said %d", nth, rc);
    assert_true(st.give_back_failures <= 1);
    assert_int_equal(st.driver_frees, 0);
    assert_tracked(pool, nth);
    return st.give_back_failures;
}

/* The give-back tests: the size of what is given back (a segment, a slab). */
static void give_back_refused_with_host_failure(void **state)
{
    unsigned long refused =
        each_host_failure(refused_give_back_with_host_failure, *(const size_t *)*state, true);
    assert_true(refused > 0); /* some N failed after the driver refused */
}

#define CASE(name, fn, ...) {#name, fn, NULL, teardown, __VA_ARGS__}
TEST_MAIN_WITHOUT_ALLOC_CONF("host_faults",
    CASE(fresh_segment_survives_host_failure, growth_survives_host_failure,
         &(growth_case){3 * MiB, false}),
    CASE(fresh_slab_survives_host_failure, growth_survives_host_failure,
         &(growth_case){64 * 1024, false}),
    CASE(refused_undo_of_fresh_segment_stays_tracked, growth_survives_host_failure,
         &(growth_case){3 * MiB, true}),
    CASE(refused_undo_of_fresh_slab_stays_tracked, growth_survives_host_failure,
         &(growth_case){64 * 1024, true}),
    CASE(refused_segment_give_back_stays_in_heap, give_back_refused_with_host_failure,
         &(size_t){3 * MiB}),
    CASE(refused_slab_give_back_stays_in_heap, give_back_refused_with_host_failure,
         &(size_t){64 * 1024})
)
#undef CASE
