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

#include "support/cuda_fixture.h"
#include "support/sp_test_support.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

/* ---- counting this thread's mutex locks ---- */

static _Thread_local bool counting_locks;
static _Thread_local long mutex_locks;

/* ---- holding another thread's miss inside its query of a stream ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cudaStream_t stream; /* armed: the next query of this stream waits for `proceed` */
    bool query_armed;    /* `stream` is armed (it may be NULL, the legacy stream) */
    bool in_query;       /* a miss is inside that query, before the driver answers */
    bool proceed;        /* the declaring thread began its capture, or is blocked on a lock */
    bool finished;       /* the held thread's call returned without reaching the hold */
    cudaStream_t free_stream; /* armed: the next cudaFreeAsync on it waits for `proceed` */
} held_query = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, false, false, false,
                false, NULL};
/* this thread is in sp_stream_capture_begin: a lock it finds held lets the held query go on */
static _Thread_local bool declaring;
/* a trimming thread: its next cudaEventSynchronize fails at once (as if the fence's stream had
 * faulted), and its first mutex lock after streampool cleared that error waits for `proceed`
 * like a held query */
static _Thread_local bool fail_event_sync, failed_event_sync;
/* > 0: this thread's mutex lock of that number from now on waits for `proceed` first */
static _Thread_local int hold_at_lock;

/* Holds the calling thread until `proceed`, telling the test thread it got there. */
static void hold_here(void)
{
    held_query.in_query = true;
    pthread_cond_broadcast(&held_query.cv);
    while (!held_query.proceed)
        pthread_cond_wait(&held_query.cv, &held_query.mu);
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (counting_locks)
        mutex_locks++;
    if (hold_at_lock > 0 && m != &held_query.mu && --hold_at_lock == 0) {
        real(&held_query.mu);
        hold_here();
        pthread_mutex_unlock(&held_query.mu);
    }
    if (declaring && m != &held_query.mu) {
        if (pthread_mutex_trylock(m) == 0)
            return 0;
        /* held by the miss: this thread waits for it, so the miss may go on */
        real(&held_query.mu);
        held_query.proceed = true;
        pthread_cond_broadcast(&held_query.cv);
        pthread_mutex_unlock(&held_query.mu);
    }
    return real(m);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    static cudaError_t (*real)(cudaStream_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaStreamQuery");
    pthread_mutex_lock(&held_query.mu);
    if (held_query.query_armed && stream == held_query.stream) {
        held_query.stream = NULL;
        held_query.query_armed = false;
        hold_here();
    }
    pthread_mutex_unlock(&held_query.mu);
    return real(stream);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    static cudaError_t (*real)(void *, cudaStream_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaFreeAsync");
    pthread_mutex_lock(&held_query.mu);
    if (held_query.free_stream && stream == held_query.free_stream) {
        held_query.free_stream = NULL;
        hold_here();
    }
    pthread_mutex_unlock(&held_query.mu);
    return real(ptr, stream);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    static cudaError_t (*real)(cudaEvent_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaEventSynchronize");
    if (fail_event_sync) {
        fail_event_sync = false;
        failed_event_sync = true;
        return cudaErrorLaunchFailure;
    }
    return real(event);
}

/* streampool clears the error it handled: the held lock is the first after that */
cudaError_t cudaGetLastError(void)
{
    static cudaError_t (*real)(void);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaGetLastError");
    cudaError_t err = real();
    if (failed_event_sync) {
        failed_event_sync = false;
        hold_at_lock = 1;
    }
    return err;
}

/* ---- fixture: the runtime and any capture left open are torn down even after a failure ---- */

typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t capturing; /* a stream whose capture a failed test may have left open */
    cudaStream_t declared;  /* a stream declared capturing a failed test may have left */
    bool is_declared;
    cudaStream_t a, b, c;   /* non-blocking streams, released and destroyed by the teardown */
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
    return streams_create((cudaStream_t *[]){&f->a, &f->b, &f->c}, 3);
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
    cudaStream_t streams[] = {f->a, f->b, f->c};
    int failed = 0;
    for (int i = 0; f->rt && i < 3; i++)
        failed += sp_stream_release(f->rt, streams[i]) != SP_OK;
    failed += streams_destroy(streams, 3);
    (void)cudaDeviceSynchronize();
    int rc = failed ? SP_ERR_CUDA : f->rt ? sp_runtime_destroy(f->rt) : SP_OK;
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
        graph_launch_and_wait(exec, s);
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
    cudaStream_t s = f->a, t = f->b;
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
}

/* While a capture is declared, another stream's allocations and frees served by its cache take
 * no mutex (the capture check is one flag in the stream's own cache). */
static void declared_capture_keeps_hot_path_lock_free(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = f->a, t = f->b;
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
}

/* ---- holding one thread while this one declares a capture ---- */

/* Arms the hold: the next query of `stream` (NULL: none), or the lock a thread's hold_at_lock
 * names, waits for hold_release. */
static void hold_arm(cudaStream_t stream)
{
    pthread_mutex_lock(&held_query.mu);
    held_query.stream = stream;
    held_query.query_armed = stream != NULL;
    held_query.in_query = held_query.proceed = held_query.finished = false;
    pthread_mutex_unlock(&held_query.mu);
}

static void hold_wait_arrival(void)
{
    pthread_mutex_lock(&held_query.mu);
    while (!held_query.in_query)
        pthread_cond_wait(&held_query.cv, &held_query.mu);
    pthread_mutex_unlock(&held_query.mu);
}

static void hold_release(void)
{
    pthread_mutex_lock(&held_query.mu);
    held_query.proceed = true;
    pthread_cond_broadcast(&held_query.cv);
    pthread_mutex_unlock(&held_query.mu);
}

/* Declares s capturing and begins its capture; a lock the declaration finds held releases the
 * held thread, which may then finish first. */
static void declare_and_begin_capture(fixture *f, cudaStream_t s)
{
    declaring = true;
    int rc = sp_stream_capture_begin(f->rt, s);
    declaring = false;
    SP(rc);
    f->declared = s, f->is_declared = true;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    f->capturing = s;
}

/* Ends the capture of s, which no illegal call may have invalidated, and its declaration. */
static void end_declared_capture(fixture *f, cudaStream_t s)
{
    cudaGraph_t graph = NULL;
    CK(cudaStreamEndCapture(s, &graph));
    f->capturing = NULL;
    CK(cudaGraphDestroy(graph));
    SP(sp_stream_capture_end(f->rt, s));
    f->is_declared = false;
}

/* A capture declared while another thread's miss is asking about the stream: the miss had found
 * the stream not capturing and is about to query it. sp_stream_capture_begin waits for that
 * query to finish, so that no query reaches the stream once its capture has begun (rule 25: it
 * would invalidate the capture). The miss is held inside its query (an interposed
 * cudaStreamQuery) until the declaring thread began the capture or blocked on a lock. */

static void *miss_thread(void *arg)
{
    thread_call *m = arg;
    m->rc = sp_alloc(m->pool, &m->ptr, m->bytes, m->stream);
    return NULL;
}

static void capture_declared_during_a_query_waits_for_it(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t a = f->a, b = f->b;
    gate *g = gate_new();
    void *x;
    SP(sp_alloc(pool, &x, 4 * MiB, a));
    gate_hold(g, a);
    SP(sp_free(pool, x, a)); /* pending behind the gate: b's miss asks about a */
    hold_arm(a);
    thread_call m = {.pool = pool, .stream = b, .bytes = 4 * MiB, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, miss_thread, &m), 0);
    hold_wait_arrival();
    declare_and_begin_capture(f, a);
    hold_release();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(m.rc);
    assert_ptr_not_equal(m.ptr, x); /* a's free is pending: b grew */
    end_declared_capture(f, a); /* a query during the capture would have invalidated it */
    gate_open(g);
    SP(sp_free(pool, m.ptr, b));
    assert_exact(pool);
}

/* A capture declared while a trim on another thread has decided that a device synchronize must
 * settle what it could not (here a released stream's fence whose synchronize failed), before it
 * synchronizes: the trim must see the capture and leave the device alone (rule 25), as it does
 * for a capture declared before it decided. The trim is held at its next lock. */

static void *trim_thread(void *arg)
{
    thread_call *t = arg;
    fail_event_sync = true;
    t->rc = sp_pool_trim(t->pool, 0);
    fail_event_sync = failed_event_sync = false;
    hold_at_lock = 0;
    return NULL;
}

static void capture_declared_before_a_trims_device_sync_stops_it(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = new_stream(), c = new_stream();
    gate *g = gate_new();
    void *x;
    SP(sp_alloc(pool, &x, 4 * MiB, s));
    gate_hold(g, s);
    SP(sp_free(pool, x, s));
    SP(sp_stream_release(f->rt, s)); /* a final fence, pending behind the gate */
    hold_arm(NULL);
    thread_call t = {.pool = pool, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trim_thread, &t), 0);
    hold_wait_arrival();
    declare_and_begin_capture(f, c);
    hold_release();
    assert_int_equal(pthread_join(th, NULL), 0);
    SP(t.rc);
    end_declared_capture(f, c); /* a device synchronize would have invalidated it */
    gate_open(g);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    drop_stream(f->rt, c);
}

/* A pool destroyed while a capture is declared elsewhere: the pool's memory freed on another
 * live thread's cudaStreamPerThread can be settled only by a device synchronize, and none may run
 * once a capture has begun (rule 25). sp_pool_destroy holds the runtime's lock through the whole
 * free, so a capture declared meanwhile begins after it. The destroying thread is held at its
 * first lock inside the free (its third: the runtime's, the pool's stream table, then the free's
 * first) until the declaring thread blocked on a lock or began its capture. */
typedef struct {
    sp_pool *pool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool freed, exit;
    int rc;
} per_thread_arg;

static void *per_thread_frees(void *arg)
{
    per_thread_arg *a = arg;
    void *p;
    a->rc = sp_alloc(a->pool, &p, 4 * MiB, cudaStreamPerThread);
    if (a->rc == SP_OK)
        a->rc = sp_free(a->pool, p, cudaStreamPerThread); /* pending: nobody else may ask it */
    pthread_mutex_lock(&a->mu);
    a->freed = true;
    pthread_cond_broadcast(&a->cv);
    while (!a->exit) /* alive: its per-thread stream cannot be named from another thread */
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void *destroy_held(void *arg)
{
    thread_call *d = arg;
    hold_at_lock = 3;
    d->rc = sp_pool_destroy(d->pool);
    hold_at_lock = 0;
    return NULL;
}

static void capture_declared_during_a_pool_destroy_waits_for_it(void **state)
{
    fixture *f = *state;
    sp_pool *victim;
    SP(sp_pool_create(f->rt, "victim", NULL, &victim));
    per_thread_arg pt = {victim, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false,
                         -1};
    pthread_t h, w;
    assert_int_equal(pthread_create(&h, NULL, per_thread_frees, &pt), 0);
    pthread_mutex_lock(&pt.mu);
    while (!pt.freed)
        pthread_cond_wait(&pt.cv, &pt.mu);
    pthread_mutex_unlock(&pt.mu);
    SP(pt.rc);
    cudaStream_t a = new_stream();
    hold_arm(NULL);
    thread_call d = {.pool = victim, .rc = -1};
    assert_int_equal(pthread_create(&w, NULL, destroy_held, &d), 0);
    hold_wait_arrival();
    declare_and_begin_capture(f, a);
    hold_release();
    assert_int_equal(pthread_join(w, NULL), 0);
    SP(d.rc);
    end_declared_capture(f, a); /* a device synchronize would have invalidated it */
    pthread_mutex_lock(&pt.mu);
    pt.exit = true;
    pthread_cond_broadcast(&pt.cv);
    pthread_mutex_unlock(&pt.mu);
    assert_int_equal(pthread_join(h, NULL), 0);
    drop_stream(f->rt, a);
}

/* SP_CAPTURE_ALWAYS with a capture the application declares as well: sp_stream_capture_begin
 * promises that nothing queries the stream from then on, and waits for a query under way. The
 * stream's own sp_free between the declaration and cudaStreamBeginCapture asks CUDA, which says
 * "not capturing" yet: that answer must not undo the declaration, or another thread's miss may
 * find the stream not capturing and query it just as its capture begins (rule 25: the capture is
 * invalidated). The miss, if it gets there, is held inside its cudaStreamQuery of the stream
 * until the capture has begun. */
static void *miss_thread_reporting(void *arg)
{
    miss_thread(arg);
    pthread_mutex_lock(&held_query.mu);
    held_query.finished = true;
    pthread_cond_broadcast(&held_query.cv);
    pthread_mutex_unlock(&held_query.mu);
    return NULL;
}

static void declared_capture_survives_always_checks_before_it_begins(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t a = f->a, b = f->b;
    gate *g = gate_new();
    void *x, *small;
    SP(sp_alloc(pool, &x, 4 * MiB, a));
    SP(sp_alloc(pool, &small, 4 * KiB, a));
    gate_hold(g, a);
    SP(sp_free(pool, x, a)); /* pending behind the gate: b's miss asks about a */
    SP(sp_stream_capture_begin(f->rt, a));
    f->declared = a, f->is_declared = true;
    SP(sp_free(pool, small, a)); /* asks cudaStreamIsCapturing: not yet */
    hold_arm(a);
    thread_call m = {.pool = pool, .stream = b, .bytes = 4 * MiB, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, miss_thread_reporting, &m), 0);
    pthread_mutex_lock(&held_query.mu); /* held in a query of a, or done without one */
    while (!held_query.in_query && !held_query.finished)
        pthread_cond_wait(&held_query.cv, &held_query.mu);
    bool queried = held_query.in_query;
    pthread_mutex_unlock(&held_query.mu);
    CK(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
    f->capturing = a;
    hold_release();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(m.rc);
    assert_ptr_not_equal(m.ptr, x); /* a's free is pending: b grew */
    end_declared_capture(f, a); /* the query would have invalidated it */
    assert_false(queried);      /* the declaration kept the miss from asking a at all */
    gate_open(g);
    SP(sp_free(pool, m.ptr, b));
    assert_exact(pool);
}

/* The same for the legacy stream: a capture of a blocking stream forbids any use of it (rule 25),
 * so while one is declared nothing may query it. Under SP_CAPTURE_ALWAYS, cudaStreamIsCapturing
 * of the legacy stream says "no" before the declared capture begins, and a miss that asked then
 * must not query the legacy stream as the capture begins. */
static void declared_blocking_capture_keeps_always_checks_off_the_legacy_stream(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t blocking, b = new_stream();
    CK(cudaStreamCreate(&blocking)); /* blocking: its capture forbids the legacy stream */
    gate *g = gate_new();
    void *x;
    SP(sp_alloc(pool, &x, 4 * MiB, NULL));
    gate_hold(g, NULL);
    SP(sp_free(pool, x, NULL)); /* pending behind the gate: b's miss asks about the legacy stream */
    SP(sp_stream_capture_begin(f->rt, blocking));
    f->declared = blocking, f->is_declared = true;
    hold_arm(NULL);
    held_query.query_armed = true; /* the legacy stream's query */
    thread_call m = {.pool = pool, .stream = b, .bytes = 4 * MiB, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, miss_thread_reporting, &m), 0);
    pthread_mutex_lock(&held_query.mu); /* held in a query of it, or done without one */
    while (!held_query.in_query && !held_query.finished)
        pthread_cond_wait(&held_query.cv, &held_query.mu);
    bool queried = held_query.in_query;
    pthread_mutex_unlock(&held_query.mu);
    CK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
    f->capturing = blocking;
    hold_release();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(m.rc);
    assert_ptr_not_equal(m.ptr, x); /* the legacy stream's free is pending: b grew */
    end_declared_capture(f, blocking); /* the query would have invalidated it */
    assert_false(queried);
    gate_open(g);
    CK(cudaStreamSynchronize(NULL));
    SP(sp_free(pool, m.ptr, b));
    assert_exact(pool);
    drop_stream(f->rt, blocking);
    drop_stream(f->rt, b);
}

/* A server captures graphs on one thread (global mode, CUDA's default) while other threads
 * allocate. A miss there that queries another stream's fence makes cudaEventQuery, a
 * "potentially unsafe" call while a global capture is under way: in the thread's default mode it
 * fails and invalidates the capture (PyTorch's allocator and NCCL watchdog query in relaxed
 * mode for this reason). The miss must still learn the fence is complete, and the capture must
 * stay valid. */
static void fence_query_during_a_global_capture_leaves_it_valid(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = f->a, t = f->b, u = f->c;
    const size_t n = 16 * MiB; /* huge: whole segments, no shared rest to take instead */
    gate *g = gate_new();
    gate_hold(g, u);
    void *pu, *pt;
    SP(sp_alloc(pool, &pu, n, u));
    SP(sp_free(pool, pu, u)); /* pending behind the gate */
    SP(sp_alloc(pool, &pt, n, t)); /* u is busy: the miss leaves a fence on u, takes fresh memory */
    assert_ptr_not_equal(pt, pu);
    gate_open(g);
    CK(cudaStreamSynchronize(u)); /* the fence is complete; streampool has not been told */

    atomic_int runs = 0;
    SP(sp_stream_capture_begin(f->rt, s));
    f->declared = s, f->is_declared = true;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    f->capturing = s;
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    thread_call m = {.pool = pool, .stream = t, .bytes = n, .rc = -1};
    pthread_t h;
    assert_int_equal(pthread_create(&h, NULL, miss_thread, &m), 0);
    assert_int_equal(pthread_join(h, NULL), 0);
    SP(m.rc);
    assert_ptr_equal(m.ptr, pu); /* u's range: the miss queried u's fence and found it complete */
    end_and_replay(f, s, &runs); /* the capture stayed valid */
    SP(sp_stream_capture_end(f->rt, s));
    f->is_declared = false;
    SP(sp_free(pool, m.ptr, t));
    SP(sp_free(pool, pt, t));
    assert_exact(pool);
}

/* A metrics or housekeeping thread reads a pool's figures and trims it while the serving thread
 * captures in global mode (CUDA's default). The pool figures (cudaMemPoolGetAttribute) and the
 * trim (cudaMemPoolTrimTo) are potentially unsafe calls: in the reading thread's default global
 * mode they fail and invalidate the capture (NVIDIA/cccl#11360). The reads must still answer,
 * and the capture stay valid. */
typedef struct {
    sp_pool *pool;
    sp_stats st;
    int stats_rc, trim_rc;
} housekeeping_arg;

static void *housekeeping_thread(void *arg)
{
    housekeeping_arg *h = arg;
    h->st.size = sizeof h->st;
    h->stats_rc = sp_pool_stats(h->pool, &h->st);
    h->trim_rc = sp_pool_trim(h->pool, 0);
    return NULL;
}

static void pool_reads_and_trims_during_a_global_capture_leave_it_valid(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = f->a, t = f->b;
    void *p;
    SP(sp_alloc(pool, &p, 4 * MiB, t));
    SP(sp_free(pool, p, t));
    CK(cudaStreamSynchronize(t));
    uint64_t held = stats_of(pool).held.current;
    assert_true(held >= 4 * MiB);

    atomic_int runs = 0;
    SP(sp_stream_capture_begin(f->rt, s));
    f->declared = s, f->is_declared = true;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    f->capturing = s;
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    housekeeping_arg h = {.pool = pool, .stats_rc = -1, .trim_rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, housekeeping_thread, &h), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    SP(h.stats_rc);
    assert_int_equal(h.st.held.current, held);
    assert_true(h.st.pool_reserved >= held); /* the driver's figure, read during the capture */
    SP(h.trim_rc);
    assert_int_equal(stats_of(pool).held.current, 0); /* t's settled segment went back */
    end_and_replay(f, s, &runs);
    SP(sp_stream_capture_end(f->rt, s));
    f->is_declared = false;
    assert_exact(pool);
}

/* SP_CAPTURE_ALWAYS: a huge segment goes back to the driver (cudaFreeAsync on its stream) while
 * another thread releases that stream. The release's final fence is recorded before that free
 * reaches the driver, so it does not cover it; the driver releases the segment's pages only once
 * the host has observed the free (rule 13), and under SP_CAPTURE_ALWAYS no trim may synchronize
 * the device (a capture may be under way). The give-back must leave a fence behind itself on the
 * released stream, for a trim to synchronize. The freeing thread is held inside its
 * cudaFreeAsync until the release has returned. */
static void give_back_racing_a_release_is_trimmed(void **state)
{
    fixture *f = *state;
    sp_pool *pool = f->pool;
    cudaStream_t s = new_stream();
    void *mid, *big;
    SP(sp_alloc(pool, &mid, 16 * MiB, s));
    SP(sp_alloc(pool, &big, 64 * MiB, s));
    SP(sp_free(pool, mid, s)); /* parked; the next huge free of another size goes back */
    hold_arm(NULL);
    pthread_mutex_lock(&held_query.mu);
    held_query.free_stream = s;
    pthread_mutex_unlock(&held_query.mu);
    thread_call a = {.pool = pool, .stream = s, .ptr = big, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_call_free, &a), 0);
    hold_wait_arrival(); /* inside cudaFreeAsync of big's segment on s */
    SP(sp_stream_release(f->rt, s));
    hold_release();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(a.rc);
    assert_int_equal(stats_of(pool).driver_frees, 1);
    SP(sp_pool_trim(pool, 0));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.pool_reserved, 0); /* the given-back pages went too */
    assert_int_equal(st.skipped_steps, 0);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

/* A test on the fixture with capture_check SP_CAPTURE_DECLARED, or SP_CAPTURE_ALWAYS. */
#define DECLARED(fn) cmocka_unit_test_setup_teardown(fn, setup_declared, teardown)
#define ALWAYS(fn) cmocka_unit_test_setup_teardown(fn, setup_always, teardown)
TEST_MAIN_WITHOUT_ALLOC_CONF("capture_pool",
    DECLARED(declared_capture_keeps_blocks_aside),
    ALWAYS(undeclared_capture_is_never_probed),
    DECLARED(declared_capture_keeps_hot_path_lock_free),
    DECLARED(capture_declared_during_a_query_waits_for_it),
    DECLARED(capture_declared_before_a_trims_device_sync_stops_it),
    DECLARED(capture_declared_during_a_pool_destroy_waits_for_it),
    DECLARED(fence_query_during_a_global_capture_leaves_it_valid),
    ALWAYS(declared_capture_survives_always_checks_before_it_begins),
    ALWAYS(declared_blocking_capture_keeps_always_checks_off_the_legacy_stream),
    DECLARED(pool_reads_and_trims_during_a_global_capture_leave_it_valid),
    ALWAYS(give_back_racing_a_release_is_trimmed)
)
