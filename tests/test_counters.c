/* Every counter explains itself (issue 20, item 6): each event below is driven on its own, and
 * exactly the counters that name it move, by exactly how much; every other counter of
 * SP_STATS_COUNTERS stays as it was. README's "What moves each counter" is the same table in
 * words. Emulator-only: sizes the device and injects driver faults. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"

static const size_t MiB = (size_t)1 << 20;

enum {
#define COUNTER_INDEX(name, text) C_##name,
    SP_STATS_COUNTERS(COUNTER_INDEX)
#undef COUNTER_INDEX
    C_N
};

static const char *const names[C_N] = {
#define COUNTER_NAME(name, text) #name,
    SP_STATS_COUNTERS(COUNTER_NAME)
#undef COUNTER_NAME
};

typedef struct {
    uint64_t v[C_N];
} counters;

static counters read_counters(sp_pool *pool)
{
    sp_stats st = stats_of(pool);
    counters c;
#define COUNTER_READ(name, text) c.v[C_##name] = st.name;
    SP_STATS_COUNTERS(COUNTER_READ)
#undef COUNTER_READ
    return c;
}

/* Checks that from `before` to now exactly the counters in `expect` moved: "name=N" by N,
 * "name=+" by at least 1; every other counter by 0. */
static void moved(sp_pool *pool, const counters *before, const char *expect)
{
    counters now = read_counters(pool);
    int64_t want[C_N];
    memset(want, 0, sizeof want);
    char list[512];
    snprintf(list, sizeof list, "%s", expect);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = '\0';
        int i = 0;
        while (i < C_N && strcmp(names[i], tok) != 0)
            i++;
        if (i == C_N)
            fail_msg("no counter named %s", tok);
        want[i] = strcmp(eq + 1, "+") == 0 ? -1 : strtoll(eq + 1, NULL, 10);
    }
    int bad = 0;
    for (int i = 0; i < C_N; i++) {
        uint64_t d = now.v[i] - before->v[i];
        if (want[i] < 0 ? d == 0 : d != (uint64_t)want[i]) {
            print_error("%s moved by %llu, expected %s\n", names[i], (unsigned long long)d,
                        want[i] < 0 ? "at least 1" : "exactly as listed (0 if unlisted)");
            bad++;
        }
    }
    if (bad)
        fail_msg("%d counters moved otherwise than [%s]", bad, expect);
}

static sp_runtime *exact_runtime(void)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0;
    return track_runtime(0, &cfg);
}

/* Caches `n` small blocks of 1 MiB (two to a 2 MiB slab) on stream s, settled. */
static void cache_small(sp_pool *pool, cudaStream_t s, int n)
{
    void *p[32];
    for (int i = 0; i < n; i++)
        SP(sp_alloc(pool, &p[i], MiB, s));
    for (int i = 0; i < n; i++)
        SP(sp_free(pool, p[i], s));
    CK(cudaStreamSynchronize(s));
}

/* Allocations, frees, a hit, a steal from another stream, bad frees: each its own counter. */
static void calls_move_their_counters(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 0, 0, UINT64_MAX);
    void *p, *q;
    counters c = read_counters(pool);
    SP(sp_alloc(pool, &p, 1000, fx.a)); /* a fresh slab */
    moved(pool, &c, "allocs=1,driver_allocs=1");
    c = read_counters(pool);
    SP(sp_free(pool, p, fx.a));
    moved(pool, &c, "frees=1");
    c = read_counters(pool);
    SP(sp_alloc(pool, &p, 1000, fx.a));
    moved(pool, &c, "allocs=1,same_stream_hits=1");
    SP(sp_free(pool, p, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    c = read_counters(pool);
    SP(sp_alloc(pool, &q, 1000, fx.b)); /* s1's block, its free known complete */
    moved(pool, &c, "allocs=1,cross_stream_reuses=1");
    SP(sp_free(pool, q, fx.b));
    c = read_counters(pool);
    int local;
    assert_int_equal(sp_free(pool, &local, fx.b), SP_ERR_BAD_POINTER);
    assert_int_equal(sp_free(pool, q, fx.b), SP_ERR_DOUBLE_FREE);
    moved(pool, &c, "bad_frees=2");
}

/* sp_pool_trim: trims and the bytes it gave back; the driver frees that did it. Nothing that
 * names a reclaim, a limit or an out-of-memory. */
static void trim_moves_trims(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 0, 0, UINT64_MAX);
    cache_small(pool, fx.a, 4); /* two slabs cached */
    counters c = read_counters(pool);
    SP(sp_pool_trim(pool, 0));
    moved(pool, &c, "trims=1,trimmed_bytes=4194304,driver_frees=2");
}

/* A free over the cache limit: its own counters, not trims. */
static void cache_limit_release_moves_its_counters(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 0, 0, 2 * MiB);
    void *p[4];
    for (int i = 0; i < 4; i++)
        SP(sp_alloc(pool, &p[i], MiB, fx.a));
    counters c = read_counters(pool);
    for (int i = 0; i < 4; i++) /* the third free passes the cap: the first slab goes back */
        SP(sp_free(pool, p[i], fx.a));
    moved(pool, &c, "frees=4,cache_limit_releases=1,cache_released_bytes=2097152,driver_frees=1");
}

/* The driver out of memory, the pool's own cache back, a retry that succeeds: oom_retries only
 * (no ooms, no reclaims: no other pool was asked). */
static void oom_retry_moves_oom_retries(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime();
    sp_pool *pool = pool_of(rt, "p", 0, 0, UINT64_MAX);
    cudaStream_t s = new_stream();
    cache_small(pool, s, 16); /* 8 slabs: 16 MiB cached */
    CK(cudasimSetDeviceMemory(0, 32 * MiB));
    counters c = read_counters(pool);
    void *big;
    SP(sp_alloc(pool, &big, 24 * MiB, s)); /* 16 + 24 > 32: refused once, then fits */
    moved(pool, &c, "allocs=1,driver_allocs=1,driver_frees=8,oom_retries=1");
    c = read_counters(pool);
    void *more;
    assert_int_equal(sp_alloc(pool, &more, 16 * MiB, s), SP_ERR_OUT_OF_MEMORY);
    moved(pool, &c, "ooms=1,oom_retries=1"); /* its (empty) cache back, retried, failed */
    SP(sp_free(pool, big, s));
    drop_stream(rt, s);
}

/* Another pool's out-of-memory: the victim counts the reclaim and its bytes; the pool that ran
 * out counts its retries. */
static void reclaim_moves_the_victims_counters(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime();
    sp_pool *victim = pool_of(rt, "victim", 0, 0, UINT64_MAX);
    sp_pool *needy = pool_of(rt, "needy", 0, 0, UINT64_MAX);
    cudaStream_t s = new_stream();
    cache_small(victim, s, 16); /* 16 MiB cached in the victim */
    CK(cudasimSetDeviceMemory(0, 32 * MiB));
    counters v = read_counters(victim), n = read_counters(needy);
    void *big;
    SP(sp_alloc(needy, &big, 24 * MiB, s));
    moved(victim, &v, "reclaims=1,reclaimed_bytes=16777216,driver_frees=8");
    moved(needy, &n, "allocs=1,driver_allocs=1,oom_retries=2"); /* own cache, then the reclaim */
    SP(sp_free(needy, big, s));
    drop_stream(rt, s);
}

/* The limit: a refusal now (after its own cache went back, retried), and one that never fits. */
static void limit_moves_limit_counters(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 8 * MiB, 0, UINT64_MAX);
    void *p, *q;
    SP(sp_alloc(pool, &p, 6 * MiB, fx.a));
    counters c = read_counters(pool);
    assert_int_equal(sp_alloc(pool, &q, 4 * MiB, fx.a), SP_ERR_LIMIT);
    moved(pool, &c, "limit_rejections=1,limit_retries=2"); /* two rungs gave its cache back */
    c = read_counters(pool);
    assert_int_equal(sp_alloc(pool, &q, 8 * MiB + 1, fx.a), SP_ERR_NEVER_FITS);
    moved(pool, &c, "limit_rejections=1"); /* at once: nothing could help */
    SP(sp_free(pool, p, fx.a));
}

/* Admission: admitted (its bytes), refused; a request end that records its fence. */
static void requests_move_admission_and_fence_counters(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 8 * MiB, 0, UINT64_MAX);
    sp_request_config cfg = SP_REQUEST_CONFIG_INIT;
    cfg.expected_bytes = 6 * MiB;
    sp_request r1, r2;
    counters c = read_counters(pool);
    SP(sp_request_begin_with(pool, fx.a, &cfg, &r1));
    moved(pool, &c, "admissions=1,admitted_bytes=6291456");
    c = read_counters(pool);
    assert_int_equal(sp_request_begin_with(pool, fx.a, &cfg, &r2), SP_ERR_LIMIT);
    moved(pool, &c, "admission_refusals=1");
    void *p;
    SP(sp_request_alloc(pool, r1, &p, 6 * MiB));
    c = read_counters(pool);
    gate *g = gate_new();
    gate_hold(g, fx.a); /* p's free stays pending */
    SP(sp_request_end(pool, r1, 0, NULL)); /* frees p; nobody wanted a's memory: no fence */
    moved(pool, &c, "frees=1");
    void *q;
    SP(sp_alloc(pool, &q, 2 * MiB, fx.b)); /* asks a (busy), marks it, grows */
    SP(sp_request_begin(pool, fx.a, NULL, &r2));
    c = read_counters(pool);
    SP(sp_request_end(pool, r2, 0, NULL)); /* a was wanted: one fence behind its frees */
    moved(pool, &c, "fences_recorded=1");
    gate_open(g);
    SP(sp_free(pool, q, fx.b));
}

/* A declared capture: the allocation bypasses the caches; its free goes straight back. */
static void capture_moves_capture_bypasses(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 0, 0, UINT64_MAX);
    SP(sp_stream_capture_begin(fx.rt, fx.a));
    counters c = read_counters(pool);
    void *p;
    SP(sp_alloc(pool, &p, 1000, fx.a));
    moved(pool, &c, "allocs=1,driver_allocs=1,capture_bypasses=1");
    c = read_counters(pool);
    SP(sp_free(pool, p, fx.a));
    moved(pool, &c, "frees=1,driver_frees=1");
    SP(sp_stream_capture_end(fx.rt, fx.a));
}

/* The driver refuses a segment back at a trim: kept, counted as a refusal; no bytes trimmed. */
static void refused_give_back_moves_give_back_failures(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "p", 0, 0, UINT64_MAX);
    cache_small(pool, fx.a, 2); /* one slab */
    CK(cudasimInjectFault("cudaFreeAsync", 1, cudaErrorInvalidValue, 0));
    counters c = read_counters(pool);
    assert_int_equal(sp_pool_trim(pool, 0), SP_ERR_CUDA);
    moved(pool, &c, "trims=1,give_back_failures=1");
    cudasimClearFaults();
}

TEST_MAIN("tests",
    FX_EXACT(calls_move_their_counters),
    FX_EXACT(trim_moves_trims),
    FX_EXACT(cache_limit_release_moves_its_counters),
    TRACKED(oom_retry_moves_oom_retries),
    TRACKED(reclaim_moves_the_victims_counters),
    FX_EXACT(limit_moves_limit_counters),
    FX_EXACT(requests_move_admission_and_fence_counters),
    FX_EXACT(capture_moves_capture_bypasses),
    FX_EXACT(refused_give_back_moves_give_back_failures)
)
