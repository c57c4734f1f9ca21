/* The cross-stream free contract (issue 20, item 7; streampool.h at sp_free): a block allocated
 * on s0 and freed on s1 must be freed after s0's work, as CUDA requires of cudaFreeAsync. The
 * correct pattern (an event between the streams) keeps the data and makes no fault, with the
 * debug check on or off; check_free_order:1 turns the missing order into SP_ERR_UNORDERED_FREE
 * with the block still live; off, sp_alloc and sp_free make no CUDA call for it. Streams are held
 * by host-function gates that the test thread opens (cudasim: call counts and its stream-order
 * checks, which fault where a GPU would race). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024;

static sp_runtime *runtime_with(const char *alloc_conf)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0; /* exact figures at every read */
    cfg.alloc_conf = alloc_conf;
    return track_runtime(0, &cfg);
}

static sp_pointer_state state_of(sp_runtime *rt, void *p)
{
    sp_ptr_info info = {.size = sizeof info};
    SP(sp_pointer_info(rt, p, &info));
    return info.state;
}

/* The device and every stream had no fault: a synchronize succeeds. */
static void no_fault(void)
{
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
}

/* What the ordering tests run on: a runtime with this SP_ALLOC_CONF, its default pool, the stream
 * that allocates (s0), the stream that frees (s1) and the event that orders s1 after s0's use. */
typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t s0, s1;
    cudaEvent_t used;
} two_streams;

static two_streams two_streams_open(const char *alloc_conf)
{
    two_streams o = {.rt = runtime_with(alloc_conf)};
    o.pool = default_pool(o.rt);
    o.s0 = new_stream();
    o.s1 = new_stream();
    CK(cudaEventCreateWithFlags(&o.used, cudaEventDisableTiming));
    return o;
}

static void two_streams_close(two_streams *o)
{
    CK(cudaEventDestroy(o->used));
    drop_streams_and_runtime(o->rt, o->s0, o->s1);
}

/* s0 writes and reads the block behind a gate; the free on s1 waits for an event recorded after
 * that read; s1 then reuses the block at once (its own bin) and overwrites it. The read saw s0's
 * bytes, the reuse holds s1's, and nothing faulted. */
static void event_between_streams(const char *alloc_conf, size_t n)
{
    two_streams o = two_streams_open(alloc_conf);
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, n));
    memset(host, 0, n);
    gate *g = gate_new();
    gate_hold(g, o.s0);
    void *p;
    SP(sp_alloc(o.pool, &p, n, o.s0));
    CK(cudaMemsetAsync(p, 0xab, n, o.s0));
    CK(cudaMemcpyAsync(host, p, n, cudaMemcpyDeviceToHost, o.s0));
    CK(cudaEventRecord(o.used, o.s0));
    CK(cudaStreamWaitEvent(o.s1, o.used, 0));
    SP(sp_free(o.pool, p, o.s1));
    void *q;
    SP(sp_alloc(o.pool, &q, n, o.s1));
    assert_ptr_equal(q, p); /* reused on s1 without a driver call: the contract is what orders it */
    CK(cudaMemsetAsync(q, 0xcd, n, o.s1));
    gate_open(g);
    CK(cudaStreamSynchronize(o.s0));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0xab);
    assert_true(device_bytes_are(q, n, 0xcd, o.s1));
    SP(sp_free(o.pool, q, o.s1));
    no_fault();
    CK(cudaFreeHost(host));
    two_streams_close(&o);
}

static void event_between_streams_keeps_the_data(void **state)
{
    (void)state;
    event_between_streams(NULL, 64 * KiB);               /* a small block */
    event_between_streams(NULL, 3 * 1024 * KiB);         /* a large one */
    event_between_streams("check_free_order:1", 64 * KiB);
    event_between_streams("check_free_order:1", 3 * 1024 * KiB);
}

/* With the check on: the free on s1 without an event, while s0 is held before the allocation,
 * is refused and changes nothing; with the event it passes. */
static void missing_order_is_an_error(void **state)
{
    (void)state;
    two_streams o = two_streams_open("check_free_order:1");
    for (int large = 0; large < 2; large++) {
        size_t n = large ? 3 * 1024 * KiB : 64 * KiB;
        gate *g = gate_new();
        gate_hold(g, o.s0);
        void *p;
        SP(sp_alloc(o.pool, &p, n, o.s0));
        CK(cudaMemsetAsync(p, 1, n, o.s0));
        sp_stats before = stats_of(o.pool);
        assert_int_equal(sp_free(o.pool, p, o.s1), SP_ERR_UNORDERED_FREE);
        assert_non_null(strstr(sp_config_error(), "cudaStreamWaitEvent"));
        assert_int_equal(state_of(o.rt, p), SP_POINTER_LIVE);
        sp_stats after = stats_of(o.pool);
        assert_int_equal(after.active.current, before.active.current);
        assert_int_equal(after.frees, before.frees);
        assert_int_equal(after.bad_frees, before.bad_frees);
        /* the same free, ordered */
        CK(cudaEventRecord(o.used, o.s0));
        CK(cudaStreamWaitEvent(o.s1, o.used, 0));
        SP(sp_free(o.pool, p, o.s1));
        assert_int_equal(state_of(o.rt, p), SP_POINTER_CACHED);
        gate_open(g);
        no_fault();
    }
    /* s0 done with the allocation (synchronized): nothing left to order after */
    void *p;
    SP(sp_alloc(o.pool, &p, 64 * KiB, o.s0));
    CK(cudaStreamSynchronize(o.s0));
    SP(sp_free(o.pool, p, o.s1));
    /* and on its own stream, held: its own order */
    gate *g = gate_new();
    gate_hold(g, o.s0);
    SP(sp_alloc(o.pool, &p, 64 * KiB, o.s0));
    SP(sp_free(o.pool, p, o.s0));
    gate_open(g);
    no_fault();
    two_streams_close(&o);
}

static void status_and_config(void **state)
{
    (void)state;
    status_is(SP_ERR_UNORDERED_FREE, -30, "SP_ERR_UNORDERED_FREE",
              "free on another stream not ordered after the allocating stream");
    sp_runtime *rt = NULL;
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.alloc_conf = "check_free_order:yes";
    assert_int_equal(sp_runtime_create(0, &cfg, &rt), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "check_free_order is 0 or 1"));
    cfg.alloc_conf = "chat.check_free_order:1";
    assert_int_equal(sp_runtime_create(0, &cfg, &rt), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "for the runtime"));
    assert_null(rt);
    /* check_free_order:0 is off: the unordered free goes through, unchecked */
    rt = runtime_with("check_free_order:0");
    sp_pool *pool = default_pool(rt);
    cudaStream_t s0 = new_stream(), s1 = new_stream();
    gate *g = gate_new();
    gate_hold(g, s0);
    void *p;
    SP(sp_alloc(pool, &p, 64 * KiB, s0));
    SP(sp_free(pool, p, s1)); /* the bug, not caught; nothing used the block, so no fault */
    gate_open(g);
    no_fault();
    drop_streams_and_runtime(rt, s0, s1);
}

static unsigned long long calls(void)
{
    return cudasimCallCount(NULL);
}

/* Off, a bin hit and a free on another stream make no CUDA call at all, as before the check
 * existed; on, the allocation records its mark and the cross-stream free asks about it. */
static void off_the_hot_path_makes_no_call(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        sp_runtime *rt = runtime_with(on ? "check_free_order:1" : NULL);
        sp_pool *pool = default_pool(rt);
        cudaStream_t s0 = new_stream(), s1 = new_stream();
        void *p;
        SP(sp_alloc(pool, &p, 64 * KiB, s0)); /* the slab, once */
        SP(sp_free(pool, p, s0));
        CK(cudaStreamSynchronize(s0));
        cudasimResetCallCounts();
        SP(sp_alloc(pool, &p, 64 * KiB, s0)); /* a hit in s0's bin */
        unsigned long long alloc_calls = calls();
        unsigned long long records = cudasimCallCount("cudaEventRecord");
        CK(cudaStreamSynchronize(s0)); /* the free below is ordered after the allocation */
        unsigned long long before_free = calls();
        SP(sp_free(pool, p, s1));
        unsigned long long free_calls = calls() - before_free;
        if (!on) {
            assert_int_equal(alloc_calls, 0);
            assert_int_equal(free_calls, 0);
        } else { /* the mark; one query that finds it complete, and the free's place on s1
                  * (its event made at s1's first checked free, on the runtime's device), for
                  * a synchronized end */
            assert_int_equal(records, 1);
            assert_int_equal(free_calls, 4);
            assert_int_equal(cudasimCallCount("cudaGetDevice"), 1);
            assert_int_equal(cudasimCallCount("cudaEventQuery"), 1);
            assert_int_equal(cudasimCallCount("cudaEventCreateWithFlags") +
                                 cudasimCallCount("cudaEventCreate"), 1);
            assert_int_equal(cudasimCallCount("cudaEventRecord"), 2);
        }
        CK(cudaStreamSynchronize(s1));
        drop_streams_and_runtime(rt, s0, s1);
    }
}

/* ---- SP_REQUEST_SYNCHRONIZED's rule (issue 27, item 10) ----
 * The hint promises that every free made on the request's stream is complete, whoever made it.
 * Another thread frees a block on the request's stream after the server's synchronize, behind
 * work still queued there (a gate): ending the request with the hint breaks the promise. */

/* Returns sp_request_end's status, and the request's fences in *fences. The block the other
 * thread freed is never handed to another stream before its stream got past the free. */
static int end_after_a_pending_free(const char *alloc_conf, uint64_t *fences)
{
    sp_runtime *rt = runtime_with(alloc_conf);
    sp_pool *pool = default_pool(rt);
    cudaStream_t s = new_stream(), other = new_stream();
    sp_request req;
    SP(sp_request_begin(pool, s, "synchronized", &req));
    void *kv, *shared;
    SP(sp_request_alloc(pool, req, &kv, 64 * KiB));
    SP(sp_alloc(pool, &shared, 64 * KiB, s)); /* a block of the server's, used on s too */
    CK(cudaStreamSynchronize(s));             /* the server's synchronize */
    gate *g = gate_new();
    gate_hold(g, s);                          /* s still has work that uses `shared` */
    thread_call j = {.pool = pool, .ptr = shared, .stream = s, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_call_free, &j), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(j.rc);
    sp_request_stats st = {.size = sizeof st};
    int rc = sp_request_end(pool, req, SP_REQUEST_SYNCHRONIZED, &st);
    *fences = st.fences_recorded;
    if (rc == SP_ERR_UNORDERED_FREE) {
        /* fenced instead: another stream does not get `shared` while s is held */
        void *q;
        SP(sp_alloc(pool, &q, 64 * KiB, other));
        assert_ptr_not_equal(q, shared);
        SP(sp_free(pool, q, other));
    }
    gate_open(g);
    no_fault();
    drop_streams_and_runtime(rt, s, other);
    return rc;
}

static void synchronized_end_after_a_pending_free_is_caught(void **state)
{
    (void)state;
    uint64_t fences = 9;
    assert_int_equal(end_after_a_pending_free("check_free_order:1", &fences),
                     SP_ERR_UNORDERED_FREE);
    assert_non_null(strstr(sp_config_error(), "a free on that stream is still pending"));
    /* its frees stay unsettled, as without the hint: an end in stream order fences them only
     * when another stream wanted this stream's memory, and none did */
    assert_int_equal(fences, 0);
    /* off, nothing asks: the breach goes unseen (and the hint settles at once) */
    assert_int_equal(end_after_a_pending_free(NULL, &fences), SP_OK);
    assert_int_equal(fences, 0);
}

/* The rule kept: the other thread's free, then the server's synchronize, then the end with the
 * hint: SP_OK, no fence. */
static void synchronized_end_after_a_completed_free_passes(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_with("check_free_order:1");
    sp_pool *pool = default_pool(rt);
    cudaStream_t s = new_stream();
    sp_request req;
    SP(sp_request_begin(pool, s, "synchronized", &req));
    void *kv, *shared;
    SP(sp_request_alloc(pool, req, &kv, 64 * KiB));
    SP(sp_alloc(pool, &shared, 64 * KiB, s));
    thread_call j = {.pool = pool, .ptr = shared, .stream = s, .rc = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_call_free, &j), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(j.rc);
    CK(cudaStreamSynchronize(s));
    sp_request_stats st = {.size = sizeof st};
    SP(sp_request_end(pool, req, SP_REQUEST_SYNCHRONIZED, &st));
    assert_int_equal(st.fences_recorded, 0);
    assert_int_equal(st.freed_at_end, 1);
    no_fault();
    drop_stream(rt, s);
    destroy_runtime(rt);
}

TEST_MAIN("free_order",
    TRACKED(event_between_streams_keeps_the_data),
    TRACKED(missing_order_is_an_error),
    TRACKED(status_and_config),
    TRACKED(off_the_hot_path_makes_no_call),
    TRACKED(synchronized_end_after_a_pending_free_is_caught),
    TRACKED(synchronized_end_after_a_completed_free_passes)
)
