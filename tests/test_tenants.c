/* Tenant isolation on a device of known size (cudasim only): a noisy neighbour, reclaim across
 * pools, limits, the out-of-memory callback and report, and random driver failures. The key
 * figures are printed as TAP comments ("# ..."). One test holds a thread inside the driver's
 * allocation (an interposed cudaMallocFromPoolAsync, which passes every other call through). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"
#include "support/hold_point.h"

static const uint64_t MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

static sp_runtime *runtime_on_device_of(uint64_t bytes)
{
    CK(cudasimSetDeviceMemory(0, bytes));
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0; /* exact peaks for the figures below */
    sp_runtime *rt;
    rt = track_runtime(0, &cfg);
    return rt;
}

/* 4 GiB device; A: reserve 1 GiB, limit 2 GiB; B: no reservation. B fills the device with cached
 * and then live memory; A still gets its reservation; B's growth reclaims B's own cache, never
 * A's reservation. */
static void noisy_neighbour(void **state)
{
    (void)state;
    sp_pool_config ca = SP_POOL_CONFIG_INIT, cb = SP_POOL_CONFIG_INIT;
    ca.reserve = 1 * GiB;
    ca.limit = 2 * GiB;
    ca.priority = 10;
    sp_pool *a, *b;
    SP(sp_pool_create(fx.rt, "A", &ca, &a));
    SP(sp_pool_create(fx.rt, "B", &cb, &b));
    cudaStream_t sa = new_stream(), sb = new_stream();

    /* B fills what the device has left with 256 MiB blocks, and frees them: all cached */
    void *blk[32];
    int n = 0;
    while (n < 32 && sp_alloc(b, &blk[n], 256 * MiB, sb) == SP_OK)
        n++;
    assert_int_equal(n, 12); /* 4 GiB - A's 1 GiB */
    for (int i = 0; i < n; i++)
        SP(sp_free(b, blk[i], sb));
    assert_int_equal(stats_of(b).cached.current, 3 * GiB);

    /* B now asks for live memory of another size: its own cache makes room */
    void *live[32];
    int m = 0;
    int rc;
    while (m < 32 && (rc = sp_alloc(b, &live[m], 384 * MiB, sb)) == SP_OK)
        m++;
    assert_int_equal(rc, SP_ERR_OUT_OF_MEMORY);
    assert_int_equal(m, 8); /* 3 GiB / 384 MiB: everything but A's reservation */
    sp_stats sbst = stats_of(b);
    assert_int_equal(sbst.requested.current, 8 * 384 * MiB);
    assert_int_equal(sbst.cached.current, 0);
    assert_int_equal(sbst.reclaimed_bytes, 0); /* its own cache went back for its own OOMs:
                                                  * no other pool reclaimed it */
    assert_int_equal(sbst.ooms, 2); /* the 13th block of the fill, and the 9th live one */
    assert_true(sbst.oom_retries >= 1);

    /* A's reservation is untouched: it allocates all of it on a full device */
    void *pa[4];
    for (int i = 0; i < 4; i++)
        SP(sp_alloc(a, &pa[i], 256 * MiB, sa));
    sp_stats sast = stats_of(a);
    assert_int_equal(sast.requested.current, 1 * GiB);
    assert_int_equal(sast.reclaims, 0);
    assert_int_equal(sast.pool_reserved, 1 * GiB);
    void *more;
    assert_int_equal(sp_alloc(a, &more, 256 * MiB, sa), SP_ERR_OUT_OF_MEMORY); /* B is all live */
    print_message("# noisy neighbour: B cached 3072 MiB, then %d x 384 MiB live after giving "
                  "back %llu MiB of its own cache; A got its 1024 MiB reservation on a full "
                  "device (A reclaims: %llu)\n",
                  m, (unsigned long long)(sbst.reclaimed_bytes / MiB),
                  (unsigned long long)sast.reclaims);
    for (int i = 0; i < 4; i++)
        SP(sp_free(a, pa[i], sa));
    for (int i = 0; i < m; i++)
        SP(sp_free(b, live[i], sb));
    drop_stream(fx.rt, sa);
    drop_stream(fx.rt, sb);
}

/* n blocks of 256 MiB allocated on s and freed: the pool caches n x 256 MiB. */
static void cache_quarters(sp_pool *pool, int n, cudaStream_t s)
{
    void *blk[16];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++)
        SP(sp_alloc(pool, &blk[i], 256 * MiB, s));
    for (int i = 0; i < n; i++)
        SP(sp_free(pool, blk[i], s));
}

/* X holds 3 GiB of idle cache on a 4 GiB device; Y's 2 GiB request succeeds by reclaiming it. */
static void reclaim_across_pools(void **state)
{
    (void)state;
    sp_pool_config cx = SP_POOL_CONFIG_INIT;
    cx.priority = -1; /* reclaimed before the default pool (priority 0) */
    sp_pool *x, *y;
    SP(sp_pool_create(fx.rt, "X", &cx, &x));
    SP(sp_pool_create(fx.rt, "Y", NULL, &y));
    cudaStream_t sx = new_stream(), sy = new_stream();
    cache_quarters(x, 12, sx);
    sp_stats before = stats_of(x);
    assert_int_equal(before.cached.current, 3 * GiB);
    void *big;
    SP(sp_alloc(y, &big, 2 * GiB, sy));
    sp_stats sx1 = stats_of(x), sy1 = stats_of(y);
    assert_int_equal(sx1.reclaims, 1);
    assert_int_equal(sx1.reclaimed_bytes, 3 * GiB);
    assert_int_equal(sx1.cached.current, 0);
    assert_int_equal(sx1.pool_reserved, 0);
    assert_int_equal(sy1.requested.current, 2 * GiB);
    assert_int_equal(sy1.oom_retries, 2); /* after its own (empty) cache, after X's */
    assert_int_equal(sy1.ooms, 0);
    print_message("# reclaim: X cached %llu MiB -> %llu MiB (reclaims %llu, reclaimed %llu MiB); "
                  "Y got 2048 MiB after %llu retries\n",
                  (unsigned long long)(before.cached.current / MiB),
                  (unsigned long long)(sx1.cached.current / MiB), (unsigned long long)sx1.reclaims,
                  (unsigned long long)(sx1.reclaimed_bytes / MiB),
                  (unsigned long long)sy1.oom_retries);
    SP(sp_free(y, big, sy));
    drop_stream(fx.rt, sx);
    drop_stream(fx.rt, sy);
}

/* Until the host has observed it, a free is outstanding for the driver (rule 13): stream
 * queries and the worker having run it do not count. */
static void wait_until_idle(cudaStream_t s)
{
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady)
        sched_yield(); /* a condition, not a duration: the stream's worker is finishing */
    CK(e);
}

/* X gives a huge segment back to the driver on sx, at the free of another size than the
 * stream's last, and sx's frees then settle by a query: sx runs but is never observed by the
 * host, and the 4 MiB block freed on it serves the same request on sx2. Returns that block. */
static void *give_back_settled_by_a_query(sp_pool *x, cudaStream_t sx, cudaStream_t sx2)
{
    void *a, *b, *m, *m2;
    SP(sp_alloc(x, &a, 1 * GiB, sx));
    SP(sp_alloc(x, &m, 4 * MiB, sx));
    SP(sp_free(x, a, sx));                 /* the stream's last huge free: kept */
    SP(sp_alloc(x, &b, 2 * GiB, sx));      /* a's pages go back on sx and into b */
    SP(sp_free(x, b, sx));                 /* another size: back to the driver at once, on sx */
    SP(sp_free(x, m, sx));
    wait_until_idle(sx);                   /* run, but never observed by the host */
    SP(sp_alloc(x, &m2, 4 * MiB, sx2));    /* asks about sx: idle, so settled by the query */
    assert_ptr_equal(m2, m);
    return m2;
}

/* X gives a huge segment back to the driver at its free (another size than the stream's last),
 * and its stream's frees then settle by a query, not a synchronize. Y's request needs those
 * pages: the reclaim must synchronize X's stream, or X's cudaMemPool cannot release them. */
static void reclaim_observes_segments_given_back_on_a_stream(void **state)
{
    (void)state;
    sp_pool_config cx = SP_POOL_CONFIG_INIT;
    cx.priority = -1;
    sp_pool *x, *y;
    SP(sp_pool_create(fx.rt, "X", &cx, &x));
    SP(sp_pool_create(fx.rt, "Y", NULL, &y));
    cudaStream_t sx = new_stream(), sx2 = new_stream(), sy = new_stream();
    void *big;
    void *m2 = give_back_settled_by_a_query(x, sx, sx2);
    sp_stats st = stats_of(x);
    assert_int_equal(st.held.current, 4 * MiB);
    assert_int_equal(st.pool_reserved, 2 * GiB + 4 * MiB);
    SP(sp_alloc(y, &big, 3 * GiB, sy));    /* needs the 2 GiB X's cudaMemPool kept */
    st = stats_of(x);
    assert_int_equal(st.reclaims, 1);
    assert_int_equal(st.pool_reserved, 4 * MiB); /* m2's segment, live */
    assert_int_equal(stats_of(y).requested.current, 3 * GiB);
    SP(sp_free(y, big, sy));
    SP(sp_free(x, m2, sx2));
    drop_stream(fx.rt, sx);
    drop_stream(fx.rt, sx2);
    drop_stream(fx.rt, sy);
}

/* A stream that gave a segment back to the driver and is then released cannot be synchronized
 * any more: the trim synchronizes the fence recorded behind that give-back at release, once,
 * with no device synchronize. Later trims have nothing of it left to observe: no synchronize,
 * no skipped step. */
static void released_stream_give_back_observed_once(void **state)
{
    (void)state;
    cudaStream_t sx = new_stream(), sx2 = new_stream();
    sp_pool *x;
    SP(sp_pool_create(fx.rt, "X", NULL, &x));
    void *m2 = give_back_settled_by_a_query(x, sx, sx2);
    drop_stream(fx.rt, sx);                /* released with its give-backs unobserved */
    assert_int_equal(stats_of(x).pool_reserved, 2 * GiB + 4 * MiB);
    cudasimResetCallCounts();
    SP(sp_pool_trim(x, 0));                /* sx cannot be named: its release's fence can */
    assert_int_equal(cudasimCallCount("cudaEventSynchronize"), 1);
    assert_int_equal(cudasimCallCount("cudaDeviceSynchronize"), 0);
    sp_stats st = stats_of(x);
    assert_int_equal(st.pool_reserved, 4 * MiB); /* m2's segment, live */
    uint64_t skipped = st.skipped_steps;
    cudasimResetCallCounts();
    SP(sp_pool_trim(x, 0));                /* nothing left unobserved */
    assert_int_equal(cudasimCallCount("cudaEventSynchronize"), 0);
    assert_int_equal(cudasimCallCount("cudaDeviceSynchronize"), 0);
    st = stats_of(x);
    assert_int_equal(st.skipped_steps, skipped);
    assert_int_equal(st.pool_reserved, 4 * MiB);
    SP(sp_free(x, m2, sx2));
    drop_stream(fx.rt, sx2);
}

static void limit_rejects_then_recovers(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "capped", 64 * MiB, 0, UINT64_MAX);
    void *p, *q = (void *)0x9;
    SP(sp_alloc(pool, &p, 48 * MiB, fx.a));
    assert_int_equal(sp_alloc(pool, &q, 32 * MiB, fx.a), SP_ERR_LIMIT);
    assert_ptr_equal(q, (void *)0x9);
    assert_int_equal(sp_alloc(pool, &q, 65 * MiB, fx.a), SP_ERR_NEVER_FITS); /* over it alone */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.limit_rejections, 2);
    assert_int_equal(st.ooms, 0);
    assert_int_equal(st.requested.current, 48 * MiB);
    assert_int_equal(st.held.current, 48 * MiB); /* nothing leaked */
    SP(sp_free(pool, p, fx.a));
    SP(sp_alloc(pool, &q, 44 * MiB, fx.a)); /* reuses the free 48 MiB segment (within 1/8) */
    assert_ptr_equal(q, p);
    st = stats_of(pool);
    assert_int_equal(st.held.current, 48 * MiB);
    assert_int_equal(st.driver_allocs, 1);
    SP(sp_free(pool, q, fx.a));
    uint64_t retries = st.limit_retries;
    SP(sp_alloc(pool, &q, 60 * MiB, fx.a)); /* does not fit: the cached 48 MiB goes back first */
    st = stats_of(pool);
    assert_int_equal(st.held.current, 60 * MiB);
    assert_int_equal(st.limit_retries, retries); /* a miss gave it back: no limit refusal */
    assert_int_equal(st.reclaimed_bytes, 0); /* no other pool's out-of-memory */
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.driver_frees, 1);
    assert_true(st.held.peak <= 64 * MiB);
    SP(sp_free(pool, q, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    uint64_t reserved = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemCurrent, &reserved));
    assert_true(reserved <= 64 * MiB); /* not above the limit past a synchronize */
}

/* At its limit, a pool whose free ranges would hold the request once merged: the stream's own
 * freed range, still pending, next to another stream's settled one. The ladder's last rung
 * synchronizes every stream of the pool (settling both) and must then merge and reuse them,
 * not only ask the driver for more: the request succeeds, with no driver call and no
 * rejection. (A plain retry of the same call succeeded where the first one failed.) */
static void limit_reuses_ranges_its_synchronize_settled(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "merge-at-limit", 8 * MiB, 0, UINT64_MAX);
    void *whole, *x, *y, *z, *p = (void *)0x9;
    SP(sp_alloc(pool, &whole, 8 * MiB, fx.a));        /* one 8 MiB segment: the whole limit */
    SP(sp_free(pool, whole, fx.a));
    SP(sp_alloc(pool, &x, 3 * MiB, fx.a));            /* [0, 3) */
    SP(sp_alloc(pool, &y, 2 * MiB, fx.a));            /* [3, 5) */
    SP(sp_alloc(pool, &z, 3 * MiB, fx.a));            /* [5, 8) */
    assert_ptr_equal(y, (char *)x + 3 * MiB);
    assert_ptr_equal(z, (char *)x + 5 * MiB);
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_free(pool, z, fx.b));                       /* b is ordered after a's use of z */
    SP(sp_pool_trim(pool, 8 * MiB));               /* keeps everything; z's free is settled */
    SP(sp_free(pool, y, fx.a));                       /* pending on a, next to z */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 8 * MiB);
    assert_int_equal(st.driver_allocs, 1);
    SP(sp_alloc(pool, &p, 5 * MiB, fx.a));            /* y and z merged */
    assert_ptr_equal(p, y);
    st = stats_of(pool);
    assert_int_equal(st.limit_rejections, 0);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.held.current, 8 * MiB);
    assert_int_equal(st.active.current, 8 * MiB);
    assert_int_equal(st.requested.current, 8 * MiB);
    SP(sp_free(pool, p, fx.a));
    SP(sp_free(pool, x, fx.a));
}

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    void **blocks;
    int n, calls;
    bool free_some;
} oom_ctx;

static int on_oom(sp_pool *pool, size_t bytes, cudaStream_t stream, void *user)
{
    oom_ctx *c = user;
    (void)bytes, (void)stream;
    c->calls++;
    if (!c->free_some || pool != c->pool)
        return 0;
    for (int i = 0; i < 2 && c->n > 0; i++)
        sp_free(c->pool, c->blocks[--c->n], c->stream);
    return 1;
}

static void oom_callback_and_report(void **state)
{
    (void)state;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 0; /* no limit: the device runs out (a larger one is clamped to the device) */
    cfg.priority = 3;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "model\"7", &cfg, &pool));
    cudaStream_t s = new_stream();
    void *blocks[8];
    for (int i = 0; i < 7; i++)
        SP(sp_alloc(pool, &blocks[i], 512 * MiB, s));
    oom_ctx ctx = {pool, s, blocks, 7, 0, true};
    SP(sp_runtime_set_oom_callback(fx.rt, on_oom, &ctx));
    void *big;
    SP(sp_alloc(pool, &big, 1 * GiB, s)); /* the callback frees two blocks */
    assert_int_equal(ctx.calls, 1);
    assert_int_equal(ctx.n, 5);

    ctx.free_some = false;
    void *too_big = (void *)0x1;
    assert_int_equal(sp_alloc(pool, &too_big, 2 * GiB, s), SP_ERR_OUT_OF_MEMORY);
    assert_ptr_equal(too_big, (void *)0x1);
    assert_int_equal(ctx.calls, 2);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.failures, 1);
    assert_string_equal(r.pool, "model\"7");
    assert_int_equal(r.bytes, 2 * GiB);
    assert_ptr_equal(r.stream, s);
    assert_int_equal(r.device_total, 4 * GiB);
    assert_int_equal(r.npools, 1); /* the default pool, never used, is not in the report */
    const sp_oom_pool *mine = &r.pools[0];
    assert_int_equal(mine->requested, 5 * 512 * MiB + 1 * GiB);
    assert_int_equal(mine->active, 5 * 512 * MiB + 1 * GiB);
    assert_int_equal(mine->cached, 0);
    assert_int_equal(mine->limit, 0);
    assert_int_equal(mine->priority, 3);
    assert_true(mine->reserved >= mine->active);
    char json[4096];
    size_t len = sp_oom_report_json(&r, json, sizeof json);
    assert_true(len < sizeof json);
    assert_non_null(strstr(json, "\"pool\":\"model\\\"7\""));
    assert_non_null(strstr(json, "\"bytes\":2147483648"));
    assert_non_null(strstr(json, "\"requested\":3758096384"));
    print_message("# oom report: %s\n", json);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.ooms, 1);
    sp_oom_report empty = {.size = sizeof empty};
    sp_runtime *fresh = runtime_on_device_of(4 * GiB);
    SP(sp_runtime_last_oom(fresh, &empty));
    assert_int_equal(empty.failures, 0);
    destroy_runtime(fresh);
    for (int i = 0; i < ctx.n; i++)
        SP(sp_free(pool, blocks[i], s));
    SP(sp_free(pool, big, s));
    drop_stream(fx.rt, s);
}

/* Random driver failures during a threaded stress run: errors are reported, nothing is lost,
 * and the figures add up. */
typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    unsigned seed;
    long ooms, failures;
    uint64_t live_bytes;
} fault_worker;

static void *fault_stress(void *arg)
{
    fault_worker *w = arg;
    void *held[16] = {0};
    size_t size[16] = {0};
    unsigned x = w->seed;
    for (int i = 0; i < 600; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % 16);
        if (held[k]) {
            if (sp_free(w->pool, held[k], w->stream) != SP_OK)
                w->failures++;
            w->live_bytes -= size[k];
            held[k] = NULL;
        } else {
            size[k] = 1 + (x >> 12) % (4 * MiB);
            int rc = sp_alloc(w->pool, &held[k], size[k], w->stream);
            if (rc == SP_OK)
                w->live_bytes += size[k];
            else if (rc == SP_ERR_OUT_OF_MEMORY)
                w->ooms++, held[k] = NULL;
            else
                w->failures++, held[k] = NULL;
        }
    }
    for (int k = 0; k < 16; k++)
        if (held[k]) {
            if (sp_free(w->pool, held[k], w->stream) != SP_OK)
                w->failures++;
            w->live_bytes -= size[k];
        }
    return NULL;
}

/* Runs FAULT_WORKERS fault_stress threads on pool, each on a stream of its own (w[i].stream,
 * the caller's to drop) with seed seed_step * (i + 1), to their end under the faults injected,
 * then clears the faults. Every worker ends with no failure (best-effort steps never fail a
 * request) and nothing live; returns the SP_ERR_OUT_OF_MEMORY they met. */
enum { FAULT_WORKERS = 3 };

static long run_fault_workers(sp_pool *pool, unsigned seed_step, fault_worker *w)
{
    pthread_t t[FAULT_WORKERS];
    for (int i = 0; i < FAULT_WORKERS; i++) {
        w[i] = (fault_worker){pool, new_stream(), seed_step * (unsigned)(i + 1), 0, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, fault_stress, &w[i]), 0);
    }
    long ooms = 0;
    for (int i = 0; i < FAULT_WORKERS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].live_bytes, 0);
        ooms += w[i].ooms;
    }
    cudasimClearFaults();
    return ooms;
}

/* The end of a faults test: the workers' streams dropped and the runtime destroyed, after which
 * the device has every byte back (no driver memory lost). */
static void end_fault_workers(sp_runtime *rt, fault_worker *w)
{
    for (int i = 0; i < FAULT_WORKERS; i++)
        drop_stream(rt, w[i].stream);
    destroy_runtime(rt);
    CK(cudaDeviceSynchronize());
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total); /* no driver memory lost */
}

static void random_driver_failures(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(16 * GiB);
    sp_pool *pool;
    SP(sp_pool_create(rt, "faulty", NULL, &pool));
    /* 50%: a miss retries after giving cache back and reclaiming, so failures must be common
     * for some to survive the whole ladder */
    CK(cudasimInjectFaultRate("cudaMallocFromPoolAsync", 500000, cudaErrorMemoryAllocation, 11));
    fault_worker w[FAULT_WORKERS];
    long ooms = run_fault_workers(pool, 17, w);
    sp_stats st = stats_of(pool);
    assert_true(ooms > 0);
    assert_int_equal(st.ooms, ooms);
    assert_int_equal(st.requested.current, 0); /* requested = the sum of live allocations */
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.bad_frees, 0);
    assert_int_equal(st.allocs, st.frees);
    assert_int_equal(st.held.current, st.cached.current); /* every block accounted for */
    print_message("# random driver failures: %ld allocations failed with SP_ERR_OUT_OF_MEMORY "
                  "out of %llu attempts; driver allocations %llu, retries %llu\n",
                  ooms, (unsigned long long)(st.allocs + (uint64_t)ooms),
                  (unsigned long long)st.driver_allocs, (unsigned long long)st.oom_retries);
    end_fault_workers(rt, w);
}

/* Faults at every CUDA call the library makes on its own behalf (allocations, frees given back,
 * fences, queries, waits), from 3 threads under the WAIT policy and a cache limit that gives
 * memory back on frees: only allocations the driver refused fail, nothing is lost, and after
 * the faults stop everything goes back to the device. */
static void random_faults_everywhere_lose_nothing(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(16 * GiB);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = SP_CROSS_STREAM_WAIT;
    cfg.cache_limit = 2 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "faulty", &cfg, &pool));
    static const char *apis[] = {"cudaFreeAsync", "cudaEventRecord", "cudaEventQuery",
                                 "cudaStreamQuery", "cudaStreamWaitEvent"};
    CK(cudasimInjectFaultRate("cudaMallocFromPoolAsync", 50000, cudaErrorMemoryAllocation, 5));
    for (unsigned i = 0; i < sizeof apis / sizeof apis[0]; i++)
        CK(cudasimInjectFaultRate(apis[i], 50000, cudaErrorLaunchFailure, 7 + i));
    fault_worker w[FAULT_WORKERS];
    long ooms = run_fault_workers(pool, 29, w);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.ooms, ooms);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.allocs, st.frees);
    assert_int_equal(st.held.current, st.cached.current);
    assert_int_equal(st.held.current, st.segment_bytes + st.slab_bytes);
    print_message("# random faults everywhere: %ld OOMs, %llu skipped steps, %llu refused "
                  "give-backs\n", ooms, (unsigned long long)st.skipped_steps,
                  (unsigned long long)st.give_back_failures);
    end_fault_workers(rt, w);
}

static int callback_calls;
static int count_callback(sp_pool *pool, size_t bytes, cudaStream_t stream, void *user)
{
    (void)pool, (void)bytes, (void)stream, (void)user;
    callback_calls++;
    return 1;
}

/* A request larger than the whole device fails at once with SP_ERR_OUT_OF_MEMORY: no other
 * pool's cache is reclaimed and the callback is not called. */
static void larger_than_device_fails_fast(void **state)
{
    (void)state;
    sp_pool *x, *y;
    SP(sp_pool_create(fx.rt, "X", NULL, &x));
    SP(sp_pool_create(fx.rt, "Y", NULL, &y));
    SP(sp_runtime_set_oom_callback(fx.rt, count_callback, NULL));
    void *p, *q = (void *)0x7;
    SP(sp_alloc(x, &p, 1 * GiB, fx.a));
    SP(sp_free(x, p, fx.a));
    assert_int_equal(sp_alloc(y, &q, 5 * GiB, fx.a), SP_ERR_OUT_OF_MEMORY);
    assert_ptr_equal(q, (void *)0x7);
    assert_int_equal(callback_calls, 0);
    sp_stats sx = stats_of(x), sy = stats_of(y);
    assert_int_equal(sx.cached.current, 1 * GiB); /* X untouched */
    assert_int_equal(sx.reclaims, 0);
    assert_int_equal(sy.ooms, 1);
    assert_int_equal(sy.oom_retries, 0);
    assert_int_equal(sy.held.current, 0);
    assert_int_equal(sy.held.total, 0); /* the refused claim left no trace */
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.bytes, 5 * GiB);
}

/* A limit that is not a multiple of the driver's 2 MiB pages is the limit in whole pages (issue
 * 20: what the device gives): a request of all of them succeeds; one more byte is SP_ERR_LIMIT,
 * with a report and the callback, and no other pool is reclaimed for it. */
static void limit_between_driver_pages(void **state)
{
    (void)state;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 10 * MiB + 12345;
    sp_pool *a, *bystander;
    SP(sp_pool_create(fx.rt, "A", &cfg, &a));
    SP(sp_pool_create(fx.rt, "B", NULL, &bystander));
    SP(sp_runtime_set_oom_callback(fx.rt, count_callback, NULL));
    callback_calls = 0;
    cudaStream_t s = new_stream();
    void *big, *p, *q = (void *)0x7;
    SP(sp_alloc(bystander, &big, 1000 * MiB, s)); /* the device is nearly B's */
    SP(sp_free(bystander, big, s));
    assert_int_equal(sp_alloc(a, &q, 10 * MiB + 12345, s), SP_ERR_NEVER_FITS); /* past 10 MiB, the limit in force: never */
    SP(sp_alloc(a, &p, 10 * MiB, s));
    assert_int_equal(sp_alloc(a, &q, 1, s), SP_ERR_LIMIT);
    assert_ptr_equal(q, (void *)0x7);
    assert_int_equal(callback_calls, 1); /* called, and its retry refused again */
    sp_stats sa = stats_of(a), sb = stats_of(bystander);
    assert_int_equal(sa.limit_rejections, 2);
    assert_int_equal(sa.ooms, 0);
    assert_int_equal(sa.held.current, 10 * MiB);
    assert_int_equal(sa.held.peak, 10 * MiB);
    assert_int_equal(sb.reclaims, 0);
    assert_int_equal(sb.cached.current, 1000 * MiB);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.failures, 2);
    assert_int_equal(r.status, SP_ERR_LIMIT);
    assert_string_equal(r.pool, "A");
    assert_int_equal(r.bytes, 1);
    assert_int_equal(r.rounded, 256);
    char json[8192];
    assert_true(sp_oom_report_json(&r, json, sizeof json) < sizeof json);
    assert_non_null(strstr(json, "\"status\":\"SP_ERR_LIMIT\",\"reason\":\"the pool's limit would "
                                 "be exceeded now (retry after frees)\",\"rounded\":256,"));
    SP(sp_free(a, p, s));
    drop_stream(fx.rt, s);
}

typedef struct {
    sp_pool *other;
    void *block;
    cudaStream_t stream;
    int calls;
} free_other_ctx;

static int free_other_pool(sp_pool *pool, size_t bytes, cudaStream_t stream, void *user)
{
    free_other_ctx *c = user;
    (void)pool, (void)bytes, (void)stream;
    c->calls++;
    if (!c->block)
        return 0;
    int rc = sp_free(c->other, c->block, c->stream); /* cached in the other pool */
    c->block = NULL;
    return rc == SP_OK;
}

/* The callback frees another pool's block: after its "retry", that pool's freshly cached memory
 * goes back to the device too, and the retry succeeds. The report keeps the request's own size
 * beside its rounding. */
static void oom_callback_retry_reclaims_every_pool(void **state)
{
    (void)state;
    sp_pool *x, *y;
    SP(sp_pool_create(fx.rt, "X", NULL, &x));
    SP(sp_pool_create(fx.rt, "Y", NULL, &y));
    free_other_ctx ctx = {x, NULL, fx.a, 0};
    SP(sp_alloc(x, &ctx.block, 600 * MiB, fx.a));
    SP(sp_runtime_set_oom_callback(fx.rt, free_other_pool, &ctx));
    void *p;
    SP(sp_alloc(y, &p, 700 * MiB, fx.a));
    assert_int_equal(ctx.calls, 1);
    sp_stats sx = stats_of(x), sy = stats_of(y);
    assert_int_equal(sx.held.current, 0);
    assert_int_equal(sy.held.current, 700 * MiB);
    assert_int_equal(sy.ooms, 0);
    void *q = NULL;
    assert_int_equal(sp_alloc(y, &q, 400 * MiB + 1, fx.a), SP_ERR_OUT_OF_MEMORY);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.status, SP_ERR_OUT_OF_MEMORY);
    assert_int_equal(r.bytes, 400 * MiB + 1);
    assert_int_equal(r.rounded, 400 * MiB + 512);
    SP(sp_free(y, p, fx.a));
}

/* A request the driver refuses changes no figure: no peak, no total, in the pool or the
 * runtime (before, a refused claim left held.peak above the device's size). */
static void refused_request_changes_no_figure(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "P", NULL, &pool));
    void *p, *q = NULL;
    SP(sp_alloc(pool, &p, 200 * MiB, fx.a));
    sp_stats before = stats_of(pool), rt_before = {.size = sizeof rt_before};
    SP(sp_runtime_stats(fx.rt, &rt_before));
    assert_int_equal(sp_alloc(pool, &q, 900 * MiB, fx.a), SP_ERR_OUT_OF_MEMORY);
    sp_stats after = stats_of(pool), rt_after = {.size = sizeof rt_after};
    SP(sp_runtime_stats(fx.rt, &rt_after));
    assert_int_equal(after.held.current, 200 * MiB);
    assert_int_equal(after.held.peak, before.held.peak);
    assert_int_equal(after.held.total, before.held.total);
    assert_int_equal(after.cached.peak, before.cached.peak);
    assert_int_equal(after.requested.peak, before.requested.peak);
    assert_int_equal(rt_after.held.peak, rt_before.held.peak);
    assert_int_equal(rt_after.held.total, rt_before.held.total);
    assert_int_equal(rt_after.held.current, rt_before.held.current);
    SP(sp_free(pool, p, fx.a));
}

/* ---- holding a thread inside the driver's allocation ---- */

static hold_point in_malloc = HOLD_POINT_INIT;
static _Thread_local bool hold_next_malloc; /* armed in the allocating thread only */

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t mem_pool,
                                    cudaStream_t stream)
{
    static cudaError_t (*real)(void **, size_t, cudaMemPool_t, cudaStream_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaMallocFromPoolAsync");
    if (hold_next_malloc) {
        hold_next_malloc = false;
        hold_point_here(&in_malloc);
    }
    return real(ptr, size, mem_pool, stream);
}

static int teardown_held_malloc(void **state)
{
    hold_point_let_go(&in_malloc); /* a failed assertion left the allocating thread held */
    return fx_teardown(state);
}


static void *alloc_held_in_driver(void *arg)
{
    thread_call *a = arg;
    hold_next_malloc = true;
    a->rc = sp_alloc(a->pool, &a->ptr, 900 * MiB, a->stream);
    hold_next_malloc = false;
    return NULL;
}

/* The same refused request, with the stats read while the driver is being asked: the bytes the
 * pool claimed of its limit before asking are not held yet, so no read counts them, as held or
 * as cached, currently or at their peak. Before, the claim moved the held figures themselves:
 * this read showed 1100 MiB held (900 of them cached) and a peak that the next read, after the
 * refusal, took back. */
static void read_during_a_refused_request_counts_no_claim(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "P", NULL, &pool));
    void *p;
    SP(sp_alloc(pool, &p, 200 * MiB, fx.a));
    sp_stats before = stats_of(pool), rt_before = {.size = sizeof rt_before};
    SP(sp_runtime_stats(fx.rt, &rt_before));
    assert_int_equal(before.held.current, 200 * MiB);

    thread_call a = {.pool = pool, .stream = fx.a, .rc = -1};
    hold_point_reset(&in_malloc);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, alloc_held_in_driver, &a), 0);
    hold_point_wait(&in_malloc); /* inside the driver's allocation */

    sp_stats during = stats_of(pool), rt_during = {.size = sizeof rt_during};
    SP(sp_runtime_stats(fx.rt, &rt_during)); /* the driver has not answered the claim yet */
    assert_int_equal(during.held.current, 200 * MiB);
    assert_int_equal(during.held.peak, before.held.peak);
    assert_int_equal(during.cached.current, before.cached.current);
    assert_int_equal(during.cached.peak, before.cached.peak);
    assert_int_equal(rt_during.held.current, rt_before.held.current);
    assert_int_equal(rt_during.held.peak, rt_before.held.peak);

    hold_point_let_go(&in_malloc);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(a.rc, SP_ERR_OUT_OF_MEMORY); /* 200 + 900 MiB on a 1 GiB device */
    sp_stats after = stats_of(pool);
    assert_int_equal(after.held.current, 200 * MiB);
    assert_int_equal(after.held.peak, before.held.peak);
    assert_int_equal(after.held.total, before.held.total);
    assert_int_equal(after.cached.peak, before.cached.peak);
    SP(sp_free(pool, p, fx.a));
}

/* A pool's unused reservation is no part of what its limit refuses: A (reserve 1 GiB, limit
 * 2 GiB) holds nothing and asks for 1.5 GiB while B's cache fills the device. The driver remaps
 * A's free reserved pages into the request, so only 0.5 GiB more is needed: B's cache goes back
 * (step 3) and A gets it. Judged by A's reserved bytes (1 GiB + 1.5 GiB > 2 GiB), the device's
 * out-of-memory was taken for A's limit: SP_ERR_LIMIT, and B was never asked. */
static void free_reservation_is_not_counted_against_the_limit(void **state)
{
    (void)state;
    sp_pool_config ca = SP_POOL_CONFIG_INIT;
    ca.reserve = 1 * GiB;
    ca.limit = 2 * GiB;
    ca.priority = 10;
    sp_pool *a, *b;
    SP(sp_pool_create(fx.rt, "A", &ca, &a));
    SP(sp_pool_create(fx.rt, "B", NULL, &b));
    cudaStream_t sa = new_stream(), sb = new_stream();
    void *p = NULL;
    cache_quarters(b, 12, sb);
    assert_int_equal(stats_of(b).cached.current, 3 * GiB);
    SP(sp_alloc(a, &p, 1536 * MiB, sa));
    sp_stats st_a = stats_of(a), st_b = stats_of(b);
    assert_int_equal(st_a.limit_rejections, 0);
    assert_int_equal(st_a.ooms, 0);
    assert_int_equal(st_a.requested.current, 1536 * MiB);
    assert_int_equal(st_a.held.current, 1536 * MiB);
    assert_int_equal(st_a.pool_reserved, 1536 * MiB);
    assert_int_equal(st_b.reclaims, 1);
    assert_int_equal(st_b.cached.current, 0);
    assert_int_equal(st_b.reclaimed_bytes, 3 * GiB);
    SP(sp_free(a, p, sa));
    drop_stream(fx.rt, sa);
    drop_stream(fx.rt, sb);
}

/* A capture's allocation refused by the pool's limit is a limit rejection like any other: the
 * report says so (failures, status, pool, sizes, stream), as the counter does. */
static void capture_limit_rejection_is_reported(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "graphs", 8 * MiB, 0, UINT64_MAX);
    void *p, *q = (void *)0x5;
    SP(sp_stream_capture_begin(fx.rt, fx.a));
    CK(cudaStreamBeginCapture(fx.a, cudaStreamCaptureModeGlobal));
    SP(sp_alloc(pool, &p, 6 * MiB, fx.a));
    assert_int_equal(sp_alloc(pool, &q, 4 * MiB, fx.a), SP_ERR_LIMIT);
    assert_ptr_equal(q, (void *)0x5);
    SP(sp_free(pool, p, fx.a));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(fx.a, &g));
    SP(sp_stream_capture_end(fx.rt, fx.a));
    CK(cudaGraphDestroy(g));
    assert_int_equal(stats_of(pool).limit_rejections, 1);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.failures, 1);
    assert_int_equal(r.status, SP_ERR_LIMIT);
    assert_string_equal(r.pool, "graphs");
    assert_int_equal(r.bytes, 4 * MiB);
    assert_int_equal(r.rounded, 4 * MiB);
    assert_ptr_equal(r.stream, fx.a);
}

/* Reclaim goes up the priorities only as far as the request needs: on a 4 GiB device with 1 GiB
 * free, Y's 1.5 GiB request is met once L (priority -5) gave back its 0.75 GiB; H (priority 5)
 * keeps its 1.5 GiB cache. (Counting only what the victims gave back, never what the device
 * already had, H's cache went too.) */
static void reclaim_stops_below_higher_priorities_once_the_request_fits(void **state)
{
    (void)state;
    sp_pool_config cl = SP_POOL_CONFIG_INIT, ch = SP_POOL_CONFIG_INIT;
    cl.priority = -5;
    ch.priority = 5;
    sp_pool *l, *h, *y;
    SP(sp_pool_create(fx.rt, "L", &cl, &l));
    SP(sp_pool_create(fx.rt, "H", &ch, &h));
    SP(sp_pool_create(fx.rt, "Y", NULL, &y));
    cudaStream_t s = new_stream();
    void *live, *big;
    cache_quarters(h, 6, s);
    cache_quarters(l, 3, s);
    SP(sp_alloc(y, &live, 768 * MiB, s));
    SP(sp_alloc(y, &big, 1536 * MiB, s));
    sp_stats sl = stats_of(l), sh = stats_of(h);
    assert_int_equal(sl.reclaims, 1);
    assert_int_equal(sl.reclaimed_bytes, 768 * MiB);
    assert_int_equal(sl.cached.current, 0);
    assert_int_equal(sh.reclaims, 0);
    assert_int_equal(sh.reclaimed_bytes, 0);
    assert_int_equal(sh.cached.current, 1536 * MiB);
    assert_int_equal(stats_of(y).requested.current, 2304 * MiB);
    SP(sp_free(y, big, s));
    SP(sp_free(y, live, s));
    drop_stream(fx.rt, s);
}

/* ---- a long randomized run under faults at every CUDA call, at 0.5%, 2% and 5% ---- */

static bool usage_invariants_hold(const sp_stats *st)
{
    return st->held.current == st->active.current + st->cached.current &&
           st->held.peak >= st->held.current && st->active.peak >= st->active.current &&
           st->requested.peak >= st->requested.current &&
           st->cached.peak >= st->cached.current && st->cached.peak <= st->held.peak;
}

typedef struct {
    sp_runtime *rt;
    sp_pool *pools[2];
    unsigned seed;
    bool per_thread; /* on cudaStreamPerThread of short-lived threads of its own */
    long ooms, failures, ops;
} long_worker;

/* One stretch of random work on one stream: allocations of 256 B .. 6 MiB in two pools, frees
 * (some on a second stream), trims; everything freed at the end. */
static void long_stretch(long_worker *w, cudaStream_t s, cudaStream_t other, unsigned *x, int n)
{
    enum { K = 24 };
    void *held[K] = {0};
    int owner[K] = {0};
    for (int i = 0; i < n; i++) {
        *x = *x * 1103515245u + 12345u;
        int k = (int)((*x >> 8) % K), which = (int)((*x >> 20) & 1);
        w->ops++;
        if (held[k]) {
            if (sp_free(w->pools[owner[k]], held[k], (*x >> 21) % 4 == 0 ? other : s) != SP_OK)
                w->failures++;
            held[k] = NULL;
        } else if ((*x >> 24) % 64 == 0) {
            int rc = sp_pool_trim(w->pools[which], 0);
            if (rc != SP_OK && rc != SP_ERR_CUDA) /* a CUDA error is reported, nothing more */
                w->failures++;
        } else {
            size_t size = (*x >> 12) % 3 ? 256 + (*x >> 10) % (512 * 1024) : 1 + (*x >> 9) % (6 * MiB);
            int rc = sp_alloc(w->pools[which], &held[k], size, s);
            owner[k] = which;
            if (rc == SP_ERR_OUT_OF_MEMORY || rc == SP_ERR_LIMIT)
                w->ooms++, held[k] = NULL;
            else if (rc != SP_OK)
                w->failures++, held[k] = NULL;
        }
    }
    for (int k = 0; k < K; k++)
        if (held[k] && sp_free(w->pools[owner[k]], held[k], s) != SP_OK)
            w->failures++;
}

static void *long_per_thread(void *arg)
{
    long_worker *w = arg;
    unsigned x = w->seed;
    long_stretch(w, cudaStreamPerThread, cudaStreamPerThread, &x, 400);
    w->seed = x;
    return NULL; /* its cache goes to the pools at exit */
}

static void *long_worker_main(void *arg)
{
    long_worker *w = arg;
    unsigned x = w->seed;
    for (int round = 0; round < 6; round++) {
        if (w->per_thread) {
            pthread_t t;
            w->seed = x;
            if (pthread_create(&t, NULL, long_per_thread, w) != 0) {
                w->failures++;
                continue;
            }
            pthread_join(t, NULL);
            x = w->seed;
            continue;
        }
        cudaStream_t s, other;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
            cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) != cudaSuccess) {
            w->failures++;
            break;
        }
        long_stretch(w, s, other, &x, 400);
        /* the streams go; their frees stay behind final fences (or are settled later) */
        int rc1 = sp_stream_release(w->rt, s), rc2 = sp_stream_release(w->rt, other);
        if ((rc1 != SP_OK && rc1 != SP_ERR_CUDA) || (rc2 != SP_OK && rc2 != SP_ERR_CUDA))
            w->failures++;
        (void)cudaStreamDestroy(s);
        (void)cudaStreamDestroy(other);
    }
    return NULL;
}

typedef struct {
    sp_runtime *rt;
    sp_pool *pools[2];
    atomic_bool stop;
    long reads, violations;
} stats_reader;

static void *read_stats(void *arg)
{
    stats_reader *r = arg;
    do { /* at least one pass: the workers may be done before this thread first runs */
        sp_stats st = {.size = sizeof st};
        for (int i = 0; i < 3; i++) {
            int rc = i < 2 ? sp_pool_stats(r->pools[i], &st) : sp_runtime_stats(r->rt, &st);
            if (rc != SP_OK && rc != SP_ERR_CUDA)
                r->violations++;
            else if (!usage_invariants_hold(&st))
                r->violations++;
            r->reads++;
        }
    } while (!atomic_load(&r->stop));
    return NULL;
}

static void long_random_faults_at_every_rate(void **state)
{
    (void)state;
    static const char *apis[] = {"cudaFreeAsync", "cudaEventRecord", "cudaEventQuery",
                                 "cudaEventCreate", "cudaEventSynchronize", "cudaStreamQuery",
                                 "cudaStreamWaitEvent", "cudaStreamSynchronize",
                                 "cudaDeviceSynchronize", "cudaMemPoolTrimTo",
                                 "cudaMemPoolGetAttribute", "cudaMemGetInfo"};
    static const unsigned rates[] = {5000, 20000, 50000}; /* per million: 0.5%, 2%, 5% */
    for (unsigned r = 0; r < 3; r++) {
        sp_runtime *rt = runtime_on_device_of(512 * MiB);
        sp_pool_config cfg = SP_POOL_CONFIG_INIT;
        cfg.cross_stream = r == 1 ? SP_CROSS_STREAM_WAIT : SP_CROSS_STREAM_BALANCED;
        cfg.cache_limit = r == 2 ? 8 * MiB : UINT64_MAX;
        cfg.limit = 300 * MiB;
        sp_pool *pools[2];
        SP(sp_pool_create(rt, "a", &cfg, &pools[0]));
        SP(sp_pool_create(rt, "b", NULL, &pools[1]));
        CK(cudasimInjectFaultRate("cudaMallocFromPoolAsync", rates[r], cudaErrorMemoryAllocation,
                                  100 + r));
        for (unsigned i = 0; i < sizeof apis / sizeof apis[0]; i++)
            CK(cudasimInjectFaultRate(apis[i], rates[r], cudaErrorLaunchFailure, 200 + 10 * r + i));
        enum { T = 3 };
        pthread_t t[T], reader;
        long_worker w[T];
        stats_reader sr = {rt, {pools[0], pools[1]}, false, 0, 0};
        assert_int_equal(pthread_create(&reader, NULL, read_stats, &sr), 0);
        for (int i = 0; i < T; i++) {
            w[i] = (long_worker){rt, {pools[0], pools[1]}, 31u * (unsigned)(i + 1) + r, i == 0,
                                 0, 0, 0};
            assert_int_equal(pthread_create(&t[i], NULL, long_worker_main, &w[i]), 0);
        }
        long ooms = 0;
        for (int i = 0; i < T; i++) {
            pthread_join(t[i], NULL);
            assert_int_equal(w[i].failures, 0); /* only allocations the device refused fail */
            ooms += w[i].ooms;
        }
        atomic_store(&sr.stop, true);
        pthread_join(reader, NULL);
        cudasimClearFaults();
        assert_int_equal(sr.violations, 0);
        assert_true(sr.reads > 0);
        sp_stats total = {.size = sizeof total}, sum = {0};
        for (int i = 0; i < 2; i++) {
            sp_stats st = stats_of(pools[i]);
            assert_true(usage_invariants_hold(&st));
            assert_int_equal(st.requested.current, 0);
            assert_int_equal(st.active.current, 0);
            assert_int_equal(st.allocs, st.frees);
            assert_int_equal(st.held.current, st.segment_bytes + st.slab_bytes);
            assert_true(st.held.peak <= 512 * MiB);
            sum.held.current += st.held.current;
            sum.ooms += st.ooms + st.limit_rejections;
            sum.allocs += st.allocs;
        }
        SP(sp_runtime_stats(rt, &total));
        assert_true(usage_invariants_hold(&total));
        sp_pool *dflt;
        SP(sp_runtime_default_pool(rt, &dflt));
        sum.held.current += stats_of(dflt).held.current;
        assert_int_equal(total.held.current, sum.held.current); /* the runtime: its pools' sum */
        assert_int_equal(sum.ooms, ooms);
        print_message("# long random faults at %.1f%%: %ld ops, %llu allocations, %ld refused, "
                      "%llu skipped steps, %ld stats reads\n", rates[r] / 10000.0,
                      w[0].ops + w[1].ops + w[2].ops, (unsigned long long)sum.allocs, ooms,
                      (unsigned long long)total.skipped_steps, sr.reads);
        destroy_runtime(rt);
        CK(cudaDeviceSynchronize());
        size_t free_b, total_b;
        CK(cudaMemGetInfo(&free_b, &total_b));
        assert_int_equal(free_b, total_b); /* no driver memory lost */
    }
}

TEST_MAIN_WITHOUT_ALLOC_CONF("tenants",
    FX_DEVICE(noisy_neighbour, 4 * GiB),
    FX_DEVICE(reclaim_across_pools, 4 * GiB),
    FX_DEVICE(reclaim_observes_segments_given_back_on_a_stream, 4 * GiB),
    FX_DEVICE(released_stream_give_back_observed_once, 4 * GiB),
    FX_DEVICE(limit_rejects_then_recovers, 4 * GiB),
    FX_DEVICE(limit_reuses_ranges_its_synchronize_settled, 4 * GiB),
    FX_DEVICE(oom_callback_and_report, 4 * GiB),
    TRACKED(random_driver_failures),
    TRACKED(random_faults_everywhere_lose_nothing),
    FX_DEVICE(larger_than_device_fails_fast, 4 * GiB),
    FX_DEVICE(limit_between_driver_pages, 1 * GiB),
    FX_DEVICE(oom_callback_retry_reclaims_every_pool, 1 * GiB),
    FX_DEVICE(refused_request_changes_no_figure, 1 * GiB),
    cmocka_unit_test_prestate_setup_teardown(read_during_a_refused_request_counts_no_claim,
                                             fx_setup_device, teardown_held_malloc,
                                             &(uint64_t){1 * GiB}),
    FX_DEVICE(free_reservation_is_not_counted_against_the_limit, 4 * GiB),
    FX_DEVICE(capture_limit_rejection_is_reported, 1 * GiB),
    FX_DEVICE(reclaim_stops_below_higher_priorities_once_the_request_fits, 4 * GiB),
    TRACKED(long_random_faults_at_every_rate)
)
