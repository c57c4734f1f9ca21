/* A stream's park (src/heap.c): the large ranges it freed last come back to its next large
 * requests without the segment heap's shared mutex and without a CUDA call; and nothing parked is
 * lost to the pool: another stream's miss, trim, a stream's release and the stats all see the
 * parked ranges as the heap's own free ranges, to the byte. Emulator-only: counts CUDA calls.
 * One test interposes cudaStreamIsCapturing and sched_yield to see whether a CUDA call is made
 * while the stream's spin lock is held; another cudaMallocFromPoolAsync, to release a stream
 * while its thread's miss is inside the driver. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"

static const size_t MiB = (size_t)1 << 20;

static sp_stream_usage stream_stats_of(sp_pool *pool, cudaStream_t s)
{
    sp_stream_usage u = {.size = sizeof u};
    SP(sp_stream_stats(pool, s, &u));
    return u;
}

/* ---- two threads, two streams, each reusing its own parked ranges ---- */

enum { PAIRS = 1000 };

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    void *huge, *medium; /* the ranges this stream had at warm-up */
    int rc;              /* first failing status, or -1 for a range that was not its own */
} pair_worker;

static void *pairs(void *arg)
{
    pair_worker *w = arg;
    for (int i = 0; i < PAIRS && w->rc == SP_OK; i++) {
        void *h = NULL, *m = NULL;
        if ((w->rc = sp_alloc(w->pool, &h, 16 * MiB, w->stream)) != SP_OK ||
            (w->rc = sp_alloc(w->pool, &m, 2 * MiB, w->stream)) != SP_OK)
            break;
        if (h != w->huge || m != w->medium)
            w->rc = -1;
        int f1 = sp_free(w->pool, m, w->stream), f2 = sp_free(w->pool, h, w->stream);
        if (w->rc == SP_OK)
            w->rc = f1 != SP_OK ? f1 : f2;
    }
    return NULL;
}

/* Two threads on their own streams alternate a 16 MiB (huge) and a 2 MiB (medium) pair 1,000
 * times each: every allocation takes back the range its stream freed last, with no CUDA call,
 * and every figure stays exact, during (a live range) and after. */
static void two_streams_reuse_their_parks_without_cuda(void **state)
{
    (void)state;
    pair_worker w[2] = {{.pool = fx.pool, .stream = new_stream()},
                        {.pool = fx.pool, .stream = new_stream()}};
    for (int i = 0; i < 2; i++) { /* warm up: a huge segment and a medium one per stream */
        SP(sp_alloc(fx.pool, &w[i].huge, 16 * MiB, w[i].stream));
        SP(sp_alloc(fx.pool, &w[i].medium, 2 * MiB, w[i].stream));
    }
    for (int i = 0; i < 2; i++) {
        SP(sp_free(fx.pool, w[i].medium, w[i].stream));
        SP(sp_free(fx.pool, w[i].huge, w[i].stream));
    }
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 4);
    assert_int_equal(st.segments, 4);
    assert_int_equal(st.segment_bytes, 36 * MiB);
    cudasimResetCallCounts();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pairs, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(w[0].rc, SP_OK);
    assert_int_equal(w[1].rc, SP_OK);
    assert_int_equal(cudasimCallCount(NULL), 0);

    st = stats_of(fx.pool);
    assert_int_equal(st.same_stream_hits, 4 * PAIRS);
    assert_int_equal(st.allocs, 4 + 4 * PAIRS);
    assert_int_equal(st.frees, 4 + 4 * PAIRS);
    assert_int_equal(st.driver_allocs, 4);
    assert_int_equal(st.driver_frees, 0);
    assert_int_equal(st.cross_stream_reuses, 0);
    assert_int_equal(st.held.current, 36 * MiB);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.cached.current, 36 * MiB);
    assert_int_equal(st.active.peak, 36 * MiB);
    assert_int_equal(st.requested.total, (uint64_t)(2 + 2 * PAIRS) * 18 * MiB);
    assert_int_equal(st.largest_free, 16 * MiB); /* the parked ranges, seen as free */
    assert_int_equal(st.inactive_split, 0);
    for (int i = 0; i < 2; i++) {
        sp_stream_usage u = stream_stats_of(fx.pool, w[i].stream);
        assert_int_equal(u.hits, 2 * PAIRS);
        assert_int_equal(u.allocs, 2 + 2 * PAIRS);
        assert_int_equal(u.frees, 2 + 2 * PAIRS);
        assert_int_equal(u.active, 0);
        assert_int_equal(u.cached, 18 * MiB); /* its own freed ranges, still tagged */
    }

    /* a live range in one segment of each size: the others' parked ranges count as free */
    void *h, *m;
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &h, 16 * MiB, w[0].stream));
    SP(sp_alloc(fx.pool, &m, 2 * MiB, w[0].stream));
    assert_ptr_equal(h, w[0].huge);
    assert_ptr_equal(m, w[0].medium);
    assert_int_equal(cudasimCallCount(NULL), 0);
    st = stats_of(fx.pool);
    assert_int_equal(st.active.current, 18 * MiB);
    assert_int_equal(st.cached.current, 18 * MiB);
    assert_int_equal(st.largest_free, 16 * MiB);
    assert_int_equal(st.inactive_split, 0);
    SP(sp_free(fx.pool, m, w[0].stream));
    SP(sp_free(fx.pool, h, w[0].stream));
    for (int i = 0; i < 2; i++)
        drop_stream(fx.rt, w[i].stream);
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 36 * MiB);
    assert_int_equal(st.cached.current, 36 * MiB);
    SP(sp_pool_trim(fx.pool, 0));
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.segments, 0);
    assert_int_equal(st.driver_frees, 4);
}

/* ---- parks are flushed wherever the heap's whole truth is needed ---- */

/* A medium range parked by stream a serves stream b's miss once a's frees are complete (no new
 * segment); then b's parked range goes back to the driver at trim. Exact bytes. */
static void parked_range_serves_another_streams_miss_and_trim(void **state)
{
    (void)state;
    void *pa, *pb;
    SP(sp_alloc(fx.pool, &pa, 4 * MiB, fx.a));
    SP(sp_free(fx.pool, pa, fx.a)); /* parked on a */
    assert_int_equal(stream_stats_of(fx.pool, fx.a).cached, 4 * MiB);
    CK(cudaStreamSynchronize(fx.a));
    SP(sp_alloc(fx.pool, &pb, 4 * MiB, fx.b)); /* b's miss flushes a's park and finds it settled */
    assert_ptr_equal(pb, pa);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.cross_stream_reuses, 1);
    assert_int_equal(st.held.current, 4 * MiB);
    assert_int_equal(st.active.current, 4 * MiB);
    assert_int_equal(st.cached.current, 0);
    assert_int_equal(st.largest_free, 0);
    SP(sp_free(fx.pool, pb, fx.b)); /* parked on b */
    assert_int_equal(stream_stats_of(fx.pool, fx.a).cached, 0);
    SP(sp_pool_trim(fx.pool, 0)); /* the parked range's segment goes back whole */
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.cached.current, 0);
    assert_int_equal(st.segments, 0);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.trimmed_bytes, 4 * MiB); /* a trim's bytes, no reclaim's */
    assert_int_equal(st.reclaimed_bytes, 0);
}

/* A huge range parked by stream a is too large for stream b's request: b's miss flushes it and
 * gives its segment back before taking a new one, so the pool never holds both. */
static void parked_huge_range_goes_back_for_another_streams_miss(void **state)
{
    (void)state;
    void *pa, *pb;
    SP(sp_alloc(fx.pool, &pa, 40 * MiB, fx.a));
    SP(sp_free(fx.pool, pa, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    /* 40 > 20 * 1.25, and a new 20 would pass the mark */
    SP(sp_alloc(fx.pool, &pb, 20 * MiB, fx.b));
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.reclaimed_bytes, 0); /* a miss's own give-back: no other pool asked */
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.held.current, 20 * MiB);
    assert_int_equal(st.held.peak, 40 * MiB);
    assert_int_equal(st.active.current, 20 * MiB);
    SP(sp_free(fx.pool, pb, fx.b));
}

/* A block allocated on one stream and freed on another is parked by the freeing stream (its
 * tag): that stream takes it back at once with no CUDA call; a double free of a parked range is
 * refused. A full park pushes its oldest range into the heap, where its stream still finds it;
 * releasing the stream puts the rest there too. Exact bytes throughout. */
static void park_follows_the_freeing_stream(void **state)
{
    (void)state;
    cudaStream_t a = new_stream(), b = new_stream();
    void *p, *q;
    SP(sp_alloc(fx.pool, &p, 16 * MiB, a));
    SP(sp_free(fx.pool, p, b));
    assert_int_equal(sp_free(fx.pool, p, b), SP_ERR_DOUBLE_FREE);
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &q, 16 * MiB, b));
    assert_ptr_equal(q, p);
    assert_int_equal(cudasimCallCount(NULL), 0);
    SP(sp_free(fx.pool, q, b));

    /* five medium ranges of distinct sizes on b: the park keeps four, the heap gets the first */
    enum { N = 5 };
    void *r[N], *again[N];
    for (int i = 0; i < N; i++)
        SP(sp_alloc(fx.pool, &r[i], (size_t)(2 + i) * MiB, b));
    sp_stats st = stats_of(fx.pool);
    uint64_t held = st.held.current, allocs = st.driver_allocs;
    for (int i = 0; i < N; i++)
        SP(sp_free(fx.pool, r[i], b));
    cudasimResetCallCounts();
    for (int i = N - 1; i >= 0; i--) /* newest first: the park's, then the heap's */
        SP(sp_alloc(fx.pool, &again[i], (size_t)(2 + i) * MiB, b));
    assert_int_equal(cudasimCallCount(NULL), 0);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(again[i], r[i]);
    st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, allocs);
    assert_int_equal(st.held.current, held);
    assert_int_equal(st.active.current, (2 + 3 + 4 + 5 + 6) * MiB);
    for (int i = 0; i < N; i++)
        SP(sp_free(fx.pool, again[i], b));
    st = stats_of(fx.pool);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.cached.current, held);

    drop_stream(fx.rt, b); /* its park goes into the heap, behind its final fence */
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, held);
    assert_int_equal(st.released_streams, 1);
    SP(sp_pool_trim(fx.pool, 0));
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.segments, 0);
    drop_stream(fx.rt, a);
}

/* ---- a stream released while its own thread allocates on it ---- */

typedef struct {
    sp_pool *pool;
    cudaStream_t s;
    int rounds;
    int failures;
} release_race;

static void *pairs_on(void *arg)
{
    release_race *r = arg;
    for (int i = 0; i < r->rounds; i++) {
        void *p;
        /* 64 sizes: the park (exact sizes) rarely has one, best fit in the heap does */
        size_t n = 2 * MiB + (size_t)(i % 64) * 4096;
        if (sp_alloc(r->pool, &p, n, r->s) != SP_OK || sp_free(r->pool, p, r->s) != SP_OK)
            r->failures++;
    }
    return NULL;
}

/* sp_stream_release while another thread's large pairs run on the stream: whichever cache (the
 * released one or the stream's next) an allocation met, the pool's figures count every byte
 * once. A hit recorded in the released cache after its figures moved to the pool was lost, and
 * its free then took the bytes off twice. */
static void release_during_large_pairs_counts_every_byte(void **state)
{
    (void)state;
    release_race r = {fx.pool, fx.a, 20000, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pairs_on, &r), 0);
    for (int i = 0; i < 20000; i++)
        SP(sp_stream_release(fx.rt, fx.a));
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r.failures, 0);
    CK(cudaStreamSynchronize(fx.a));
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.allocs, 20000);
    assert_int_equal(st.frees, 20000);
    assert_int_equal(st.requested.total, st.cached.total); /* every byte asked for came back */
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.cached.current, st.held.current);
    SP(sp_pool_trim(fx.pool, 0));
    st = stats_of(fx.pool);
    assert_int_equal(st.held.current, 0);
}

/* ---- a stream released while its thread's miss takes a fresh segment ---- */

/* While `stream` is set, the next cudaMallocFromPoolAsync on it waits, inside the call, until
 * the test thread has released the stream (as another thread may at any moment). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cudaStream_t stream;
    bool inside, released;
} held_malloc = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream)
{
    static cudaError_t (*real)(void **, size_t, cudaMemPool_t, cudaStream_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaMallocFromPoolAsync");
    pthread_mutex_lock(&held_malloc.mu);
    if (held_malloc.stream && stream == held_malloc.stream) {
        held_malloc.stream = NULL;
        held_malloc.inside = true;
        pthread_cond_broadcast(&held_malloc.cv);
        while (!held_malloc.released)
            pthread_cond_wait(&held_malloc.cv, &held_malloc.mu);
    }
    pthread_mutex_unlock(&held_malloc.mu);
    return real(ptr, size, pool, stream);
}


static void *alloc_3mib(void *arg)
{
    thread_call *m = arg;
    m->rc = sp_alloc(m->pool, &m->ptr, 3 * MiB, m->stream);
    return NULL;
}

/* A miss takes a 4 MiB segment for 3 MiB on stream s while another thread releases s: the
 * segment's free 1 MiB is tagged with s's released cache, after the final fence its release
 * recorded. Once s is idle, its whole segment (that 1 MiB and the 3 MiB freed on s) must
 * serve another stream's 4 MiB request. A tag no fence covers stayed pending for good: the
 * rest could neither merge nor go to another stream, and a new segment was taken. */
static void segment_taken_as_its_stream_is_released_still_settles(void **state)
{
    (void)state;
    thread_call m = {.pool = fx.pool, .stream = fx.a, .rc = -1};
    held_malloc.stream = fx.a;
    held_malloc.inside = held_malloc.released = false;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, alloc_3mib, &m), 0);
    pthread_mutex_lock(&held_malloc.mu);
    while (!held_malloc.inside)
        pthread_cond_wait(&held_malloc.cv, &held_malloc.mu);
    pthread_mutex_unlock(&held_malloc.mu);
    int rc = sp_stream_release(fx.rt, fx.a); /* the miss is inside the driver, its cache in hand */
    pthread_mutex_lock(&held_malloc.mu);
    held_malloc.released = true;
    pthread_cond_broadcast(&held_malloc.cv);
    pthread_mutex_unlock(&held_malloc.mu);
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(rc);
    SP(m.rc);
    sp_stats st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.segment_bytes, 4 * MiB);
    SP(sp_free(fx.pool, m.ptr, fx.a));
    CK(cudaStreamSynchronize(fx.a)); /* everything s did is complete */
    void *q;
    cudasimResetCallCounts();
    SP(sp_alloc(fx.pool, &q, 4 * MiB, fx.b));
    /* at the high-water mark: one ask about a's live cache (a stream query, idle) and one
     * about its released one (its final fence, complete): each within its own budget */
    assert_int_equal(cudasimCallCount("cudaStreamQuery"), 1);
    assert_int_equal(cudasimCallCount("cudaEventQuery"), 1);
    assert_int_equal(cudasimCallCount(NULL), 2);
    assert_ptr_equal(q, m.ptr);
    st = stats_of(fx.pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.held.current, 4 * MiB);
    assert_int_equal(st.active.current, 4 * MiB);
    SP(sp_free(fx.pool, q, fx.b));
}

/* ---- no CUDA call under a stream's spin lock ---- */

/* While `stream` is set, each cudaStreamIsCapturing about it has a second thread read the
 * stream's figures, which takes the stream cache's spin lock. A lock held for long makes the
 * reader yield (sp_spin_lock): that thread's first sched_yield counts the call as made under
 * the lock and lets the call go on, so that its caller can drop the lock and the reader end. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sp_pool *pool;
    cudaStream_t stream;
    bool answered;  /* the reader read the figures, or found the lock held */
    int calls, under_lock;
    pthread_t readers[8];
    int nreaders;
} probe = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static _Thread_local bool probe_reader, probe_yielded;

static void probe_answer(void)
{
    pthread_mutex_lock(&probe.mu);
    probe.answered = true;
    pthread_cond_broadcast(&probe.cv);
    pthread_mutex_unlock(&probe.mu);
}

int sched_yield(void)
{
    /* looked up once, by whichever threads yield first: atomically, as they may race */
    static int (*real)(void);
    int (*fn)(void) = __atomic_load_n(&real, __ATOMIC_RELAXED);
    if (!fn) {
        *(void **)&fn = dlsym(RTLD_NEXT, "sched_yield");
        __atomic_store_n(&real, fn, __ATOMIC_RELAXED);
    }
    if (probe_reader && !probe_yielded) {
        probe_yielded = true;
        pthread_mutex_lock(&probe.mu);
        probe.under_lock++;
        pthread_mutex_unlock(&probe.mu);
        probe_answer();
    }
    return fn();
}

static void *probe_read(void *arg)
{
    (void)arg;
    probe_reader = true;
    sp_stream_usage u = {.size = sizeof u};
    (void)sp_stream_stats(probe.pool, probe.stream, &u);
    if (!probe_yielded)
        probe_answer();
    return NULL;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    static cudaError_t (*real)(cudaStream_t, enum cudaStreamCaptureStatus *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaStreamIsCapturing");
    if (probe.stream && stream == probe.stream && probe.nreaders < 8) {
        probe.answered = false;
        probe.calls++;
        pthread_t *t = &probe.readers[probe.nreaders++];
        if (pthread_create(t, NULL, probe_read, NULL) != 0) {
            probe.nreaders--;
        } else {
            pthread_mutex_lock(&probe.mu);
            while (!probe.answered)
                pthread_cond_wait(&probe.cv, &probe.mu);
            pthread_mutex_unlock(&probe.mu);
        }
    }
    return real(stream, status);
}

/* SP_CAPTURE_ALWAYS asks CUDA whether a stream captures. A huge free of another size than the
 * stream's last gives its segment back at once, if the library may name the stream: that
 * question must be asked before the stream's spin lock is taken, never under it (internal.h:
 * no driver call while a spin lock is held; every other thread on the stream spins meanwhile). */
static void huge_give_back_asks_no_cuda_under_the_spin_lock(void **state)
{
    (void)state;
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0;
    cfg.capture_check = SP_CAPTURE_ALWAYS;
    sp_runtime *rt = track_runtime(0, &cfg);
    sp_pool *pool;
    SP(sp_runtime_default_pool(rt, &pool));
    cudaStream_t s = new_stream();
    void *a, *b;
    SP(sp_alloc(pool, &a, 16 * MiB, s));
    SP(sp_alloc(pool, &b, 40 * MiB, s));
    SP(sp_free(pool, a, s)); /* the stream's first huge free: parked */
    probe.pool = pool;
    probe.stream = s;
    int rc = sp_free(pool, b, s); /* 40 after 16: back to the driver on s */
    probe.stream = NULL;
    for (int i = 0; i < probe.nreaders; i++)
        assert_int_equal(pthread_join(probe.readers[i], NULL), 0);
    SP(rc);
    assert_true(probe.calls > 0);
    assert_int_equal(probe.under_lock, 0);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.held.current, 16 * MiB);
    drop_stream(rt, s);
    destroy_runtime(rt);
}

TEST_MAIN("park",
    FX_EXACT(two_streams_reuse_their_parks_without_cuda),
    FX_EXACT(parked_range_serves_another_streams_miss_and_trim),
    FX_EXACT(parked_huge_range_goes_back_for_another_streams_miss),
    FX_EXACT(park_follows_the_freeing_stream),
    FX(release_during_large_pairs_counts_every_byte),
    FX_EXACT(segment_taken_as_its_stream_is_released_still_settles),
    TRACKED(huge_give_back_asks_no_cuda_under_the_spin_lock)
)
