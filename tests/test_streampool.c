/* streampool's behaviour through its public API, portable: the same file runs on a GPU.
 * Asynchrony is held by gates this thread opens; data is checked through pinned host copies. */
#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

typedef sp_fixture fixture; /* fixtures.h: f->rt, f->pool */

/* ---- basics ---- */

static void version_and_status_strings(void **state)
{
    (void)state;
    assert_int_equal(sp_version(), SP_VERSION_HEX);
    assert_string_equal(sp_version_string(), "0.1.0");
    assert_string_equal(sp_status_name(SP_ERR_LIMIT), "SP_ERR_LIMIT");
    assert_string_equal(sp_status_name(SP_OK), "SP_ERR_OK");
    assert_string_equal(sp_strerror(SP_ERR_DOUBLE_FREE), "pointer is already free");
    assert_string_equal(sp_strerror(12345), "unknown status");
}

static void size_classes_bound_rounding_waste(void **state)
{
    (void)state;
    assert_int_equal(sp_size_class(1), 256);
    assert_int_equal(sp_size_class(256), 256);
    assert_int_equal(sp_size_class(257), 512);
    assert_int_equal(sp_size_class(4096), 4096);
    assert_int_equal(sp_size_class(4097), 4096 + 256);
    assert_int_equal(sp_size_class(8192), 8192);
    assert_int_equal(sp_size_class(0), 0);
    assert_int_equal(sp_size_class(SP_MAX_ALLOC + 1), 0);
    assert_int_equal(sp_size_class(SP_MAX_ALLOC), SP_MAX_ALLOC);
    /* above 4 KiB every request is rounded up by less than 1/16 of itself */
    unsigned x = 12345;
    double waste = 0, asked = 0;
    for (int i = 0; i < 100000; i++) {
        x = x * 1664525u + 1013904223u;
        size_t n = 4097 + (size_t)x % (64 * MiB);
        size_t c = sp_size_class(n);
        assert_true(c >= n);
        assert_true((c - n) * 16 < n);
        waste += (double)(c - n);
        asked += (double)n;
    }
    assert_true(waste / asked < 0.07);
}

static void same_stream_reuse_returns_the_block(void **state)
{
    fixture *f = *state;
    void *p, *q;
    SP(sp_alloc(f->pool, &p, 1000, fx.a));
    SP(sp_free(f->pool, p, fx.a));
    SP(sp_alloc(f->pool, &q, 900, fx.a)); /* same 1 KiB class */
    assert_ptr_equal(p, q);
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.same_stream_hits, 1);
    assert_int_equal(st.driver_allocs, 1);
    SP(sp_free(f->pool, q, fx.a));
}

/* A same-stream miss takes a cached block up to four classes larger, never more. */
static void same_stream_miss_fits_a_slightly_larger_block(void **state)
{
    fixture *f = *state;
    void *p, *q, *r;
    SP(sp_alloc(f->pool, &p, MiB, fx.a));   /* class 1 MiB */
    SP(sp_free(f->pool, p, fx.a));
    SP(sp_alloc(f->pool, &q, 900 * KiB, fx.a)); /* 3 classes below 1 MiB: fits */
    assert_ptr_equal(q, p);
    SP(sp_free(f->pool, q, fx.a));
    SP(sp_alloc(f->pool, &r, 850 * KiB, fx.a)); /* 5 classes below: new memory */
    assert_ptr_not_equal(r, p);
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.same_stream_hits, 1);
    assert_int_equal(st.driver_allocs, 1); /* r is carved from the rest of p's 2 MiB slab */
    assert_ptr_equal(r, (char *)p + MiB);
    assert_int_equal(st.active.current, sp_size_class(850 * KiB));
    SP(sp_free(f->pool, r, fx.a));
}

/* ---- the cross-stream canary ---- */

/* Stream a writes a pattern, then, held by a gate, copies it to the host and frees the block.
 * Stream b allocates the same size at once and writes another pattern. After the gate opens,
 * a's copy must show a's pattern: b's write never overtook a's use. (a's write completes before
 * the gate so that an unfenced write by b could only land between it and the copy.) */
static void canary_run(fixture *f, sp_cross_stream_policy policy)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = policy;
    static const size_t sizes[] = {1, 255, 256, 4096, 5000, 65536, 100000, MiB, 3 * MiB + 17};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        /* a fresh pool per size: a's block and the rest of its slab or segment, both behind
         * a's pending fence, are the only free memory b could take */
        char name[32];
        snprintf(name, sizeof name, "canary-%d-%zu", (int)policy, i);
        sp_pool *pool;
        SP(sp_pool_create(f->rt, name, &cfg, &pool));
        size_t n = sizes[i];
        cudaStream_t a = new_stream(), b = new_stream();
        gate *g = gate_new();
        unsigned char *host;
        CK(cudaMallocHost((void **)&host, n));
        void *pa, *pb;
        SP(sp_alloc(pool, &pa, n, a));
        CK(cudaMemsetAsync(pa, 0xaa, n, a));
        CK(cudaStreamSynchronize(a)); /* a's pattern is in place before anything of b's */
        gate_hold(g, a);
        CK(cudaMemcpyAsync(host, pa, n, cudaMemcpyDeviceToHost, a));
        SP(sp_free(pool, pa, a));
        SP(sp_alloc(pool, &pb, n, b));
        CK(cudaMemsetAsync(pb, 0xbb, n, b));
        gate_open(g);
        CK(cudaStreamSynchronize(a));
        CK(cudaStreamSynchronize(b));
        for (size_t k = 0; k < n; k++)
            if (host[k] != 0xaa)
                fail_msg("size %zu policy %d: byte %zu is 0x%02x", n, (int)policy, k, host[k]);
        assert_true(device_bytes_are(pb, n, 0xbb, b));
        if (policy == SP_CROSS_STREAM_WAIT)
            assert_ptr_equal(pa, pb); /* reused behind a fence wait */
        else
            assert_ptr_not_equal(pa, pb); /* the fence was pending: fresh memory */
        SP(sp_free(pool, pb, b));
        CK(cudaFreeHost(host));
        drop_stream(f->rt, a);
        drop_stream(f->rt, b);
        sp_stats st = stats_of(pool);
        assert_int_equal(st.cross_stream_waits, policy == SP_CROSS_STREAM_WAIT ? 1 : 0);
        assert_int_equal(st.driver_allocs, policy == SP_CROSS_STREAM_WAIT ? 1 : 2);
        assert_int_equal(st.bad_frees, 0);
        assert_int_equal(st.requested.current, 0);
        SP(sp_pool_destroy(pool));
    }
}

static void canary_balanced(void **state) { canary_run(*state, SP_CROSS_STREAM_BALANCED); }
static void canary_wait(void **state) { canary_run(*state, SP_CROSS_STREAM_WAIT); }
static void canary_no_wait(void **state) { canary_run(*state, SP_CROSS_STREAM_NO_WAIT); }

/* With the fence already complete, the block moves to another stream without a wait. */
static void completed_fence_gives_reuse_without_wait(void **state)
{
    fixture *f = *state;
    void *pa, *pb1, *pb2;
    SP(sp_alloc(f->pool, &pa, 64 * KiB, fx.a));
    CK(cudaMemsetAsync(pa, 1, 64 * KiB, fx.a));
    SP(sp_free(f->pool, pa, fx.a));
    SP(sp_alloc(f->pool, &pb1, 64 * KiB, fx.b)); /* records a fence on a; may be pending */
    CK(cudaStreamSynchronize(fx.a));              /* the fence is now complete */
    sp_stats before = stats_of(f->pool);
    if (pb1 == pa) {
        /* a real GPU may have completed a's work before the first query */
        assert_int_equal(before.cross_stream_reuses, 1);
    } else {
        SP(sp_alloc(f->pool, &pb2, 64 * KiB, fx.b));
        assert_ptr_equal(pb2, pa);
        sp_stats st = stats_of(f->pool);
        assert_int_equal(st.cross_stream_reuses, 1);
        assert_int_equal(st.cross_stream_waits, 0);
        assert_true(st.fences_recorded <= 1);
        SP(sp_free(f->pool, pb2, fx.b));
    }
    SP(sp_free(f->pool, pb1, fx.b));
}

/* Another stream's block of a slightly larger class is taken too, behind its fence. */
static void steal_fits_a_slightly_larger_block(void **state)
{
    fixture *f = *state;
    void *p, *q, *r;
    SP(sp_alloc(f->pool, &p, MiB, fx.a));
    SP(sp_free(f->pool, p, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_alloc(f->pool, &q, 900 * KiB, fx.b)); /* 3 classes below: fits */
    assert_ptr_equal(q, p);
    SP(sp_alloc(f->pool, &r, 900 * KiB, fx.b)); /* nothing left to take */
    assert_ptr_not_equal(r, p);
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.driver_allocs, 1); /* r: the rest of p's slab, settled with a idle */
    assert_ptr_equal(r, (char *)p + MiB);
    assert_int_equal(st.active.current, MiB + sp_size_class(900 * KiB)); /* q kept the 1 MiB block */
    SP(sp_free(f->pool, q, fx.b));
    SP(sp_free(f->pool, r, fx.b));
}

/* One fence serves every block freed before it: many blocks, one event, and the allocating
 * stream waits on it (policy WAIT) while the freeing stream is held. */
static void one_fence_covers_many_frees(void **state)
{
    fixture *f = *state;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = SP_CROSS_STREAM_WAIT;
    sp_pool *pool;
    SP(sp_pool_create(f->rt, "fenced", &cfg, &pool));
    gate *g = gate_new();
    void *p[16], *q[16];
    for (int i = 0; i < 16; i++)
        SP(sp_alloc(pool, &p[i], 8 * KiB, fx.a));
    gate_hold(g, fx.a);
    for (int i = 0; i < 16; i++)
        SP(sp_free(pool, p[i], fx.a));
    for (int i = 0; i < 16; i++)
        SP(sp_alloc(pool, &q[i], 8 * KiB, fx.b));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.fences_recorded, 1);
    assert_int_equal(st.cross_stream_waits, 16);
    assert_int_equal(st.driver_allocs, 1); /* one slab for all 16 blocks */
    assert_int_equal(cudaStreamQuery(fx.b), cudaErrorNotReady); /* b waits behind a's gate */
    gate_open(g);
    for (int i = 0; i < 16; i++)
        SP(sp_free(pool, q[i], fx.b));
    SP(sp_pool_destroy(pool));
}

/* Blocks freed on a stream that has since gone idle move without any event at all. */
static void idle_stream_needs_no_fence(void **state)
{
    fixture *f = *state;
    void *p[16], *q[16];
    for (int i = 0; i < 16; i++)
        SP(sp_alloc(f->pool, &p[i], 8 * KiB, fx.a));
    for (int i = 0; i < 16; i++)
        SP(sp_free(f->pool, p[i], fx.a));
    CK(cudaStreamSynchronize(fx.a));
    for (int i = 0; i < 16; i++)
        SP(sp_alloc(f->pool, &q[i], 8 * KiB, fx.b));
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(st.cross_stream_reuses, 16);
    assert_int_equal(st.driver_allocs, 1); /* one slab for all 16 blocks */
    for (int i = 0; i < 16; i++)
        SP(sp_free(f->pool, q[i], fx.b));
}

/* A released stream's blocks are reusable only behind its final fence; a stream that comes back
 * with the same handle value starts with an empty cache and never takes them unfenced. */
static void released_stream_blocks_stay_fenced(void **state)
{
    fixture *f = *state;
    gate *g = gate_new();
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, 4096));
    void *p, *q, *r;
    SP(sp_alloc(f->pool, &p, 4096, fx.a));
    CK(cudaMemsetAsync(p, 0x5c, 4096, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    gate_hold(g, fx.a);
    CK(cudaMemcpyAsync(host, p, 4096, cudaMemcpyDeviceToHost, fx.a));
    SP(sp_free(f->pool, p, fx.a));
    SP(sp_stream_release(f->rt, fx.a));
    SP(sp_alloc(f->pool, &q, 4096, fx.a)); /* the same handle value, as a new stream */
    assert_ptr_not_equal(q, p);
    CK(cudaMemsetAsync(q, 0x11, 4096, fx.a));
    gate_open(g);
    CK(cudaStreamSynchronize(fx.a));
    for (int i = 0; i < 4096; i++)
        assert_int_equal(host[i], 0x5c);
    /* best fit: the first MiB comes from the rest of q's slab, the second only fits p's slab,
     * whose final fence has completed */
    void *r2;
    SP(sp_alloc(f->pool, &r, MiB, fx.b));
    assert_ptr_equal(r, (char *)q + 4096);
    SP(sp_alloc(f->pool, &r2, MiB, fx.b));
    assert_ptr_equal(r2, p);
    SP(sp_free(f->pool, q, fx.a));
    SP(sp_free(f->pool, r, fx.b));
    SP(sp_free(f->pool, r2, fx.b));
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.cross_stream_reuses, 2);
    assert_int_equal(st.driver_allocs, 2);
    CK(cudaFreeHost(host));
}

/* ---- bad input ---- */

static void bad_input_gives_errors_and_changes_nothing(void **state)
{
    fixture *f = *state;
    sp_pool *other;
    SP(sp_pool_create(f->rt, "other", NULL, &other));
    void *keep, *p = (void *)0x77;
    SP(sp_alloc(f->pool, &keep, 10000, fx.a));
    CK(cudaMemsetAsync(keep, 0x3d, 10000, fx.a));
    sp_stats before = stats_of(f->pool);

    assert_int_equal(sp_alloc(NULL, &p, 16, fx.a), SP_ERR_INVALID);
    assert_int_equal(sp_alloc(f->pool, NULL, 16, fx.a), SP_ERR_INVALID);
    assert_int_equal(sp_alloc(f->pool, &p, SIZE_MAX, fx.a), SP_ERR_TOO_LARGE);
    assert_int_equal(sp_alloc(f->pool, &p, SIZE_MAX - 100, fx.a), SP_ERR_TOO_LARGE);
    assert_int_equal(sp_alloc(f->pool, &p, SP_MAX_ALLOC + 1, fx.a), SP_ERR_TOO_LARGE);
    assert_ptr_equal(p, (void *)0x77);
    SP(sp_alloc(f->pool, &p, 0, fx.a)); /* documented: NULL, like cudaMalloc */
    assert_null(p);
    SP(sp_free(f->pool, NULL, fx.a));
    assert_int_equal(sp_free(NULL, keep, fx.a), SP_ERR_INVALID);
    int on_stack;
    assert_int_equal(sp_free(f->pool, &on_stack, fx.a), SP_ERR_BAD_POINTER);
    assert_int_equal(sp_free(f->pool, (char *)keep + 256, fx.a), SP_ERR_BAD_POINTER);
    assert_int_equal(sp_free(other, keep, fx.a), SP_ERR_WRONG_POOL);
    void *twice;
    SP(sp_alloc(f->pool, &twice, 300, fx.a));
    SP(sp_free(f->pool, twice, fx.a));
    assert_int_equal(sp_free(f->pool, twice, fx.a), SP_ERR_DOUBLE_FREE);

    sp_pool *dup = NULL, *found = NULL;
    assert_int_equal(sp_pool_create(f->rt, "other", NULL, &dup), SP_ERR_EXISTS);
    assert_int_equal(sp_pool_create(f->rt, "", NULL, &dup), SP_ERR_INVALID);
    char long_name[SP_POOL_NAME_MAX + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(sp_pool_create(f->rt, long_name, NULL, &dup), SP_ERR_INVALID);
    sp_pool_config bad = SP_POOL_CONFIG_INIT;
    bad.cross_stream = (sp_cross_stream_policy)9;
    assert_int_equal(sp_pool_create(f->rt, "bad", &bad, &dup), SP_ERR_CONFIG);
    bad = (sp_pool_config)SP_POOL_CONFIG_INIT;
    bad.size = 3;
    assert_int_equal(sp_pool_create(f->rt, "bad", &bad, &dup), SP_ERR_INVALID);
    assert_null(dup);
    assert_int_equal(sp_pool_find(f->rt, "no-such-pool", &found), SP_ERR_NOT_FOUND);
    SP(sp_pool_find(f->rt, "other", &found));
    assert_ptr_equal(found, other);
    assert_int_equal(sp_pool_destroy(f->pool), SP_ERR_INVALID); /* the default pool */

    void *live;
    SP(sp_alloc(other, &live, 5000, fx.a));
    assert_int_equal(sp_pool_destroy(other), SP_ERR_BUSY);
    assert_int_equal(sp_runtime_destroy(f->rt), SP_ERR_BUSY);
    SP(sp_pool_find(f->rt, "other", &found)); /* still there, still usable */
    SP(sp_free(other, live, fx.a));
    SP(sp_pool_destroy(other));
    assert_int_equal(sp_pool_find(f->rt, "other", &found), SP_ERR_NOT_FOUND);

    sp_stats after = stats_of(f->pool);
    /* two unknown pointers and a double free here; the wrong-pool free counts on `other` */
    assert_int_equal(after.bad_frees, before.bad_frees + 3);
    assert_int_equal(after.allocs, before.allocs + 1);
    assert_int_equal(after.frees, before.frees + 1);
    assert_int_equal(after.requested.current, 10000);
    assert_int_equal(after.active.current, sp_size_class(10000));
    assert_true(device_bytes_are(keep, 10000, 0x3d, fx.a)); /* the live allocation survived */
    SP(sp_free(f->pool, keep, fx.a));
}

/* ---- stats ---- */

static void stats_are_exact_after_a_script(void **state)
{
    fixture *f = *state; /* FX_EXACT: exact peaks, a flush on every call */
    cudaStream_t a = new_stream(), b = new_stream();
    sp_pool *pool;
    SP(sp_pool_create(f->rt, "script", NULL, &pool));
    void *p1, *p2, *p3, *p4;
    SP(sp_alloc(pool, &p1, 1000, a));        /* driver: a 2 MiB slab; 1024 carved */
    SP(sp_alloc(pool, &p2, 5000, a));        /* 5120 carved from the slab */
    assert_ptr_equal(p2, (char *)p1 + 1024);
    SP(sp_free(pool, p1, a));
    SP(sp_alloc(pool, &p3, 1024, a));        /* hit: p1's block */
    assert_ptr_equal(p3, p1);
    SP(sp_alloc(pool, &p4, 100, b));         /* 256 carved; a is idle: its tags settle */
    assert_ptr_equal(p4, (char *)p1 + 1024 + 5120);
    SP(sp_free(pool, p2, a));
    assert_int_equal(sp_free(pool, p2, a), SP_ERR_DOUBLE_FREE);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.version, SP_STATS_VERSION);
    assert_int_equal(st.size, sizeof st);
    assert_int_equal(st.allocs, 4);
    assert_int_equal(st.frees, 2);
    assert_int_equal(st.same_stream_hits, 1);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.driver_frees, 0);
    assert_int_equal(st.bad_frees, 1);
    assert_int_equal(st.cross_stream_reuses, 1); /* the rest of a's slab, for b */
    assert_int_equal(st.cross_stream_waits, 0);
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(st.requested.current, 1024 + 100);
    assert_int_equal(st.requested.peak, 1000 + 5000 + 100 + 24);
    assert_int_equal(st.requested.total, 1000 + 5000 + 1024 + 100);
    assert_int_equal(st.active.current, 1024 + 256);
    assert_int_equal(st.active.peak, 1024 + 5120 + 256);
    assert_int_equal(st.active.total, 1024 + 5120 + 1024 + 256);
    assert_int_equal(st.cached.current, 2 * MiB - 1024 - 256); /* p2 in a's bin + the slab's rest */
    assert_int_equal(st.cached.peak, 2 * MiB - 1024); /* after p1: the slab but its block */
    assert_int_equal(st.cached.total, 1024 + 5120);
    assert_int_equal(st.held.current, 2 * MiB);
    assert_int_equal(st.held.peak, 2 * MiB);
    assert_int_equal(st.held.total, 2 * MiB);
    assert_int_equal(st.slabs, 1);
    assert_int_equal(st.slab_bytes, 2 * MiB);
    assert_int_equal(st.segments, 0);
    /* the slab holds live and cached blocks: everything else in it is inactive split */
    assert_int_equal(st.inactive_split, 2 * MiB - 1024 - 5120 - 256);
    assert_int_equal(st.largest_free, 2 * MiB - 1024 - 5120 - 256);
    assert_true(st.pool_used >= 2 * MiB);
    assert_true(st.pool_reserved >= st.pool_used);
    assert_int_equal(st.pools, 1);
    char json[2048];
    size_t n = sp_stats_json(&st, json, sizeof json);
    assert_true(n < sizeof json);
    assert_non_null(strstr(json, "\"same_stream_hits\":1"));
    assert_non_null(strstr(json, "\"requested\":{\"current\":1124,\"peak\":6124,\"total\":7124}"));
    assert_int_equal(sp_stats_json(&st, json, 8), n); /* truncated, length still reported */
    assert_int_equal(strlen(json), 7);

    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(f->rt, &rst));
    assert_int_equal(rst.pools, 1); /* the default pool, never used, is not counted */
    assert_int_equal(rst.allocs, 4);
    assert_int_equal(rst.requested.current, 1124);

    sp_stats small = {.size = offsetof(sp_stats, pool_reserved)}; /* an older, shorter struct */
    SP(sp_pool_stats(pool, &small));
    assert_int_equal(small.size, offsetof(sp_stats, pool_reserved));
    assert_int_equal(small.requested.current, 1124);
    sp_stats tiny = {.size = 4};
    assert_int_equal(sp_pool_stats(pool, &tiny), SP_ERR_INVALID);

    SP(sp_free(pool, p3, a));
    SP(sp_free(pool, p4, b));
    SP(sp_pool_trim(pool, 0));
    st = stats_of(pool);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.cached.current, 0);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.held.peak, 2 * MiB);
    assert_int_equal(st.slabs, 0);
    assert_int_equal(st.pool_reserved, 0);
    drop_stream(f->rt, a);
    drop_stream(f->rt, b);
    SP(sp_pool_destroy(pool));
}

/* With the default flush threshold, current figures are still exact at every read, from any
 * number of streams, and peaks are within the threshold per stream. */
static void stats_current_exact_with_flush_threshold(void **state)
{
    fixture *f = *state;
    enum { N = 8 };
    cudaStream_t s[N];
    void *p[N][4];
    for (int i = 0; i < N; i++) {
        s[i] = new_stream();
        for (int k = 0; k < 4; k++)
            SP(sp_alloc(f->pool, &p[i][k], 1000 + (size_t)k, s[i]));
    }
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.requested.current, N * (1000 + 1001 + 1002 + 1003));
    assert_int_equal(st.active.current, N * 4 * 1024);
    assert_int_equal(st.requested.peak, st.requested.current); /* a read is a sample */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 4; k++)
            SP(sp_free(f->pool, p[i][k], s[i]));
    st = stats_of(f->pool);
    assert_int_equal(st.requested.current, 0);
    /* every stream carved from the one slab (the others were idle: settled) */
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.cached.current, 2 * MiB);
    assert_int_equal(st.requested.peak, N * (1000 + 1001 + 1002 + 1003));
    for (int i = 0; i < N; i++)
        drop_stream(f->rt, s[i]);
}

/* A block allocated by a hit on one stream and freed on another: the allocating stream's
 * unflushed +bytes and the freeing stream's -bytes reach the pool in either order (a read
 * flushes the newest stream first). On main the -bytes, flushed first, were clamped at zero
 * and the +bytes then stayed: 1000 bytes live forever, and the pool could not be destroyed. */
static void stats_exact_when_freed_on_another_stream(void **state)
{
    fixture *f = *state;
    cudaStream_t a = new_stream(), b = new_stream();
    sp_pool *pool;
    SP(sp_pool_create(f->rt, "cross-free", NULL, &pool));
    void *p, *q;
    SP(sp_alloc(pool, &p, 1000, a)); /* a miss: straight into the pool's figures */
    SP(sp_free(pool, p, a));         /* -1000 kept in a's cache */
    assert_int_equal(stats_of(pool).requested.current, 0); /* flushed: the pool is at 0 */
    SP(sp_alloc(pool, &q, 1000, a)); /* a hit: +1000 kept in a's cache */
    assert_ptr_equal(q, p);
    SP(sp_free(pool, q, b));         /* -1000 kept in b's cache (b is the newest stream) */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.cached.current, 2 * MiB);
    assert_int_equal(st.requested.peak, 1000);
    assert_int_equal(st.active.peak, 1024);
    SP(sp_alloc(pool, &p, 3000, a)); /* the figures go on from there */
    st = stats_of(pool);
    assert_int_equal(st.requested.current, 3000);
    assert_int_equal(st.active.current, 3072);
    SP(sp_free(pool, p, a));
    drop_stream(f->rt, a);
    drop_stream(f->rt, b);
    SP(sp_pool_destroy(pool)); /* nothing is live: not SP_ERR_BUSY */
}

/* ---- pools ---- */

static void pools_are_isolated(void **state)
{
    fixture *f = *state;
    sp_pool *x, *y;
    SP(sp_pool_create(f->rt, "x", NULL, &x));
    SP(sp_pool_create(f->rt, "y", NULL, &y));
    assert_string_equal(sp_pool_name(x), "x");
    assert_ptr_not_equal(sp_pool_cuda_pool(x), sp_pool_cuda_pool(y));
    void *px, *py;
    SP(sp_alloc(x, &px, MiB, fx.a));
    SP(sp_free(x, px, fx.a));
    SP(sp_alloc(y, &py, MiB, fx.a)); /* x's idle block is never handed to y */
    assert_ptr_not_equal(px, py);
    SP(sp_free(y, py, fx.a));
    uint64_t threshold = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(x), cudaMemPoolAttrReleaseThreshold, &threshold));
    assert_int_equal(threshold, UINT64_MAX); /* keeps memory, unlike CUDA's default of 0 */
    SP(sp_pool_set_release_threshold(x, 4 * MiB));
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(x), cudaMemPoolAttrReleaseThreshold, &threshold));
    assert_int_equal(threshold, 4 * MiB);
    SP(sp_pool_destroy(x));
    SP(sp_pool_destroy(y));
}

static void adopted_pool_is_used_and_left_alive(void **state)
{
    fixture *f = *state;
    cudaMemPool_t mine = new_pool(UINT64_MAX);
    sp_pool *adopted;
    SP(sp_pool_adopt(f->rt, "adopted", mine, NULL, &adopted));
    assert_ptr_equal(sp_pool_cuda_pool(adopted), mine);
    cudaStream_t s = new_stream();
    void *p;
    SP(sp_alloc(adopted, &p, 3 * MiB, s));
    assert_true(pool_attr(mine, cudaMemPoolAttrUsedMemCurrent) >= 3 * MiB);
    SP(sp_free(adopted, p, s));
    drop_stream(f->rt, s);
    SP(sp_pool_destroy(adopted));
    CK(cudaDeviceSynchronize());
    assert_int_equal(pool_attr(mine, cudaMemPoolAttrUsedMemCurrent), 0);
    CK(cudaMemPoolDestroy(mine)); /* still ours, still valid */
    assert_int_equal(sp_pool_adopt(f->rt, "null", NULL, NULL, &adopted), SP_ERR_INVALID);
}

static void declared_capture_bypasses_the_caches(void **state)
{
    fixture *f = *state;
    void *p, *q;
    SP(sp_alloc(f->pool, &p, 2048, fx.a));
    SP(sp_free(f->pool, p, fx.a)); /* cached */
    SP(sp_stream_capture_begin(f->rt, fx.a));
    SP(sp_alloc(f->pool, &q, 2048, fx.a)); /* must not come from the cache */
    assert_ptr_not_equal(q, p);
    SP(sp_free(f->pool, q, fx.a));        /* must not go into the cache */
    SP(sp_stream_capture_end(f->rt, fx.a));
    assert_int_equal(sp_stream_capture_end(f->rt, fx.a), SP_ERR_INVALID);
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.capture_bypasses, 1);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.same_stream_hits, 0);
    SP(sp_alloc(f->pool, &q, 2048, fx.a)); /* capture over: the cache again */
    assert_ptr_equal(q, p);
    SP(sp_free(f->pool, q, fx.a));
}

/* ---- threads ---- */

typedef struct {
    sp_pool *pool;
    cudaStream_t *streams;
    int nstreams;
    unsigned seed;
    int failures;
} worker_arg;

static void yield_fn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        sched_yield(); /* widens the window a missing fence would leave open */
}

static void *stress_worker(void *argp)
{
    worker_arg *w = argp;
    unsigned x = w->seed;
    enum { ROUNDS = 120, MAXN = 200 * 1024 };
    unsigned char *host;
    if (cudaMallocHost((void **)&host, MAXN) != cudaSuccess)
        return (void *)1;
    for (int i = 0; i < ROUNDS; i++) {
        x = x * 1103515245u + 12345u;
        cudaStream_t s = w->streams[(x >> 4) % (unsigned)w->nstreams];
        size_t n = 1 + (x >> 9) % MAXN;
        unsigned char pattern = (unsigned char)(x >> 20) | 1;
        void *p;
        if (sp_alloc(w->pool, &p, n, s) != SP_OK) {
            w->failures++;
            continue;
        }
        if (x & 1)
            cudaLaunchHostFunc(s, yield_fn, NULL);
        cudaMemsetAsync(p, pattern, n, s);
        cudaMemcpyAsync(host, p, n, cudaMemcpyDeviceToHost, s);
        if (sp_free(w->pool, p, s) != SP_OK)
            w->failures++;
        cudaStreamSynchronize(s);
        for (size_t k = 0; k < n; k += 97)
            if (host[k] != pattern) {
                w->failures++;
                break;
            }
    }
    cudaFreeHost(host);
    return NULL;
}

static void threads_streams_and_canaries(void **state)
{
    fixture *f = *state;
    enum { THREADS = 4, STREAMS = 8 };
    cudaStream_t streams[STREAMS];
    for (int i = 0; i < STREAMS; i++)
        streams[i] = new_stream();
    for (int policy = 0; policy <= 2; policy++) {
        sp_pool_config cfg = SP_POOL_CONFIG_INIT;
        cfg.cross_stream = (sp_cross_stream_policy)policy;
        char name[16];
        snprintf(name, sizeof name, "stress%d", policy);
        sp_pool *pool;
        SP(sp_pool_create(f->rt, name, &cfg, &pool));
        pthread_t t[THREADS];
        worker_arg args[THREADS];
        for (int i = 0; i < THREADS; i++) {
            args[i] = (worker_arg){pool, streams, STREAMS, 77u * (unsigned)(i + 1), 0};
            assert_int_equal(pthread_create(&t[i], NULL, stress_worker, &args[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
            void *ret;
            pthread_join(t[i], &ret);
            assert_null(ret);
            assert_int_equal(args[i].failures, 0);
        }
        sp_stats st = stats_of(pool);
        assert_int_equal(st.allocs, THREADS * 120);
        assert_int_equal(st.frees, THREADS * 120);
        assert_int_equal(st.requested.current, 0);
        assert_int_equal(st.active.current, 0);
        assert_int_equal(st.bad_frees, 0);
        SP(sp_pool_destroy(pool));
    }
    for (int i = 0; i < STREAMS; i++)
        drop_stream(f->rt, streams[i]);
}

/* cudaStreamPerThread is a different stream in every thread: a block one thread freed on it is
 * not handed to another thread's cudaStreamPerThread as a same-stream hit. */
static void *alloc_on_per_thread_stream(void *arg)
{
    void **io = arg;
    sp_pool *pool = io[0];
    void *p = NULL;
    if (sp_alloc(pool, &p, 4096, cudaStreamPerThread) == SP_OK) {
        io[1] = p;
        sp_free(pool, p, cudaStreamPerThread);
        cudaStreamSynchronize(cudaStreamPerThread);
    }
    return NULL;
}

static void per_thread_default_stream_is_per_thread(void **state)
{
    fixture *f = *state;
    gate *g = gate_new();
    void *p;
    SP(sp_alloc(f->pool, &p, 4096, cudaStreamPerThread));
    gate_hold(g, cudaStreamPerThread);
    SP(sp_free(f->pool, p, cudaStreamPerThread));
    void *io[2] = {f->pool, NULL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, alloc_on_per_thread_stream, io), 0);
    pthread_join(t, NULL);
    assert_non_null(io[1]);
    assert_ptr_not_equal(io[1], p);
    gate_open(g);
    CK(cudaStreamSynchronize(cudaStreamPerThread));
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.same_stream_hits, 0);
    SP(sp_stream_release(f->rt, cudaStreamPerThread));
}

/* cached.peak is the high-water mark of cached bytes, like every other peak: a fresh slab's
 * remainder is cached (held, not live) as soon as the allocation that took the slab returns,
 * and a later read never shows a lower peak. Before, the stored peak rose only when live memory
 * was freed, so a read right after the first allocation reported the remainder as the peak (it
 * was the current figure) and the read after a second allocation reported less. */
static void cached_peak_never_goes_down(void **state)
{
    fixture *f = *state;
    sp_pool *read_between, *unread;
    SP(sp_pool_create(f->rt, "read_between", NULL, &read_between));
    SP(sp_pool_create(f->rt, "unread", NULL, &unread));
    void *p1, *p2, *q1, *q2;
    SP(sp_alloc(read_between, &p1, 256, fx.a)); /* a 2 MiB slab: 256 live, the rest cached */
    sp_stats st = stats_of(read_between);
    assert_int_equal(st.cached.current, 2 * MiB - 256);
    assert_int_equal(st.cached.peak, 2 * MiB - 256);
    SP(sp_alloc(read_between, &p2, 256, fx.a)); /* carved from the same slab: no driver call */
    st = stats_of(read_between);
    assert_int_equal(st.held.current, 2 * MiB);
    assert_int_equal(st.cached.current, 2 * MiB - 512);
    assert_int_equal(st.cached.peak, 2 * MiB - 256);

    SP(sp_alloc(unread, &q1, 256, fx.a)); /* the same, with no read in between */
    SP(sp_alloc(unread, &q2, 256, fx.a));
    st = stats_of(unread);
    assert_int_equal(st.cached.current, 2 * MiB - 512);
    assert_int_equal(st.cached.peak, 2 * MiB - 256);
    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(f->rt, &rst));
    assert_int_equal(rst.cached.current, 4 * MiB - 1024);
    assert_int_equal(rst.cached.peak, 4 * MiB - 768); /* after q1: 2 MiB - 512 + 2 MiB - 256 */

    SP(sp_free(read_between, p1, fx.a));
    SP(sp_free(read_between, p2, fx.a));
    SP(sp_free(unread, q1, fx.a));
    SP(sp_free(unread, q2, fx.a));
    SP(sp_pool_destroy(read_between));
    SP(sp_pool_destroy(unread));
}

TEST_MAIN("streampool",
    FX(version_and_status_strings),
    FX(size_classes_bound_rounding_waste),
    FX(same_stream_reuse_returns_the_block),
    FX(same_stream_miss_fits_a_slightly_larger_block),
    FX(canary_balanced),
    FX(canary_wait),
    FX(canary_no_wait),
    FX(completed_fence_gives_reuse_without_wait),
    FX(steal_fits_a_slightly_larger_block),
    FX(one_fence_covers_many_frees),
    FX(idle_stream_needs_no_fence),
    FX(released_stream_blocks_stay_fenced),
    FX(bad_input_gives_errors_and_changes_nothing),
    FX_EXACT(stats_are_exact_after_a_script),
    FX(cached_peak_never_goes_down),
    FX(stats_current_exact_with_flush_threshold),
    FX(stats_exact_when_freed_on_another_stream),
    FX(pools_are_isolated),
    FX(adopted_pool_is_used_and_left_alive),
    FX(declared_capture_bypasses_the_caches),
    FX(per_thread_default_stream_is_per_thread),
    FX(threads_streams_and_canaries)
)
