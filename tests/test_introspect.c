/* Introspection: per-stream figures, peak resets, pointer queries, sp_free_any, stream labels
 * (in the OOM report, the trace and sp_stream_name) and the dump of live allocations. Exact
 * byte counts: small requests are held at their 256-byte class, a fresh slab is 2 MiB and a
 * 3 MiB request gets a segment of its own size. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"

static const size_t MiB = 1024 * 1024;

static sp_stream_usage usage_of(sp_pool *pool, cudaStream_t s)
{
    sp_stream_usage u = {.size = sizeof u};
    SP(sp_stream_stats(pool, s, &u));
    assert_int_equal(u.size, sizeof u);
    assert_int_equal(u.version, SP_STREAM_STATS_VERSION);
    return u;
}

static void stream_stats_follow_each_stream(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "p", NULL, &pool));
    cudaStream_t s1 = new_stream(), s2 = new_stream();
    SP(sp_stream_set_name(fx.rt, s1, "prefill"));
    sp_stream_usage none = {.size = sizeof none};
    assert_int_equal(sp_stream_stats(pool, s1, &none), SP_ERR_NOT_FOUND); /* not seen yet */

    void *a, *b, *c, *d;
    SP(sp_alloc(pool, &a, 1000, s1));         /* fresh slab: 1024 bytes live */
    SP(sp_free(pool, a, s1));
    SP(sp_alloc(pool, &b, 900, s1));          /* the same block: a hit */
    assert_ptr_equal(a, b);
    SP(sp_alloc(pool, &c, 3 * MiB, s1));      /* a segment of its own, 4 MiB */
    SP(sp_free(pool, c, s2));                 /* freed on another stream: s1 still counts it */
    sp_stream_usage u1 = usage_of(pool, s1);
    assert_int_equal(u1.requested, 900);
    assert_int_equal(u1.active, 1024);
    assert_int_equal(u1.requested_peak, 900 + 3 * MiB);
    assert_int_equal(u1.active_peak, 1024 + 3 * MiB);
    assert_int_equal(u1.allocs, 3);
    assert_int_equal(u1.hits, 1);
    assert_int_equal(u1.frees, 1);
    /* the fresh slab's rest and the segment's last MiB (segments are whole 2 MiB driver
     * pages): ordered on s1 only */
    assert_int_equal(u1.cached, 3 * MiB - 1024);
    assert_string_equal(u1.name, "prefill");
    sp_stream_usage u2 = usage_of(pool, s2);
    assert_int_equal(u2.requested, 0);
    assert_int_equal(u2.allocs, 0);
    assert_int_equal(u2.frees, 1);
    assert_int_equal(u2.cached, 3 * MiB);        /* the segment, tagged with its free on s2 */
    assert_string_equal(u2.name, "");

    SP(sp_free(pool, b, s1));
    CK(cudaStreamSynchronize(s1));
    SP(sp_alloc(pool, &d, 1000, s2));         /* s1's block behind a completed fence */
    assert_ptr_equal(d, a);
    u1 = usage_of(pool, s1);
    u2 = usage_of(pool, s2);
    assert_int_equal(u1.steals_given, 1);
    assert_int_equal(u1.steals_taken, 0);
    assert_int_equal(u2.steals_taken, 1);
    assert_int_equal(u2.steals_given, 0);
    assert_int_equal(u2.requested, 1000);
    assert_int_equal(u2.active, 1024);
    assert_int_equal(u1.requested, 0);
    assert_int_equal(stats_of(pool).cross_stream_reuses, 1);

    /* a caller built against a shorter struct gets what fits */
    sp_stream_usage shortened = {.size = offsetof(sp_stream_usage, active)};
    SP(sp_stream_stats(pool, s2, &shortened));
    assert_int_equal(shortened.size, offsetof(sp_stream_usage, active));
    assert_int_equal(shortened.requested, 1000);
    assert_int_equal(shortened.active, 0);
    sp_stream_usage tiny = {.size = 4};
    assert_int_equal(sp_stream_stats(pool, s2, &tiny), SP_ERR_INVALID);

    SP(sp_free(pool, d, s2));
    drop_stream(fx.rt, s1);
    drop_stream(fx.rt, s2);
    assert_int_equal(sp_stream_stats(pool, s1, &none), SP_ERR_NOT_FOUND); /* released */
    SP(sp_pool_destroy(pool));
}

/* A steal is a steal for the streams as for the pool (cross_stream_reuses) when the memory
 * taken is the rest of a range the other stream freed: a large block freed on s1, partly
 * reused by s1, whose remainder s2 takes behind s1's completed fence. */
static void stream_stats_count_steals_of_a_split_range(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "p", NULL, &pool));
    void *a, *b, *c;
    SP(sp_alloc(pool, &a, 3 * MiB, fx.a));      /* a segment of 4 MiB */
    SP(sp_free(pool, a, fx.a));
    SP(sp_alloc(pool, &b, 3 * MiB / 2, fx.a));  /* the front of s1's free range */
    assert_ptr_equal(b, a);
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_alloc(pool, &c, 2 * MiB, fx.b));      /* the rest, behind s1's completed fence */
    assert_ptr_equal(c, (char *)a + 3 * MiB / 2);
    assert_int_equal(stats_of(pool).cross_stream_reuses, 1);
    sp_stream_usage u1 = usage_of(pool, fx.a), u2 = usage_of(pool, fx.b);
    assert_int_equal(u2.steals_taken, 1);
    assert_int_equal(u1.steals_given, 1);
    assert_int_equal(u2.hits + u2.steals_taken, 1);
    SP(sp_free(pool, b, fx.a));
    SP(sp_free(pool, c, fx.b));
    SP(sp_pool_destroy(pool));
}

static void reset_peaks_moves_peaks_to_current(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "p", NULL, &pool));
    void *big, *small;
    SP(sp_alloc(pool, &big, 3 * MiB, fx.a));
    SP(sp_alloc(pool, &small, 1000, fx.a));
    SP(sp_free(pool, big, fx.a));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.requested.peak, 3 * MiB + 1000);
    assert_int_equal(st.requested.current, 1000);
    assert_int_equal(st.held.current, 6 * MiB); /* a 2 MiB slab, a 4 MiB segment */

    SP(sp_pool_reset_peaks(pool));
    st = stats_of(pool);
    assert_int_equal(st.requested.peak, 1000);
    assert_int_equal(st.active.peak, 1024);
    assert_int_equal(st.held.peak, 6 * MiB);
    assert_int_equal(st.cached.peak, 6 * MiB - 1024);
    assert_int_equal(st.requested.total, 3 * MiB + 1000); /* totals stay */
    sp_stream_usage u = usage_of(pool, fx.a);
    assert_int_equal(u.requested_peak, 1000);
    assert_int_equal(u.active_peak, 1024);

    /* the next peak is what follows the reset */
    void *mid;
    SP(sp_alloc(pool, &mid, 2 * MiB, fx.a)); /* from the cached 4 MiB segment */
    SP(sp_free(pool, mid, fx.a));
    st = stats_of(pool);
    assert_int_equal(st.requested.peak, 2 * MiB + 1000);
    assert_int_equal(usage_of(pool, fx.a).requested_peak, 2 * MiB + 1000);

    sp_stats rts = {.size = sizeof rts};
    SP(sp_runtime_stats(fx.rt, &rts));
    assert_int_equal(rts.requested.peak, 3 * MiB + 1000); /* the runtime's was not reset */
    SP(sp_runtime_reset_peaks(fx.rt));
    SP(sp_runtime_stats(fx.rt, &rts));
    assert_int_equal(rts.requested.peak, 1000);
    assert_int_equal(rts.held.peak, rts.held.current);
    assert_int_equal(stats_of(pool).requested.peak, 1000);
    assert_int_equal(sp_pool_reset_peaks(NULL), SP_ERR_INVALID);
    assert_int_equal(sp_runtime_reset_peaks(NULL), SP_ERR_INVALID);

    SP(sp_free(pool, small, fx.a));
    SP(sp_pool_destroy(pool));
}

static sp_ptr_info info_of(sp_runtime *rt, const void *p)
{
    sp_ptr_info info = {.size = sizeof info};
    SP(sp_pointer_info(rt, p, &info));
    return info;
}

static void pointer_info_and_free_any(void **state)
{
    (void)state;
    sp_pool *pool, *other;
    SP(sp_pool_create(fx.rt, "p", NULL, &pool));
    SP(sp_pool_create(fx.rt, "q", NULL, &other));
    void *p, *big, *q;
    SP(sp_alloc(pool, &p, 1000, fx.a));
    SP(sp_alloc(pool, &big, 5 * MiB + 1, fx.b));
    SP(sp_alloc(other, &q, 300, fx.a));

    sp_ptr_info i = info_of(fx.rt, p);
    assert_int_equal(i.state, SP_POINTER_LIVE);
    assert_ptr_equal(i.pool, pool);
    assert_int_equal(i.requested, 1000);
    assert_int_equal(i.usable, 1024);
    assert_ptr_equal(i.stream, fx.a);
    i = info_of(fx.rt, big);
    assert_int_equal(i.state, SP_POINTER_LIVE);
    assert_int_equal(i.requested, 5 * MiB + 1);
    assert_int_equal(i.usable, 5 * MiB + 512);
    assert_ptr_equal(i.stream, fx.b);
    i = info_of(fx.rt, (char *)p + 256); /* inside a block: not a pointer streampool handed out */
    assert_int_equal(i.state, SP_POINTER_UNKNOWN);
    assert_null(i.pool);
    sp_ptr_info bad = {.size = 2};
    assert_int_equal(sp_pointer_info(fx.rt, p, &bad), SP_ERR_INVALID);

    /* sp_free_any frees on the allocation stream: held behind a gate, s1 reuses the block at
     * once (its own free) while s2 cannot (the free there has not completed) */
    gate *g = gate_new();
    gate_hold(g, fx.a);
    SP(sp_free_any(pool, p));
    i = info_of(fx.rt, p);
    assert_int_equal(i.state, SP_POINTER_CACHED);
    assert_ptr_equal(i.pool, pool);
    assert_int_equal(i.requested, 0);
    void *on_s2, *on_s1;
    SP(sp_alloc(pool, &on_s2, 1000, fx.b));
    assert_ptr_not_equal(on_s2, p);
    SP(sp_alloc(pool, &on_s1, 1000, fx.a));
    assert_ptr_equal(on_s1, p);
    assert_int_equal(usage_of(pool, fx.a).frees, 1);
    assert_int_equal(usage_of(pool, fx.b).frees, 0);
    gate_open(g);
    CK(cudaStreamSynchronize(fx.a));

    SP(sp_free_any(pool, on_s1));
    uint64_t bad_before = stats_of(pool).bad_frees;
    assert_int_equal(sp_free_any(pool, on_s1), SP_ERR_DOUBLE_FREE);
    assert_int_equal(sp_free_any(pool, q), SP_ERR_WRONG_POOL);
    assert_int_equal(info_of(fx.rt, q).state, SP_POINTER_LIVE); /* untouched */
    assert_int_equal(sp_free_any(pool, (char *)q + 256), SP_ERR_BAD_POINTER);
    assert_int_equal(stats_of(pool).bad_frees, bad_before + 3);
    SP(sp_free_any(pool, NULL));
    assert_int_equal(sp_free_any(NULL, q), SP_ERR_INVALID);

    SP(sp_free_any(pool, on_s2));
    SP(sp_free_any(pool, big));
    SP(sp_free_any(other, q));
    SP(sp_pool_destroy(pool));
    SP(sp_pool_destroy(other));
}

/* A block allocated on another thread's cudaStreamPerThread cannot be freed from here: this
 * thread's cudaStreamPerThread is another stream. The owning thread can. */
typedef struct {
    sp_pool *pool;
    void *p;
    pthread_barrier_t step;
    int rc;
} per_thread_ctx;

static void *per_thread_owner(void *arg)
{
    per_thread_ctx *x = arg;
    x->rc = sp_alloc(x->pool, &x->p, 4096, cudaStreamPerThread);
    pthread_barrier_wait(&x->step); /* the main thread tries */
    pthread_barrier_wait(&x->step);
    if (x->rc == SP_OK)
        x->rc = sp_free_any(x->pool, x->p);
    if (x->rc == SP_OK)
        x->rc = cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess ? SP_OK : SP_ERR_CUDA;
    return NULL;
}

static void free_any_refuses_another_threads_stream(void **state)
{
    (void)state;
    per_thread_ctx x = {.pool = fx.pool};
    pthread_barrier_init(&x.step, NULL, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, per_thread_owner, &x), 0);
    pthread_barrier_wait(&x.step);
    SP(x.rc);
    assert_int_equal(sp_free_any(fx.pool, x.p), SP_ERR_NOT_SUPPORTED);
    assert_int_equal(info_of(fx.rt, x.p).state, SP_POINTER_LIVE);
    assert_ptr_equal(info_of(fx.rt, x.p).stream, cudaStreamPerThread);
    pthread_barrier_wait(&x.step);
    pthread_join(t, NULL);
    SP(x.rc);
    assert_int_equal(info_of(fx.rt, x.p).state, SP_POINTER_CACHED);
    pthread_barrier_destroy(&x.step);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *text = calloc(1, 1 << 16);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static void stream_labels_in_reports(void **state)
{
    (void)state;
    cudaStream_t s = new_stream(), other = new_stream();
    char name[80];
    assert_int_equal(sp_stream_name(fx.rt, s, name, sizeof name), 0);
    assert_string_equal(name, "");
    assert_int_equal(sp_stream_set_name(fx.rt, s, "bad\nlabel"), SP_ERR_INVALID);
    assert_int_equal(sp_stream_set_name(fx.rt, s, ""), SP_ERR_INVALID);
    char long_name[SP_STREAM_NAME_MAX + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(sp_stream_set_name(fx.rt, s, long_name), SP_ERR_INVALID);
    long_name[SP_STREAM_NAME_MAX] = '\0';
    SP(sp_stream_set_name(fx.rt, s, long_name)); /* exactly the maximum */
    assert_int_equal(sp_stream_name(fx.rt, s, name, sizeof name), SP_STREAM_NAME_MAX);
    SP(sp_stream_set_name(fx.rt, s, "decode \"7\" \xe6\xa8\xa1"));
    assert_int_equal(sp_stream_name(fx.rt, s, name, 7), strlen("decode \"7\" \xe6\xa8\xa1"));
    assert_string_equal(name, "decode");    /* truncated, NUL-terminated */
    SP(sp_stream_set_name(fx.rt, other, "other"));
    SP(sp_stream_set_name(fx.rt, other, NULL)); /* removed */
    assert_int_equal(sp_stream_name(fx.rt, other, name, sizeof name), 0);

    /* the OOM report: larger than any device, so it fails at once, on a GPU too */
    void *p = (void *)0x1;
    assert_int_equal(sp_alloc(fx.pool, &p, (size_t)1 << 45, s), SP_ERR_OUT_OF_MEMORY);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_ptr_equal(r.stream, s);
    assert_string_equal(r.stream_name, "decode \"7\" \xe6\xa8\xa1");
    char json[4096];
    sp_oom_report_json(&r, json, sizeof json);
    assert_non_null(strstr(json, ",\"stream_name\":\"decode \\\"7\\\" \xe6\xa8\xa1\"}"));

    /* the trace: the StreamName column, quoted as CSV, and the JSON argument */
    char path[64];
    snprintf(path, sizeof path, "/tmp/sp-introspect-%d.csv", (int)getpid());
    SP(sp_runtime_trace_start(fx.rt, path));
    void *a, *b;
    SP(sp_alloc(fx.pool, &a, 1000, s));
    SP(sp_alloc(fx.pool, &b, 1000, other));
    SP(sp_free(fx.pool, a, s));
    SP(sp_free(fx.pool, b, other));
    SP(sp_runtime_trace_stop(fx.rt));
    char *csv = slurp(path);
    char expect[512];
    snprintf(expect, sizeof expect, ",allocate,%p,1000,%p,\"default\",1024,fresh,"
                                    "\"decode \"\"7\"\" \xe6\xa8\xa1\"\n", a, (void *)s);
    assert_non_null(strstr(csv, expect));
    snprintf(expect, sizeof expect, ",free,%p,1000,%p,\"default\",1024,free,\n", b,
             (void *)other);
    assert_non_null(strstr(csv, expect));
    free(csv);
    char jpath[80];
    snprintf(jpath, sizeof jpath, "%s.json", path);
    char *trace_json = slurp(jpath);
    assert_non_null(strstr(trace_json, "\"stream_name\":\"decode \\\"7\\\" \xe6\xa8\xa1\"}}"));
    free(trace_json);
    remove(path);
    remove(jpath);

    /* a released stream's label goes with it: a new stream may reuse the handle value */
    drop_stream(fx.rt, s);
    assert_int_equal(sp_stream_name(fx.rt, s, name, sizeof name), 0);
    drop_stream(fx.rt, other);
}

typedef struct {
    sp_live_alloc rows[8];
    char names[8][SP_STREAM_NAME_MAX + 1];
    int n, stop_after;
} live_rows;

static int keep_row(const sp_live_alloc *a, void *user)
{
    live_rows *l = user;
    l->rows[l->n] = *a;
    snprintf(l->names[l->n], sizeof l->names[0], "%s", a->stream_name);
    l->n++;
    return l->n == l->stop_after;
}

static void dump_live_lists_outstanding_allocations(void **state)
{
    (void)state;
    sp_pool *pool, *other;
    SP(sp_pool_create(fx.rt, "p", NULL, &pool));
    SP(sp_pool_create(fx.rt, "q", NULL, &other));
    SP(sp_stream_set_name(fx.rt, fx.a, "prefill"));
    void *x, *y, *z, *w, *q;
    SP(sp_alloc(pool, &x, 1000, fx.a));
    SP(sp_alloc(pool, &y, 5000, fx.a));
    SP(sp_alloc(pool, &z, 3 * MiB, fx.b));
    SP(sp_alloc(pool, &w, 100, fx.a));
    SP(sp_free(pool, w, fx.a));          /* freed: not listed */
    SP(sp_alloc(other, &q, 100, fx.a));  /* another pool: not listed */

    live_rows l = {.stop_after = 0};
    assert_int_equal(sp_pool_dump_live(pool, keep_row, &l), 3);
    assert_int_equal(l.n, 3);
    /* oldest first: x and y are 2 and 1 allocations old on s1; z is s2's newest */
    assert_ptr_equal(l.rows[0].ptr, x);
    assert_int_equal(l.rows[0].requested, 1000);
    assert_int_equal(l.rows[0].usable, 1024);
    assert_ptr_equal(l.rows[0].stream, fx.a);
    assert_string_equal(l.names[0], "prefill");
    assert_int_equal(l.rows[0].age_allocs, 2);
    assert_ptr_equal(l.rows[1].ptr, y);
    assert_int_equal(l.rows[1].requested, 5000);
    assert_int_equal(l.rows[1].usable, 5120);
    assert_int_equal(l.rows[1].age_allocs, 1);
    assert_ptr_equal(l.rows[2].ptr, z);
    assert_int_equal(l.rows[2].requested, 3 * MiB);
    assert_int_equal(l.rows[2].usable, 3 * MiB);
    assert_ptr_equal(l.rows[2].stream, fx.b);
    assert_string_equal(l.names[2], "");
    assert_int_equal(l.rows[2].age_allocs, 0);

    live_rows first = {.stop_after = 1};
    assert_int_equal(sp_pool_dump_live(pool, keep_row, &first), 1); /* stopped by the callback */
    assert_ptr_equal(first.rows[0].ptr, x);
    assert_int_equal(sp_pool_dump_live(pool, NULL, NULL), SP_ERR_INVALID);

    SP(sp_free(pool, x, fx.a));
    SP(sp_free(pool, y, fx.a));
    SP(sp_free(pool, z, fx.b));
    SP(sp_free(other, q, fx.a));
    live_rows empty = {.stop_after = 0};
    assert_int_equal(sp_pool_dump_live(pool, keep_row, &empty), 0);
    SP(sp_pool_destroy(pool));
    SP(sp_pool_destroy(other));
}

/* Threads allocate on their own streams and free each other's blocks: every stream's figures
 * return to zero, and the steals each stream took are the ones others gave. */
#define MIX_THREADS 4
#define MIX_ROUNDS 2000

typedef struct {
    sp_pool *pool;
    cudaStream_t streams[MIX_THREADS];
    pthread_mutex_t lock;
    void *handoff[MIX_THREADS * 8];
    int n;
    atomic_int failures;
} mix_ctx;

typedef struct {
    mix_ctx *x;
    int id;
} mix_arg;

static void *mix_thread(void *arg)
{
    mix_arg *a = arg;
    mix_ctx *x = a->x;
    cudaStream_t mine = x->streams[a->id];
    for (int r = 0; r < MIX_ROUNDS; r++) {
        void *p = NULL, *other = NULL;
        size_t bytes = (size_t)(r % 7 + 1) * 700 + (r % 50 == 0 ? 2 * MiB : 0);
        if (sp_alloc(x->pool, &p, bytes, mine) != SP_OK)
            atomic_fetch_add(&x->failures, 1);
        pthread_mutex_lock(&x->lock);
        if (x->n > 0 && (x->n == (int)(sizeof x->handoff / sizeof x->handoff[0]) || (r & 1))) {
            other = x->handoff[0]; /* one handed off, most often by another thread */
            x->handoff[0] = x->handoff[--x->n];
        }
        if (p)
            x->handoff[x->n++] = p;
        pthread_mutex_unlock(&x->lock);
        if (other && sp_free_any(x->pool, other) != SP_OK) /* on its allocation stream */
            atomic_fetch_add(&x->failures, 1);
        if (r % 3 == 0) { /* and one freed on this thread's stream, whoever allocated it */
            pthread_mutex_lock(&x->lock);
            other = x->n ? x->handoff[--x->n] : NULL;
            pthread_mutex_unlock(&x->lock);
            if (other && sp_free(x->pool, other, mine) != SP_OK)
                atomic_fetch_add(&x->failures, 1);
        }
    }
    return NULL;
}

static void stream_figures_balance_across_threads(void **state)
{
    (void)state;
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt)); /* default flush: figures batch per stream */
    mix_ctx x = {.n = 0};
    SP(sp_pool_create(rt, "mix", NULL, &x.pool));
    pthread_mutex_init(&x.lock, NULL);
    for (int i = 0; i < MIX_THREADS; i++)
        x.streams[i] = new_stream();
    pthread_t t[MIX_THREADS];
    mix_arg args[MIX_THREADS];
    for (int i = 0; i < MIX_THREADS; i++) {
        args[i] = (mix_arg){&x, i};
        assert_int_equal(pthread_create(&t[i], NULL, mix_thread, &args[i]), 0);
    }
    for (int i = 0; i < MIX_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&x.failures), 0);
    for (int i = 0; i < x.n; i++)
        SP(sp_free(x.pool, x.handoff[i], x.streams[0]));
    uint64_t allocs = 0, frees = 0, taken = 0, given = 0;
    for (int i = 0; i < MIX_THREADS; i++) {
        sp_stream_usage u = usage_of(x.pool, x.streams[i]);
        assert_int_equal(u.requested, 0);
        assert_int_equal(u.active, 0);
        assert_true(u.requested_peak > 0);
        allocs += u.allocs;
        frees += u.frees;
        taken += u.steals_taken;
        given += u.steals_given;
    }
    sp_stats st = stats_of(x.pool);
    assert_int_equal(allocs, MIX_THREADS * MIX_ROUNDS);
    assert_int_equal(allocs, st.allocs);
    assert_int_equal(frees, st.frees);
    assert_int_equal(taken, given);
    assert_int_equal(st.requested.current, 0);
    for (int i = 0; i < MIX_THREADS; i++)
        drop_stream(rt, x.streams[i]);
    pthread_mutex_destroy(&x.lock);
    SP(sp_pool_destroy(x.pool));
    SP(sp_runtime_destroy(rt));
}

TEST_MAIN("tests",
    FX_EXACT(stream_stats_follow_each_stream),
    FX_EXACT(stream_stats_count_steals_of_a_split_range),
    FX_EXACT(reset_peaks_moves_peaks_to_current),
    FX_EXACT(pointer_info_and_free_any),
    FX_EXACT(free_any_refuses_another_threads_stream),
    FX_EXACT(stream_labels_in_reports),
    FX_EXACT(dump_live_lists_outstanding_allocations),
    RESET(stream_figures_balance_across_threads)
)
