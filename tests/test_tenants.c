/* Tenant isolation on a device of known size (cudasim only): a noisy neighbour, reclaim across
 * pools, limits, the out-of-memory callback and report, and random driver failures. The key
 * figures are printed as TAP comments ("# ..."). */
#include <stdio.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

static int teardown_tenants(void **state)
{
    (void)state;
    reset_device(NULL);
    return 0;
}

static sp_runtime *runtime_on_device_of(uint64_t bytes)
{
    CK(cudasimSetDeviceMemory(0, bytes));
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0; /* exact peaks for the figures below */
    sp_runtime *rt;
    SP(sp_runtime_create(0, &cfg, &rt));
    return rt;
}

/* 4 GiB device; A: reserve 1 GiB, limit 2 GiB; B: no reservation. B fills the device with cached
 * and then live memory; A still gets its reservation; B's growth reclaims B's own cache, never
 * A's reservation. */
static void noisy_neighbour(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(4 * GiB);
    sp_pool_config ca = SP_POOL_CONFIG_INIT, cb = SP_POOL_CONFIG_INIT;
    ca.reserve = 1 * GiB;
    ca.limit = 2 * GiB;
    ca.priority = 10;
    sp_pool *a, *b;
    SP(sp_pool_create(rt, "A", &ca, &a));
    SP(sp_pool_create(rt, "B", &cb, &b));
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
    assert_int_equal(sbst.reclaimed_bytes, 3 * GiB);
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
    drop_stream(rt, sa);
    drop_stream(rt, sb);
    SP(sp_runtime_destroy(rt));
}

/* X holds 3 GiB of idle cache on a 4 GiB device; Y's 2 GiB request succeeds by reclaiming it. */
static void reclaim_across_pools(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(4 * GiB);
    sp_pool_config cx = SP_POOL_CONFIG_INIT;
    cx.priority = -1; /* reclaimed before the default pool (priority 0) */
    sp_pool *x, *y;
    SP(sp_pool_create(rt, "X", &cx, &x));
    SP(sp_pool_create(rt, "Y", NULL, &y));
    cudaStream_t sx = new_stream(), sy = new_stream();
    void *blk[12];
    for (int i = 0; i < 12; i++)
        SP(sp_alloc(x, &blk[i], 256 * MiB, sx));
    for (int i = 0; i < 12; i++)
        SP(sp_free(x, blk[i], sx));
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
    drop_stream(rt, sx);
    drop_stream(rt, sy);
    SP(sp_runtime_destroy(rt));
}

static void limit_rejects_then_recovers(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(4 * GiB);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 64 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "capped", &cfg, &pool));
    cudaStream_t s = new_stream();
    void *p, *q = (void *)0x9;
    SP(sp_alloc(pool, &p, 48 * MiB, s));
    assert_int_equal(sp_alloc(pool, &q, 32 * MiB, s), SP_ERR_LIMIT);
    assert_ptr_equal(q, (void *)0x9);
    assert_int_equal(sp_alloc(pool, &q, 65 * MiB, s), SP_ERR_LIMIT); /* over the limit alone */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.limit_rejections, 2);
    assert_int_equal(st.ooms, 0);
    assert_int_equal(st.requested.current, 48 * MiB);
    assert_int_equal(st.held.current, 48 * MiB); /* nothing leaked */
    SP(sp_free(pool, p, s));
    SP(sp_alloc(pool, &q, 40 * MiB, s)); /* reuses the free 48 MiB segment (within 25%) */
    assert_ptr_equal(q, p);
    st = stats_of(pool);
    assert_int_equal(st.held.current, 48 * MiB);
    assert_int_equal(st.driver_allocs, 1);
    SP(sp_free(pool, q, s));
    SP(sp_alloc(pool, &q, 60 * MiB, s)); /* does not fit: the cached 48 MiB goes back first */
    st = stats_of(pool);
    assert_int_equal(st.held.current, 60 * MiB);
    assert_int_equal(st.reclaimed_bytes, 48 * MiB);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.driver_frees, 1);
    assert_true(st.held.peak <= 64 * MiB);
    SP(sp_free(pool, q, s));
    CK(cudaStreamSynchronize(s));
    uint64_t reserved = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemCurrent, &reserved));
    assert_true(reserved <= 64 * MiB); /* not above the limit past a synchronize */
    drop_stream(rt, s);
    SP(sp_runtime_destroy(rt));
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
    sp_runtime *rt = runtime_on_device_of(4 * GiB);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 8 * GiB;
    cfg.priority = 3;
    sp_pool *pool;
    SP(sp_pool_create(rt, "model\"7", &cfg, &pool));
    cudaStream_t s = new_stream();
    void *blocks[8];
    for (int i = 0; i < 7; i++)
        SP(sp_alloc(pool, &blocks[i], 512 * MiB, s));
    oom_ctx ctx = {pool, s, blocks, 7, 0, true};
    SP(sp_runtime_set_oom_callback(rt, on_oom, &ctx));
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
    SP(sp_runtime_last_oom(rt, &r));
    assert_int_equal(r.failures, 1);
    assert_string_equal(r.pool, "model\"7");
    assert_int_equal(r.bytes, 2 * GiB);
    assert_ptr_equal(r.stream, s);
    assert_int_equal(r.device_total, 4 * GiB);
    assert_int_equal(r.npools, 2);
    const sp_oom_pool *mine = strcmp(r.pools[0].name, "default") == 0 ? &r.pools[1] : &r.pools[0];
    assert_int_equal(mine->requested, 5 * 512 * MiB + 1 * GiB);
    assert_int_equal(mine->active, 5 * 512 * MiB + 1 * GiB);
    assert_int_equal(mine->cached, 0);
    assert_int_equal(mine->limit, 8 * GiB);
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
    SP(sp_runtime_destroy(fresh));
    for (int i = 0; i < ctx.n; i++)
        SP(sp_free(pool, blocks[i], s));
    SP(sp_free(pool, big, s));
    drop_stream(rt, s);
    SP(sp_runtime_destroy(rt));
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

static void random_driver_failures(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_on_device_of(16 * GiB);
    sp_pool *pool;
    SP(sp_pool_create(rt, "faulty", NULL, &pool));
    /* 50%: a miss retries after giving cache back and reclaiming, so failures must be common
     * for some to survive the whole ladder */
    CK(cudasimInjectFaultRate("cudaMallocFromPoolAsync", 500000, cudaErrorMemoryAllocation, 11));
    enum { T = 3 };
    pthread_t t[T];
    fault_worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (fault_worker){pool, new_stream(), 17u * (unsigned)(i + 1), 0, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, fault_stress, &w[i]), 0);
    }
    long ooms = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].live_bytes, 0);
        ooms += w[i].ooms;
    }
    cudasimClearFaults();
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
    for (int i = 0; i < T; i++)
        drop_stream(rt, w[i].stream);
    SP(sp_runtime_destroy(rt));
    CK(cudaDeviceSynchronize());
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total); /* no driver memory lost */
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
    enum { T = 3 };
    pthread_t t[T];
    fault_worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (fault_worker){pool, new_stream(), 29u * (unsigned)(i + 1), 0, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, fault_stress, &w[i]), 0);
    }
    long ooms = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0); /* best-effort steps never fail a request */
        assert_int_equal(w[i].live_bytes, 0);
        ooms += w[i].ooms;
    }
    cudasimClearFaults();
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
    for (int i = 0; i < T; i++)
        drop_stream(rt, w[i].stream);
    SP(sp_runtime_destroy(rt));
    CK(cudaDeviceSynchronize());
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total); /* no driver memory lost */
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
    sp_runtime *rt = runtime_on_device_of(4 * GiB);
    sp_pool *x, *y;
    SP(sp_pool_create(rt, "X", NULL, &x));
    SP(sp_pool_create(rt, "Y", NULL, &y));
    SP(sp_runtime_set_oom_callback(rt, count_callback, NULL));
    cudaStream_t s = new_stream();
    void *p, *q = (void *)0x7;
    SP(sp_alloc(x, &p, 1 * GiB, s));
    SP(sp_free(x, p, s));
    assert_int_equal(sp_alloc(y, &q, 5 * GiB, s), SP_ERR_OUT_OF_MEMORY);
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
    SP(sp_runtime_last_oom(rt, &r));
    assert_int_equal(r.bytes, 5 * GiB);
    drop_stream(rt, s);
    SP(sp_runtime_destroy(rt));
}

int main(void)
{
    unsetenv("SP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_teardown(fn, teardown_tenants)
        T(noisy_neighbour),
        T(reclaim_across_pools),
        T(limit_rejects_then_recovers),
        T(oom_callback_and_report),
        T(random_driver_failures),
        T(random_faults_everywhere_lose_nothing),
        T(larger_than_device_fails_fast),
#undef T
    };
    return cmocka_run_group_tests_name("tenants", tests, NULL, NULL);
}
