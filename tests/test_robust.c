/* Robustness at the edges (issue 10): per-thread streams of live and exited threads, the cache
 * limit, limits at the driver's granularity, stats invariants, released streams. Every test's
 * runtime lives in the fixture, so teardown destroys it even after a failed assertion. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024;

typedef sp_fixture fixture; /* fixtures.h */

static void assert_exact(sp_stats st)
{
    assert_int_equal(st.held.current, st.active.current + st.cached.current);
    assert_int_equal(st.held.current, st.segment_bytes + st.slab_bytes);
    assert_true(st.held.peak >= st.held.current);
    assert_true(st.active.peak >= st.active.current);
    assert_true(st.requested.peak >= st.requested.current);
    assert_true(st.cached.peak >= st.cached.current);
    assert_true(st.cached.peak <= st.held.peak);
}

/* ---- per-thread streams ---- */

static sp_pool *short_lived_pool;
static pthread_barrier_t short_lived_all;

static void *short_lived(void *arg)
{
    (void)arg;
    sp_pool *pool = short_lived_pool;
    void *small, *large;
    bool ok = sp_alloc(pool, &small, 64 * KiB, cudaStreamPerThread) == SP_OK &&
              sp_alloc(pool, &large, 3 * MiB, cudaStreamPerThread) == SP_OK;
    pthread_barrier_wait(&short_lived_all); /* all alive at once: a segment each */
    if (!ok)
        return (void *)1;
    (void)cudaMemsetAsync(large, 1, 3 * MiB, cudaStreamPerThread);
    if (sp_free(pool, small, cudaStreamPerThread) != SP_OK ||
        sp_free(pool, large, cudaStreamPerThread) != SP_OK)
        return (void *)1;
    return NULL; /* exits with both blocks cached on its per-thread stream */
}

/* 40 threads that each free onto their cudaStreamPerThread and exit: their caches go to the pool
 * behind a final fence, so another stream reuses their memory without the driver, and a trim
 * gives all of it back. */
static void exited_threads_caches_are_reused_and_trimmed(void **state)
{
    fixture *f = *state;
    enum { N = 40 };
    short_lived_pool = f->pool;
    pthread_barrier_init(&short_lived_all, NULL, N);
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, short_lived, NULL), 0);
    for (int i = 0; i < N; i++) {
        void *ret = (void *)2;
        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    pthread_barrier_destroy(&short_lived_all);
    CK(cudaDeviceSynchronize()); /* the exited threads' work (and final fences) completed */
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.segments, N);
    uint64_t allocs = st.driver_allocs;
    cudaStream_t s = new_stream();
    void *p[N];
    for (int i = 0; i < N; i++)
        SP(sp_alloc(f->pool, &p[i], 3 * MiB, s));
    st = stats_of(f->pool);
    assert_int_equal(st.driver_allocs, allocs); /* all taken from exited threads' segments */
    for (int i = 0; i < N; i++)
        SP(sp_free(f->pool, p[i], s));
    SP(sp_pool_trim(f->pool, 0));
    st = stats_of(f->pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.pool_reserved, 0);
    assert_exact(st);
    drop_stream(f->rt, s);
}

typedef struct {
    sp_pool *pool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step, done;
    void *freed[4];
} owner;

static void owner_wait(owner *o, int step)
{
    pthread_mutex_lock(&o->mu);
    while (o->step < step)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

static void owner_signal(owner *o, int *field, int value)
{
    pthread_mutex_lock(&o->mu);
    *field = value;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void *owner_thread(void *arg)
{
    owner *o = arg;
    void *keep;
    bool ok = sp_alloc(o->pool, &keep, 64 * KiB, cudaStreamPerThread) == SP_OK;
    for (int i = 0; ok && i < 4; i++)
        ok = sp_alloc(o->pool, &o->freed[i], 64 * KiB, cudaStreamPerThread) == SP_OK;
    for (int i = 0; ok && i < 4; i++)
        ok = sp_free(o->pool, o->freed[i], cudaStreamPerThread) == SP_OK;
    owner_signal(o, &o->done, ok ? 1 : -1);
    owner_wait(o, 1); /* another thread has tried to take the blocks */
    ok = ok && sp_free(o->pool, keep, cudaStreamPerThread) == SP_OK; /* records the fence asked for */
    owner_signal(o, &o->done, ok ? 2 : -2);
    owner_wait(o, 2); /* stays alive while the test trims */
    return NULL;
}

static void owner_wait_done(owner *o, int done)
{
    pthread_mutex_lock(&o->mu);
    while (o->done != done && o->done >= 0)
        pthread_cond_wait(&o->cv, &o->mu);
    int now = o->done;
    pthread_mutex_unlock(&o->mu);
    assert_int_equal(now, done);
}

/* A live thread's cudaStreamPerThread cache: another thread cannot name that stream, so it asks
 * the owner for a fence, which the owner records at its next free; behind it the blocks are
 * stolen. A trim settles what is left (a device synchronize) and gives it all back. */
static void live_threads_cache_is_stolen_behind_its_fence(void **state)
{
    fixture *f = *state;
    owner o = {.pool = f->pool};
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, owner_thread, &o), 0);
    owner_wait_done(&o, 1);
    cudaStream_t s = new_stream();
    void *first;
    SP(sp_alloc(f->pool, &first, 64 * KiB, s)); /* can only ask: no fence on the owner's stream */
    owner_signal(&o, &o.step, 1);
    owner_wait_done(&o, 2);
    CK(cudaDeviceSynchronize()); /* the owner's fence completed */
    uint64_t reuses = stats_of(f->pool).cross_stream_reuses;
    void *stolen;
    SP(sp_alloc(f->pool, &stolen, 64 * KiB, s));
    bool theirs = false;
    for (int i = 0; i < 4; i++)
        theirs |= stolen == o.freed[i];
    assert_true(theirs);
    assert_true(stats_of(f->pool).cross_stream_reuses > reuses);
    SP(sp_free(f->pool, stolen, s));
    SP(sp_free(f->pool, first, s));
    SP(sp_pool_trim(f->pool, 0)); /* the owner is alive, idle: everything goes back */
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.held.current, 0);
    assert_exact(st);
    owner_signal(&o, &o.step, 2);
    pthread_join(t, NULL);
    drop_stream(f->rt, s);
}

/* Two neighbouring ranges freed on two other streams merge only once both are settled: a miss
 * that asks the driver so while it coalesces, and takes the merged range, reuses the other
 * streams' memory as much as one that asked about the range it took. A miss asks about one
 * stream (its best candidate, and only when it would raise the high-water mark): b's half is
 * settled by its host's word (a synchronized request end, no call), a's by the miss's one ask. */
static void range_settled_by_coalescing_counts_as_reuse(void **state)
{
    fixture *f = *state;
    void *whole, *x, *y, *p;
    SP(sp_alloc(f->pool, &whole, 4 * MiB, fx.a)); /* one 4 MiB segment */
    SP(sp_free(f->pool, whole, fx.a));
    SP(sp_alloc(f->pool, &x, 2 * MiB, fx.a));     /* its two halves */
    SP(sp_alloc(f->pool, &y, 2 * MiB, fx.a));
    assert_ptr_equal(x, whole);
    assert_ptr_equal(y, (char *)whole + 2 * MiB);
    SP(sp_free(f->pool, x, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_free(f->pool, y, fx.b));                /* tagged apart: a's and b's */
    CK(cudaStreamSynchronize(fx.b));
    sp_request req;                               /* the host's word: b's frees are complete */
    SP(sp_request_begin(f->pool, fx.b, NULL, &req));
    SP(sp_request_end(f->pool, req, SP_REQUEST_SYNCHRONIZED, NULL));
    sp_stats st = stats_of(f->pool);
    uint64_t reuses = st.cross_stream_reuses, allocs = st.driver_allocs;
    assert_int_equal(st.segments, 1);
#ifdef SP_CUDASIM
    cudasimResetCallCounts();
#endif
    SP(sp_alloc(f->pool, &p, 4 * MiB, fx.c));     /* only the two halves merged can serve it */
    assert_ptr_equal(p, whole);
#ifdef SP_CUDASIM /* the one ask: a's stream, idle; no fence recorded */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 0);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
#endif
    st = stats_of(f->pool);
    assert_int_equal(st.driver_allocs, allocs);
    assert_int_equal(st.cross_stream_waits, 0);
    assert_int_equal(st.cross_stream_reuses, reuses + 1);
    assert_exact(st);
    SP(sp_free(f->pool, p, fx.c));
}

/* ---- the cache limit ---- */

/* What the cache limit gives back is synchronized and trimmed from the cudaMemPool (rule 13),
 * so the reserved memory drops with it. */
static void cache_limit_lowers_reserved_memory(void **state)
{
    fixture *f = *state;
    SP(sp_pool_set_cache_limit(f->pool, 0));
    void *p;
    SP(sp_alloc(f->pool, &p, 64 * MiB, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    assert_int_equal(stats_of(f->pool).pool_reserved, 64 * MiB);
    SP(sp_free(f->pool, p, fx.a));
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.pool_reserved, 0);
    assert_exact(st);
}

/* Frees over the cache limit whose memory cannot go back yet (its stream is held) do not each
 * scan the pool's caches again: a pass is retried only once the cache grew by a slab. */
static void cache_limit_does_not_rescan_on_every_free(void **state)
{
    fixture *f = *state;
    SP(sp_pool_set_cache_limit(f->pool, 0));
    enum { N = 96 };
    void *p[N];
    for (int i = 0; i < N; i++)
        SP(sp_alloc(f->pool, &p[i], 16 * KiB, fx.a));
    gate *g = gate_new();
    gate_hold(g, fx.a);
    uint64_t trims = stats_of(f->pool).trims;
    for (int i = 0; i < N; i++)
        SP(sp_free(f->pool, p[i], fx.a)); /* 1.5 MiB in all, pending behind the gate */
    assert_true(stats_of(f->pool).trims - trims <= 2);
    gate_open(g);
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_pool_trim(f->pool, 0));
    assert_int_equal(stats_of(f->pool).held.current, 0);
}

/* The cache limit judges the cache by the pool's current figures, which the stream caches feed
 * only past stats_flush_bytes (default 1 MiB): a hit's live bytes may not have reached them.
 * Here a's 1 MiB hit is unflushed when c's frees check the limit: on main the pool counted
 * 1 MiB too little live, took 5 MiB for cached (4 MiB really, at the limit) and gave a
 * settled slab back to the driver. */
static void cache_limit_counts_unflushed_hits(void **state)
{
    fixture *f = *state; /* FX: the default stats_flush_bytes */
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cache_limit = 4 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(f->rt, "limited", &cfg, &pool));
    cudaStream_t a = f->a, b = f->b, c = f->c;
    gate *ga = gate_new(), *gb = gate_new();
    gate_hold(ga, a); /* a's and b's slabs stay theirs: c carves a slab of its own */
    gate_hold(gb, b);
    void *x, *x2, *y, *p, *q;
    SP(sp_alloc(pool, &x, MiB, a));     /* slab 1 */
    SP(sp_free(pool, x, a));
    SP(sp_alloc(pool, &x2, MiB, a));    /* a hit: 1 MiB live, kept in a's cache */
    assert_ptr_equal(x2, x);
    SP(sp_alloc(pool, &y, MiB, b));     /* slab 2 */
    SP(sp_alloc(pool, &p, MiB, c));     /* slab 3 */
    SP(sp_alloc(pool, &q, MiB, c));
    SP(sp_free(pool, p, c));
    SP(sp_free(pool, q, c));            /* 2 MiB live (x2, y), 4 MiB cached: at the limit */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.active.current, 2 * MiB);
    assert_int_equal(st.cached.current, 4 * MiB);
    assert_int_equal(st.held.current, 6 * MiB);
    assert_int_equal(st.driver_frees, 0);
    assert_exact(st);
    gate_open(ga);
    gate_open(gb);
    SP(sp_free(pool, x2, a));
    SP(sp_free(pool, y, b));
    SP(sp_pool_destroy(pool));
}

/* ---- limits ---- */

/* A limit is whole driver pages (issue 20): at a one-page limit, a small block's slab takes the
 * page, a large request that needs another is refused, and once the small block is freed a
 * request of exactly the limit succeeds: the idle slab goes back for it. */
static void request_of_exactly_the_limit_fits(void **state)
{
    fixture *f = *state;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 2 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(f->rt, "capped", &cfg, &pool));
    void *p, *q = NULL;
    SP(sp_alloc(pool, &p, 580 * KiB, fx.a));
    assert_int_equal(sp_alloc(pool, &q, 1536 * KiB, fx.a), SP_ERR_LIMIT);
    SP(sp_free(pool, p, fx.a));
    SP(sp_alloc(pool, &q, 2 * MiB, fx.a)); /* exactly the limit */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 2 * MiB);
    assert_int_equal(st.active.current, 2 * MiB);
    assert_exact(st);
    SP(sp_free(pool, q, fx.a));
    SP(sp_pool_destroy(pool));
}

/* ---- released streams ---- */

/* 20000 streams used and released: each leaves a tombstone of a few hundred bytes (its frees'
 * tags), not its bins, and a stats read visits only the streams in use. */
static void released_streams_leave_small_tombstones(void **state)
{
    fixture *f = *state;
    enum { N = 20000 };
    cudaStream_t keep = new_stream(); /* one stream in use throughout */
    void *p;
    SP(sp_alloc(f->pool, &p, 4 * KiB, keep));
    size_t host_before = mallinfo2().uordblks;
    for (int i = 0; i < N; i++) {
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        void *q;
        SP(sp_alloc(f->pool, &q, 4 * KiB, s));
        SP(sp_free(f->pool, q, s));
        SP(sp_stream_release(f->rt, s));
        CK(cudaStreamDestroy(s));
    }
    size_t host_after = mallinfo2().uordblks;
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.streams, 1);
    assert_int_equal(st.released_streams, N);
    assert_int_equal(st.frees, N);
    assert_int_equal(st.allocs, N + 1);
    assert_int_equal(st.active.current, 4 * KiB);
    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(f->rt, &rst));
    assert_int_equal(rst.streams, 1);
    assert_int_equal(rst.released_streams, N);
    size_t per_stream = (host_after - host_before) / N;
    print_message("# %d released streams: %zu bytes of host memory each (the emulator's "
                  "included)\n", N, per_stream);
    assert_true(per_stream < 1024); /* was over 8.5 KiB */
    SP(sp_free(f->pool, p, keep));
    drop_stream(f->rt, keep);
}

TEST_MAIN_WITHOUT_ALLOC_CONF("robust",
    FX_EXACT(exited_threads_caches_are_reused_and_trimmed),
    FX_EXACT(live_threads_cache_is_stolen_behind_its_fence),
    FX_EXACT(range_settled_by_coalescing_counts_as_reuse),
    FX_EXACT(cache_limit_lowers_reserved_memory),
    FX_EXACT(cache_limit_does_not_rescan_on_every_free),
    FX(cache_limit_counts_unflushed_hits),
    FX_EXACT(request_of_exactly_the_limit_fits),
    FX_EXACT(released_streams_leave_small_tombstones)
)
