/* Request scopes (sp_request_begin / sp_request_alloc / sp_request_end): what a request leaves
 * live is freed at its end and the figures say exactly what; its frees are settled for other
 * streams by one fence, or with no CUDA call at all when the server says it synchronized the
 * stream; a range is never handed to another stream before that; every misuse gets its own
 * error and changes nothing. Emulator-only: counts CUDA calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"

static const size_t MiB = (size_t)1 << 20;

static sp_pool *no_wait_pool(sp_runtime *rt, const char *name)
{
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    c.cross_stream = SP_CROSS_STREAM_NO_WAIT; /* another stream's pending range is never taken */
    sp_pool *pool;
    SP(sp_pool_create(rt, name, &c, &pool));
    return pool;
}

static unsigned long long fence_calls(void)
{
    return cudasimCallCount("cudaEventRecord") + cudasimCallCount("cudaEventQuery") +
           cudasimCallCount("cudaStreamQuery") + cudasimCallCount("cudaStreamSynchronize") +
           cudasimCallCount("cudaEventSynchronize") + cudasimCallCount("cudaStreamWaitEvent");
}

static unsigned long long all_calls(void)
{
    return fence_calls() + cudasimCallCount("cudaMallocFromPoolAsync") +
           cudasimCallCount("cudaFreeAsync");
}

/* A request that allocates a small, a medium and a huge block, frees one itself and leaves two:
 * the end frees both on the request's stream, and its figures and the pool's say so exactly. */
static void end_frees_what_is_left(void **state)
{
    (void)state;
    sp_request req = 0;
    SP(sp_request_begin(fx.pool, fx.a, "chat-1", &req));
    assert_true(req != 0);
    void *a, *b, *c;
    SP(sp_request_alloc(fx.pool, req, &a, 1000));
    SP(sp_request_alloc(fx.pool, req, &b, 2 * MiB));
    SP(sp_request_alloc(fx.pool, req, &c, 20 * MiB + 3));
    CK(cudaMemsetAsync(c, 7, 20 * MiB + 3, fx.a));
    SP(sp_free(fx.pool, b, fx.a));
    sp_stats before = stats_of(fx.pool);
    assert_int_equal(before.requested.current, 1000 + 20 * MiB + 3);
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(fx.pool, req, 0, &st));
    assert_int_equal(st.size, sizeof st);
    assert_int_equal(st.id, req);
    assert_int_equal(st.allocs, 3);
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.freed_at_end, 2);
    assert_int_equal(st.freed_at_end_bytes, 1000 + 20 * MiB + 3);
    assert_int_equal(st.requested_total, 1000 + 2 * MiB + 20 * MiB + 3);
    assert_int_equal(st.requested_peak, 1000 + 2 * MiB + 20 * MiB + 3);
    assert_true(st.misses >= 1 && st.misses <= 3); /* a fresh pool: no cache to hit yet */
    sp_stats after = stats_of(fx.pool);
    assert_int_equal(after.requested.current, 0);
    assert_int_equal(after.active.current, 0);
    assert_int_equal(after.frees, before.frees + 2);
    CK(cudaStreamSynchronize(fx.a));
}

/* A request whose allocations were all freed before its end: nothing freed there. */
static void end_of_a_clean_request_frees_nothing(void **state)
{
    (void)state;
    sp_request req;
    SP(sp_request_begin(fx.pool, fx.a, NULL, &req));
    void *p;
    SP(sp_request_alloc(fx.pool, req, &p, 4096));
    SP(sp_free(fx.pool, p, fx.a));
    sp_stats before = stats_of(fx.pool);
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(fx.pool, req, 0, &st));
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.freed_at_end, 0);
    assert_int_equal(st.freed_at_end_bytes, 0);
    assert_int_equal(stats_of(fx.pool).frees, before.frees);
    CK(cudaStreamSynchronize(fx.a));
}

/* The server's word that it synchronized the stream settles the request's frees with no CUDA
 * call at all, and another stream then reuses the range with none either. */
static void synchronized_end_settles_with_no_cuda_call(void **state)
{
    (void)state;
    sp_pool *pool = no_wait_pool(fx.rt, "sync");
    sp_request req;
    SP(sp_request_begin(pool, fx.a, "r", &req));
    void *p;
    SP(sp_request_alloc(pool, req, &p, 2 * MiB));
    CK(cudaMemsetAsync(p, 1, 2 * MiB, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    cudasimResetCallCounts();
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(pool, req, SP_REQUEST_SYNCHRONIZED, &st));
    assert_int_equal(st.freed_at_end, 1);
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(all_calls(), 0);
    void *q;
    SP(sp_alloc(pool, &q, 2 * MiB, fx.b));
    assert_ptr_equal(q, p);                 /* the settled range, to another stream */
    assert_int_equal(all_calls(), 0);       /* no query, no fence, no driver call */
    SP(sp_free(pool, q, fx.b));
    CK(cudaStreamSynchronize(fx.b));
}

/* Without the word, the end makes no call while no other stream wanted the stream's memory; once
 * another stream's miss wanted it (marked the stream), the next end records one fence behind all
 * the stream's frees (exactly one event record), and no range goes to another stream before that
 * fence completes: with the request's stream held by a gate, another stream gets other memory
 * (behind one query of that fence); once the gate opens and the fence completes, the range is
 * reused behind one query. */
static void one_fence_covers_a_request_and_holds_back_others(void **state)
{
    (void)state;
    sp_pool *pool = no_wait_pool(fx.rt, "fence");
    gate *g = gate_new();
    gate_hold(g, fx.a);
    sp_request req;
    SP(sp_request_begin(pool, fx.a, "held", &req));
    void *p[3];
    for (int i = 0; i < 3; i++) {
        SP(sp_request_alloc(pool, req, &p[i], 2 * MiB));
        CK(cudaMemsetAsync(p[i], i, 2 * MiB, fx.a));
    }
    SP(sp_free(pool, p[0], fx.a));
    cudasimResetCallCounts();
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(pool, req, 0, &st)); /* nobody wanted a's memory: no call */
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(all_calls(), 0);
    void *q;
    SP(sp_alloc(pool, &q, 2 * MiB, fx.b)); /* at the high-water mark: asks a, busy; marks a */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    for (int i = 0; i < 3; i++)
        assert_ptr_not_equal(q, p[i]); /* pending: never handed over */
    SP(sp_request_begin(pool, fx.a, "wanted", &req));
    cudasimResetCallCounts();
    SP(sp_request_end(pool, req, 0, &st)); /* a was marked: one fence behind all its frees */
    assert_int_equal(st.fences_recorded, 1);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 1);
    assert_int_equal(all_calls(), 1);
    void *q2;
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &q2, 2 * MiB, fx.b)); /* the fence, pending: one query, other memory */
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 0);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
    for (int i = 0; i < 3; i++)
        assert_ptr_not_equal(q2, p[i]);
    gate_open(g);
    CK(cudaStreamSynchronize(fx.a));
    CK(cudaStreamSynchronize(fx.b));
    uint64_t reuses = stats_of(pool).cross_stream_reuses;
    void *r;
    cudasimResetCallCounts();
    SP(sp_alloc(pool, &r, 2 * MiB, fx.b)); /* the fence, complete: a p range, behind one query */
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 1);
    assert_int_equal(all_calls(), 1);
    assert_true(r == p[0] || r == p[1] || r == p[2]);
    assert_int_equal(stats_of(pool).cross_stream_reuses, reuses + 1);
    SP(sp_free(pool, r, fx.b));
    SP(sp_free(pool, q2, fx.b));
    SP(sp_free(pool, q, fx.b));
    CK(cudaStreamSynchronize(fx.b));
    /* a third request with nothing freed since: no new fence */
    SP(sp_request_begin(pool, fx.a, "empty", &req));
    cudasimResetCallCounts();
    SP(sp_request_end(pool, req, 0, &st));
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(cudasimCallCount("cudaEventRecord"), 0);
}

/* An allocation of a request freed on another stream, in that stream's order, leaves the
 * request: the end does not free it again. */
static void a_block_freed_elsewhere_leaves_its_request(void **state)
{
    (void)state;
    sp_request req;
    SP(sp_request_begin(fx.pool, fx.a, NULL, &req));
    void *p, *q;
    SP(sp_request_alloc(fx.pool, req, &p, 300));
    SP(sp_request_alloc(fx.pool, req, &q, 300));
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_free(fx.pool, p, fx.b));
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(fx.pool, req, 0, &st));
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.freed_at_end, 1);
    assert_int_equal(st.freed_at_end_bytes, 300);
    assert_int_equal(stats_of(fx.pool).bad_frees, 0);
    CK(cudaDeviceSynchronize());
}

/* Every misuse gets its own error, and the request and the pool are as they were. */
static void misuse_gets_its_error_and_changes_nothing(void **state)
{
    (void)state;
    sp_pool *pool, *other;
    SP(sp_runtime_default_pool(fx.rt, &pool));
    SP(sp_pool_create(fx.rt, "other", NULL, &other));
    sp_request req, theirs;
    SP(sp_request_begin(pool, fx.a, NULL, &req));
    SP(sp_request_begin(other, fx.a, NULL, &theirs));
    void *p = NULL, *x = (void *)1;
    SP(sp_request_alloc(pool, req, &p, 5000));
    sp_stats before = stats_of(pool);
    /* another pool's request, with this pool */
    assert_int_equal(sp_request_alloc(pool, theirs, &x, 64), SP_ERR_WRONG_POOL);
    assert_ptr_equal(x, (void *)1);
    assert_int_equal(sp_request_end(pool, theirs, 0, NULL), SP_ERR_WRONG_POOL);
    assert_int_equal(sp_request_end(other, req, 0, NULL), SP_ERR_WRONG_POOL);
    /* ids no pool gave */
    assert_int_equal(sp_request_alloc(pool, 0, &x, 64), SP_ERR_NO_REQUEST);
    assert_int_equal(sp_request_end(pool, req + 1000, 0, NULL), SP_ERR_NO_REQUEST);
    /* bad arguments */
    assert_int_equal(sp_request_end(pool, req, 0x80, NULL), SP_ERR_INVALID);
    sp_request_stats small = {.size = 8};
    assert_int_equal(sp_request_end(pool, req, 0, &small), SP_ERR_INVALID);
    assert_int_equal(sp_request_alloc(pool, req, NULL, 64), SP_ERR_INVALID);
    assert_int_equal(sp_request_begin(NULL, fx.a, NULL, &req), SP_ERR_INVALID);
    sp_request unused = 0;
    assert_int_equal(sp_request_begin(pool, fx.a, "bad\nlabel", &unused), SP_ERR_INVALID);
    assert_int_equal(unused, 0);
    sp_stats mid = stats_of(pool);
    assert_int_equal(mid.allocs, before.allocs);
    assert_int_equal(mid.requested.current, before.requested.current);
    assert_int_equal(mid.frees, before.frees);
    /* the request is still open and whole */
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(pool, req, 0, &st));
    assert_int_equal(st.allocs, 1);
    assert_int_equal(st.freed_at_end, 1);
    /* ended: a second end and an allocation into it */
    assert_int_equal(sp_request_end(pool, req, 0, &st), SP_ERR_REQUEST_ENDED);
    assert_int_equal(sp_request_alloc(pool, req, &x, 64), SP_ERR_REQUEST_ENDED);
    assert_ptr_equal(x, (void *)1);
    assert_int_equal(stats_of(pool).requested.current, 0);
    assert_string_equal(sp_status_name(SP_ERR_REQUEST_ENDED), "SP_ERR_REQUEST_ENDED");
    assert_string_equal(sp_strerror(SP_ERR_NO_REQUEST), "no such request");
    SP(sp_request_end(other, theirs, 0, NULL));
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_pool_destroy(other));
}

/* A pool destroyed with an open, empty request frees it; one with live allocations is busy. */
static void pool_destroy_with_open_requests(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "t", NULL, &pool));
    sp_request req, empty;
    SP(sp_request_begin(pool, fx.a, NULL, &req));
    SP(sp_request_begin(pool, fx.a, NULL, &empty));
    void *p;
    SP(sp_request_alloc(pool, req, &p, 1 << 20));
    assert_int_equal(sp_pool_destroy(pool), SP_ERR_BUSY);
    SP(sp_request_end(pool, req, 0, NULL));
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_pool_destroy(pool)); /* the empty request goes with it (ASan: no leak) */
}

/* A request's end is in the trace, with its id. */
static void request_end_is_traced(void **state)
{
    (void)state;
    char path[] = "/tmp/sp_req_traceXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    SP(sp_runtime_trace_start(fx.rt, path));
    cudaStream_t s = new_stream();
    sp_request req;
    SP(sp_request_begin(fx.pool, s, NULL, &req));
    void *p;
    SP(sp_request_alloc(fx.pool, req, &p, 777));
    SP(sp_request_end(fx.pool, req, 0, NULL));
    SP(sp_runtime_trace_stop(fx.rt));
    char json[300];
    snprintf(json, sizeof json, "%s.json", path);
    FILE *f = fopen(json, "r");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "\"request\":%llu", (unsigned long long)req);
    assert_non_null(strstr(text, "\"name\":\"request end\""));
    assert_non_null(strstr(text, want));
    char csv[300];
    snprintf(csv, sizeof csv, "%s.csv", path);
    unlink(json);
    unlink(csv);
    unlink(path);
    CK(cudaStreamSynchronize(s));
    drop_stream(fx.rt, s);
}

TEST_MAIN("requests",
    FX_EXACT(end_frees_what_is_left),
    FX_EXACT(end_of_a_clean_request_frees_nothing),
    FX_EXACT(synchronized_end_settles_with_no_cuda_call),
    FX_EXACT(one_fence_covers_a_request_and_holds_back_others),
    FX_EXACT(a_block_freed_elsewhere_leaves_its_request),
    FX_EXACT(misuse_gets_its_error_and_changes_nothing),
    FX_EXACT(pool_destroy_with_open_requests),
    FX_EXACT(request_end_is_traced)
)
