/* streampool under CUDA graph capture (rules 24-26 of docs/cuda-semantics.md), portable: a
 * capture is invalidated by any illegal call on the capturing stream (a query, a synchronize, a
 * fence, a cudaFreeAsync of memory from outside the capture), so a capture that ends with
 * cudaSuccess and a graph that replays are the proof that streampool touched nothing it must not.
 * The lock test counts this thread's pthread_mutex_lock calls through an interposed wrapper. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

/* ---- counting this thread's mutex locks ---- */

static _Thread_local bool counting_locks;
static _Thread_local long mutex_locks;

int pthread_mutex_lock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (counting_locks)
        mutex_locks++;
    return real(m);
}

/* ---- fixture: the runtime and any capture left open are torn down even after a failure ---- */

typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t capturing; /* a stream whose capture a failed test may have left open */
    cudaStream_t declared;  /* a stream declared capturing a failed test may have left */
    bool is_declared;
} fixture;

static int setup_with(void **state, sp_capture_check check)
{
    fixture *f = calloc(1, sizeof *f);
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.capture_check = check;
    cfg.stats_flush_bytes = 0;
    if (!f || sp_runtime_create(0, &cfg, &f->rt) != SP_OK ||
        sp_runtime_default_pool(f->rt, &f->pool) != SP_OK)
        return -1;
    *state = f;
    return 0;
}

static int setup_declared(void **state)
{
    return setup_with(state, SP_CAPTURE_DECLARED);
}

static int setup_always(void **state)
{
    return setup_with(state, SP_CAPTURE_ALWAYS);
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    if (f->capturing) {
        cudaGraph_t g = NULL;
        (void)cudaStreamEndCapture(f->capturing, &g);
        if (g)
            (void)cudaGraphDestroy(g);
    }
    if (f->is_declared)
        (void)sp_stream_capture_end(f->rt, f->declared);
    (void)cudaDeviceSynchronize();
    int rc = f->rt ? sp_runtime_destroy(f->rt) : SP_OK;
    reset_device(NULL);
    free(f);
    return rc == SP_OK ? 0 : -1;
}

/* Ends the capture on s, checks it stayed valid, and replays the graph twice. */
static void end_and_replay(fixture *f, cudaStream_t s, atomic_int *runs)
{
    cudaGraph_t graph = NULL;
    CK(cudaStreamEndCapture(s, &graph));
    f->capturing = NULL;
    assert_non_null(graph);
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; i++) /* rule 26: the graph frees its own allocation each launch */
        CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    assert_int_equal(atomic_load(runs), 2);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
}

static void assert_exact(sp_pool *pool)
{
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, st.active.current + st.cached.current);
    assert_int_equal(st.held.current, st.segment_bytes + st.slab_bytes);
}

/* Declared capture: blocks allocated before it and freed during it are kept aside (never
 * cudaFreeAsync inside the capture, never handed to another stream), the capture's own
 * allocation is a graph node, other streams keep allocating, trimming and releasing, and after
 * the capture the kept blocks serve the stream again. */
static void declared_capture_keeps_blocks_aside(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = new_stream(), t = new_stream(), u = new_stream();
    void *small, *large, *other;
    SP(sp_alloc(pool, &small, 64 * KiB, s));
    SP(sp_alloc(pool, &large, 4 * MiB, s));
    CK(cudaMemsetAsync(small, 1, 64 * KiB, s));
    CK(cudaMemsetAsync(large, 2, 4 * MiB, s));
    SP(sp_alloc(pool, &other, 64 * KiB, u)); /* u: a stream released during the capture */
    SP(sp_free(pool, other, u));
    uint64_t held_before = stats_of(pool).held.current;

    atomic_int runs = 0;
    SP(sp_stream_capture_begin(f->rt, s));
    f->declared = s, f->is_declared = true;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    f->capturing = s;
    CK(cudaMemsetAsync(small, 3, 64 * KiB, s)); /* captured uses of pre-capture blocks */
    CK(cudaMemsetAsync(large, 4, 4 * MiB, s));
    SP(sp_free(pool, small, s));
    SP(sp_free(pool, large, s));
    void *g;
    SP(sp_alloc(pool, &g, 64 * KiB, s)); /* a graph allocation: straight to the driver */
    CK(cudaMemsetAsync(g, 5, 64 * KiB, s));
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    SP(sp_free(pool, g, s));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.capture_bypasses, 1);
    assert_int_equal(st.held.current, held_before); /* the graph's memory is the graph's */
    assert_int_equal(st.active.current, 0);

    /* other streams meanwhile: no kept block is handed out, trim and release work */
    void *a, *b;
    SP(sp_alloc(pool, &a, 64 * KiB, t));
    SP(sp_alloc(pool, &b, 4 * MiB, t));
    assert_ptr_not_equal(a, small);
    assert_ptr_not_equal(b, large);
    SP(sp_free(pool, a, t));
    SP(sp_free(pool, b, t));
    SP(sp_pool_trim(pool, 0));
    assert_int_equal(stats_of(pool).segments, 1); /* t's went back; s's is kept aside */
    SP(sp_stream_release(f->rt, u)); /* a fence on u: legal, u is not capturing */
    CK(cudaStreamSynchronize(u));
    CK(cudaStreamDestroy(u));
    assert_exact(pool);

    end_and_replay(f, s, &runs);
    SP(sp_stream_capture_end(f->rt, s));
    f->is_declared = false;
    /* back on s: the kept blocks are the stream's again */
    void *again, *again_large;
    SP(sp_alloc(pool, &again, 64 * KiB, s));
    SP(sp_alloc(pool, &again_large, 4 * MiB, s));
    assert_ptr_equal(again_large, large);
    SP(sp_free(pool, again, s));
    SP(sp_free(pool, again_large, s));
    assert_exact(pool);
    drop_stream(f->rt, s);
    drop_stream(f->rt, t);
}

/* SP_CAPTURE_ALWAYS and a capture streampool was not told about: misses on another stream
 * must not query, fence or synchronize the capturing stream to steal its cached blocks, nor may
 * a trim; the capture's frees of earlier blocks are kept aside until its stream is used again
 * after the capture. */
static void undeclared_capture_is_never_probed(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = new_stream(), t = new_stream();
    void *p, *q, *kept;
    SP(sp_alloc(pool, &p, 64 * KiB, s));
    SP(sp_alloc(pool, &q, 4 * MiB, s));
    SP(sp_alloc(pool, &kept, 128 * KiB, s));
    SP(sp_free(pool, p, s)); /* cached on s, pending: stealing it means asking about s */
    SP(sp_free(pool, q, s));

    atomic_int runs = 0;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    f->capturing = s;
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    SP(sp_free(pool, kept, s)); /* kept aside, no cudaFreeAsync in the capture */
    void *x, *y;
    SP(sp_alloc(pool, &x, 64 * KiB, t));
    SP(sp_alloc(pool, &y, 4 * MiB, t));
    SP(sp_pool_trim(pool, 0));
    SP(sp_free(pool, x, t));
    SP(sp_free(pool, y, t));
    void *g;
    SP(sp_alloc(pool, &g, 1 * MiB + 1, s));
    SP(sp_free(pool, g, s));
    assert_int_equal(stats_of(pool).capture_bypasses, 1);
    end_and_replay(f, s, &runs);

    void *back;
    SP(sp_alloc(pool, &back, 128 * KiB, s)); /* sees the capture over: the kept block returns */
    SP(sp_free(pool, back, s));
    assert_exact(pool);
    drop_stream(f->rt, s);
    drop_stream(f->rt, t);
}

/* While a capture is declared, another stream's allocations and frees served by its cache take
 * no mutex (the capture check is one flag in the stream's own cache). */
static void declared_capture_keeps_hot_path_lock_free(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = new_stream(), t = new_stream();
    void *p;
    SP(sp_alloc(pool, &p, 4 * KiB, t)); /* warm: t's cache and this thread's memo */
    SP(sp_free(pool, p, t));
    sp_pool *other;
    SP(sp_pool_create(f->rt, "other", NULL, &other));
    SP(sp_stream_capture_begin(f->rt, s));
    f->declared = s, f->is_declared = true;
    /* destroying needs a device synchronize a capture forbids: refused until the end */
    assert_int_equal(sp_pool_destroy(other), SP_ERR_BUSY);
    assert_int_equal(sp_runtime_destroy(f->rt), SP_ERR_BUSY);
    mutex_locks = 0;
    counting_locks = true;
    for (int i = 0; i < 100; i++) {
        if (sp_alloc(pool, &p, 4 * KiB, t) != SP_OK || sp_free(pool, p, t) != SP_OK)
            break;
    }
    counting_locks = false;
    assert_int_equal(mutex_locks, 0);
    assert_int_equal(stats_of(pool).same_stream_hits, 100);
    SP(sp_stream_capture_end(f->rt, s));
    f->is_declared = false;
    SP(sp_pool_destroy(other));
    drop_stream(f->rt, s);
    drop_stream(f->rt, t);
}

int main(void)
{
    unsetenv("SP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(declared_capture_keeps_blocks_aside, setup_declared,
                                        teardown),
        cmocka_unit_test_setup_teardown(undeclared_capture_is_never_probed, setup_always, teardown),
        cmocka_unit_test_setup_teardown(declared_capture_keeps_hot_path_lock_free,
                                        setup_declared, teardown),
    };
    (void)MiB;
    return cmocka_run_group_tests_name("capture_pool", tests, NULL, NULL);
}
