/* Conformance of CUDA graph capture to the documented rules streampool relies on
 * (shared/CUDA-SEMANTICS.md rules 24-26). Written against the runtime API alone, so it runs on a
 * GPU as well as on cudasim; each test cites the CUDA Programming Guide section ("CUDA Graphs")
 * or the Runtime API entry it checks. Asynchrony is held by gates this thread opens; data is
 * checked through copies into pinned host buffers, so a replay that did not write shows. */
#include "support/cuda_fixture.h"

static const size_t KiB = (size_t)1 << 10;

static bool host_bytes_are(const unsigned char *h, size_t n, unsigned char byte)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != byte)
            return false;
    return true;
}

/* The buffers of the tests that check data, on top of the shared streams (cfx): 8 KiB of device
 * memory (cudaMalloc, outside every pool) and 64 KiB of pinned host memory, zeroed. Register a
 * test with BUF(fn). */
static struct {
    unsigned char *dev, *host;
} buf;

static int buf_setup(void **state)
{
    if (cfx_setup(state) != 0 || cudaMalloc((void **)&buf.dev, 8 * KiB) != cudaSuccess ||
        cudaMallocHost((void **)&buf.host, 64 * KiB) != cudaSuccess)
        return -1;
    memset(buf.host, 0, 64 * KiB);
    return 0;
}

static int buf_teardown(void **state)
{
    for (int i = 0; i < gate_pool_used; i++) /* a failed test's gate would hold the frees */
        gate_open(&gate_pool[i]);
    int failed = (buf.host && cudaFreeHost(buf.host) != cudaSuccess) +
                 (buf.dev && cudaFree(buf.dev) != cudaSuccess);
    buf.dev = buf.host = NULL;
    return cfx_teardown(state) != 0 || failed ? -1 : 0;
}

#define BUF(fn) cmocka_unit_test_setup_teardown(fn, buf_setup, buf_teardown)

/* Ends a capture that must have been invalidated: no graph, cudaErrorStreamCaptureInvalidated
 * (Runtime API, cudaStreamEndCapture: "If capture was invalidated ... a NULL graph"). */
static void end_invalidated(cudaStream_t s)
{
    cudaGraph_t g = (cudaGraph_t)&g;
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    assert_null(g);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}

/* Programming Guide, CUDA Graphs, "Stream Capture"; Runtime API cudaStreamBeginCapture: work
 * pushed into a capturing stream is not executed but captured; each launch of the instantiated
 * graph runs all of it. */
static void captured_work_runs_only_when_launched(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    atomic_int runs = 0;
    unsigned char *dev = buf.dev;
    CK(cudaMemsetAsync(dev, 0x00, 4 * KiB, s));
    CK(cudaStreamSynchronize(s));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(status_of(s), cudaStreamCaptureStatusActive);
    CK(cudaMemsetAsync(dev, 0x7e, 4 * KiB, s));
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    cudaGraph_t g = NULL;
    CK(cudaStreamEndCapture(s, &g));
    assert_non_null(g);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusNone);

    CK(cudaStreamSynchronize(s));
    assert_int_equal(atomic_load(&runs), 0); /* captured, not run */
    assert_true(device_bytes_are(dev, 4 * KiB, 0x00, s));

    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    graph_launch_and_wait(x, s);
    assert_int_equal(atomic_load(&runs), 2);
    assert_true(device_bytes_are(dev, 4 * KiB, 0x7e, s));

    graph_destroy(x, g);
}

/* Programming Guide, "Stream Capture": each launch replays the captured copies, reading the
 * source as it is at launch time; launches are ordered behind earlier work in the stream
 * (Runtime API cudaGraphLaunch). */
static void graph_replay_copies_current_data(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    unsigned char *dev = buf.dev, *src, *dst = buf.host;
    CK(cudaMallocHost((void **)&src, 8 * KiB));
    memset(src, 0x11, 8 * KiB);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemcpyAsync(dev, src, 8 * KiB, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(dev + 4 * KiB, 0x22, 4 * KiB, s));
    CK(cudaMemcpyAsync(dst, dev, 8 * KiB, cudaMemcpyDeviceToHost, s));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CK(cudaGraphInstantiateWithFlags(&x, g, 0));

    gate *gt = gate_new();
    gate_hold(gt, s);
    CK(cudaGraphLaunch(x, s));
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady); /* held behind the gate */
    assert_true(host_bytes_are(dst, 8 * KiB, 0));
    gate_open(gt);
    CK(cudaStreamSynchronize(s));
    assert_true(host_bytes_are(dst, 4 * KiB, 0x11));
    assert_true(host_bytes_are(dst + 4 * KiB, 4 * KiB, 0x22));

    memset(src, 0x33, 8 * KiB);
    graph_launch_and_wait(x, s);
    assert_true(host_bytes_are(dst, 4 * KiB, 0x33));
    assert_true(host_bytes_are(dst + 4 * KiB, 4 * KiB, 0x22));

    graph_destroy(x, g);
    CK(cudaFreeHost(src));
}

/* Runtime API cudaStreamGetCaptureInfo: status, a per-sequence id unique in the process, the
 * graph being built and the nodes the next captured node will depend on. */
static void capture_info_reports_sequence_and_dependencies(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    atomic_int runs = 0;
    enum cudaStreamCaptureStatus st;
    unsigned long long id1 = 0, id2 = 0;
    cudaGraph_t g = NULL, g_end;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *edges = NULL;
    size_t n = 99;

    CK(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, NULL, NULL, NULL));
    assert_int_equal(st, cudaStreamCaptureStatusNone);
    assert_int_equal(cudaStreamGetCaptureInfo(s, NULL, NULL, NULL, NULL, NULL, NULL),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, NULL, &edges, NULL),
                     cudaErrorInvalidValue); /* edge data needs dependencies_out */

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaStreamGetCaptureInfo(s, &st, &id1, &g, &deps, &edges, &n));
    assert_int_equal(st, cudaStreamCaptureStatusActive);
    assert_true(id1 != 0);
    assert_non_null(g);
    assert_int_equal(n, 0);
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    CK(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &n));
    assert_int_equal(n, 1);
    assert_non_null(deps);
    assert_non_null(deps[0]);
    CK(cudaStreamEndCapture(s, &g_end));
    assert_ptr_equal(g_end, g);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(cudaStreamGetCaptureInfo(s, &st, &id2, NULL, NULL, NULL, NULL));
    assert_true(id2 != 0 && id2 != id1);
    cudaGraph_t empty;
    CK(cudaStreamEndCapture(s, &empty));
    assert_non_null(empty);
    assert_int_equal(atomic_load(&runs), 0);

    CK(cudaGraphDestroy(empty));
    CK(cudaGraphDestroy(g));
}

/* Programming Guide, "Cross-stream Dependencies and Events": a stream that waits on an event
 * recorded in a capture joins it; its work must be joined back into the origin stream before
 * cudaStreamEndCapture. The launched graph keeps the fork's ordering. */
static void fork_and_join_through_events(void **state)
{
    (void)state;
    cudaStream_t s1 = cfx.a, s2 = cfx.b;
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    unsigned char *dev = buf.dev, *host = buf.host;

    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(dev, 0x01, 8 * KiB, s1));
    CK(cudaEventRecord(fork, s1));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    assert_int_equal(status_of(s2), cudaStreamCaptureStatusActive);
    unsigned long long id1, id2;
    enum cudaStreamCaptureStatus st;
    CK(cudaStreamGetCaptureInfo(s1, &st, &id1, NULL, NULL, NULL, NULL));
    CK(cudaStreamGetCaptureInfo(s2, &st, &id2, NULL, NULL, NULL, NULL));
    assert_true(id1 == id2);
    CK(cudaMemsetAsync(dev + 4 * KiB, 0x02, 4 * KiB, s2)); /* after the 0x01 fill */
    CK(cudaEventRecord(join, s2));
    CK(cudaMemsetAsync(dev, 0x03, 4 * KiB, s1));
    CK(cudaStreamWaitEvent(s1, join, 0));
    CK(cudaMemcpyAsync(host, dev, 8 * KiB, cudaMemcpyDeviceToHost, s1));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s1, &g));
    assert_int_equal(status_of(s2), cudaStreamCaptureStatusNone); /* the join ended it too */

    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    graph_launch_and_wait(x, s1);
    assert_true(host_bytes_are(host, 4 * KiB, 0x03));
    assert_true(host_bytes_are(host + 4 * KiB, 4 * KiB, 0x02));

    graph_destroy(x, g);
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
}

/* Runtime API cudaStreamEndCapture / error cudaErrorStreamCaptureUnjoined: a fork whose work is
 * not joined back fails the capture, and every stream of it leaves capture mode. */
static void unjoined_fork_fails_end_capture(void **state)
{
    (void)state;
    cudaStream_t s1 = cfx.a, s2 = cfx.b;
    cudaEvent_t fork;
    atomic_int runs = 0;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(fork, s1));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    CK(cudaLaunchHostFunc(s2, count_fn, &runs));
    cudaGraph_t g = (cudaGraph_t)&g;
    assert_int_equal(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureUnjoined);
    assert_null(g);
    assert_int_equal(status_of(s1), cudaStreamCaptureStatusNone);
    assert_int_equal(status_of(s2), cudaStreamCaptureStatusNone);
    CK(cudaStreamSynchronize(s2));
    assert_int_equal(atomic_load(&runs), 0);
    (void)cudaGetLastError();
    CK(cudaEventDestroy(fork));
}

/* Programming Guide, "Graph Memory Nodes": cudaMallocAsync/cudaFreeAsync in a capture become
 * allocation and free nodes; the graph owns the memory, at a fixed address, from each launch to
 * its free node, so every launch can use it. */
static void allocation_nodes_give_graph_memory_each_launch(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    unsigned char *host = buf.host;
    void *p = NULL, *q = NULL;

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, 64 * KiB, s));
    CK(cudaMallocFromPoolAsync(&q, 16 * KiB, pool, s));
    assert_non_null(p);
    assert_non_null(q);
    assert_true(p != q);
    CK(cudaMemsetAsync(p, 0x5c, 64 * KiB, s));
    CK(cudaMemsetAsync(q, 0x6d, 16 * KiB, s));
    CK(cudaMemcpyAsync(p, q, 16 * KiB, cudaMemcpyDeviceToDevice, s));
    CK(cudaMemcpyAsync(host, p, 64 * KiB, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(q, s));
    CK(cudaFreeAsync(p, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s, &g);
    cudaGraphExec_t x2 = NULL;
    /* Runtime API cudaGraphInstantiate: one executable graph at a time with memory nodes */
    assert_int_equal(cudaGraphInstantiate(&x2, g, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    for (int launch = 0; launch < 3; launch++) {
        memset(host, 0, 64 * KiB);
        graph_launch_and_wait(x, s);
        assert_true(host_bytes_are(host, 16 * KiB, 0x6d));
        assert_true(host_bytes_are(host + 16 * KiB, 48 * KiB, 0x5c));
    }
    graph_destroy(x, g);
}

/* Runtime API cudaGraphLaunch: relaunching while a previous launch's allocations are unfreed
 * fails with cudaErrorInvalidValue unless instantiated with
 * cudaGraphInstantiateFlagAutoFreeOnLaunch; Programming Guide, "Graph Memory Nodes": graph
 * memory may be freed outside the graph with cudaFreeAsync. */
static void relaunch_needs_allocations_freed(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    unsigned char *host = buf.host;
    void *p = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, 4 * KiB, s));
    CK(cudaMemsetAsync(p, 0x42, 4 * KiB, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s, &g);
    CK(cudaGraphLaunch(x, s));
    assert_true(device_bytes_are(p, 4 * KiB, 0x42, s)); /* valid after the launch */
    assert_int_equal(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaFreeAsync(p, s));
    CK(cudaGraphLaunch(x, s));
    CK(cudaMemcpyAsync(host, p, 4 * KiB, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    assert_true(host_bytes_are(host, 4 * KiB, 0x42));
    CK(cudaGraphExecDestroy(x));

    CK(cudaGraphInstantiateWithFlags(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    CK(cudaGraphLaunch(x, s));
    CK(cudaGraphLaunch(x, s)); /* the first launch's allocation is freed first */
    CK(cudaMemcpyAsync(host, p, 4 * KiB, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    assert_true(host_bytes_are(host, 4 * KiB, 0x42));
    graph_destroy(x, g);
}

/* Runtime API cudaGraphAddMemFreeNode ("an address that was not returned by an allocation
 * node" is cudaErrorInvalidValue) and Programming Guide, "Invalidation": freeing pre-capture
 * memory inside a capture fails and invalidates the capture (rule 24). */
static void freeing_non_graph_memory_in_capture_invalidates(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    void *p;
    CK(cudaMallocAsync(&p, 4 * KiB, s));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusInvalidated);
    /* further use of the stream fails until the capture is ended */
    assert_int_equal(cudaMemsetAsync(p, 0, 4 * KiB, s), cudaErrorStreamCaptureInvalidated);
    end_invalidated(s);
    CK(cudaMemsetAsync(p, 0x17, 4 * KiB, s)); /* the stream is usable again */
    assert_true(device_bytes_are(p, 4 * KiB, 0x17, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
}

/* Programming Guide, "Prohibited and Unhandled Operations": synchronizing or querying a
 * capturing stream, or synchronizing the device, is invalid and invalidates the capture. */
static void sync_and_query_of_capture_fail(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusInvalidated);
    end_invalidated(s);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    assert_int_equal(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    assert_int_equal(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    CK(cudaStreamQuery(s)); /* out of capture, the stream is ordinary again */
    CK(cudaDeviceSynchronize());
}

/* Programming Guide, "Prohibited and Unhandled Operations": while a blocking stream captures,
 * using the legacy stream is invalid (cudaErrorStreamCaptureImplicit) and invalidates the
 * capture; Runtime API cudaStreamIsCapturing: asking about the legacy stream then returns
 * cudaErrorStreamCaptureImplicit without invalidating. A non-blocking stream's capture leaves
 * the legacy stream alone. */
static void legacy_stream_during_blocking_capture(void **state)
{
    (void)state;
    atomic_int runs = 0;
    cudaStream_t s = cuda_stream(cudaStreamDefault);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    assert_int_equal(cudaStreamIsCapturing(cudaStreamLegacy, &st),
                     cudaErrorStreamCaptureImplicit);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusActive);
    assert_int_equal(cudaLaunchHostFunc(cudaStreamLegacy, count_fn, &runs),
                     cudaErrorStreamCaptureImplicit);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusInvalidated);
    end_invalidated(s);

    cudaStream_t nb = cuda_stream(cudaStreamNonBlocking);
    CK(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal));
    CK(cudaLaunchHostFunc(cudaStreamLegacy, count_fn, &runs));
    CK(cudaStreamSynchronize(cudaStreamLegacy));
    assert_int_equal(atomic_load(&runs), 1);
    cudaGraph_t g;
    CK(cudaStreamEndCapture(nb, &g));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(nb));
    CK(cudaStreamDestroy(s));
}

typedef struct {
    enum cudaStreamCaptureMode thread_mode;
    cudaError_t malloc_result;
    cudaStream_t stream;
    cudaError_t end_result;
} other_thread;

static void *malloc_from_other_thread(void *arg)
{
    other_thread *t = arg;
    enum cudaStreamCaptureMode mode = t->thread_mode;
    t->malloc_result = cudaThreadExchangeStreamCaptureMode(&mode);
    if (t->malloc_result == cudaSuccess) {
        void *p = NULL;
        t->malloc_result = cudaMalloc(&p, 4 * KiB);
        if (p)
            cudaFree(p);
    }
    return NULL;
}

static cudaError_t run_other_thread(other_thread *t, void *(*fn)(void *))
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fn, t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    return t->malloc_result;
}

/* Runtime API cudaThreadExchangeStreamCaptureMode: cudaMalloc is potentially unsafe; it is
 * prohibited in a thread with its own non-relaxed capture, and in a global-mode thread while any
 * thread has a global capture; thread-local and relaxed threads ignore other threads' captures. */
static void capture_modes_govern_unsafe_calls(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    void *p = NULL;

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    other_thread t = {.thread_mode = cudaStreamCaptureModeThreadLocal};
    CK(run_other_thread(&t, malloc_from_other_thread));
    t.thread_mode = cudaStreamCaptureModeRelaxed;
    CK(run_other_thread(&t, malloc_from_other_thread));
    assert_int_equal(status_of(s), cudaStreamCaptureStatusActive);
    t.thread_mode = cudaStreamCaptureModeGlobal;
    assert_int_equal(run_other_thread(&t, malloc_from_other_thread),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusInvalidated);
    end_invalidated(s);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    assert_int_equal(cudaMalloc(&p, 4 * KiB), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    t.thread_mode = cudaStreamCaptureModeGlobal; /* a thread-local capture: not its business */
    CK(run_other_thread(&t, malloc_from_other_thread));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, cudaStreamCaptureModeGlobal);
    CK(cudaMalloc(&p, 4 * KiB)); /* this thread relaxed: allowed, and not captured */
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, cudaStreamCaptureModeRelaxed);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusActive);
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaFree(p));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(cudaMalloc(&p, 4 * KiB)); /* relaxed captures forbid nothing */
    CK(cudaFree(p));
    cudaGraph_t g2;
    CK(cudaStreamEndCapture(s, &g2));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphDestroy(g));
}

static void *end_capture_from_other_thread(void *arg)
{
    other_thread *t = arg;
    cudaGraph_t g = NULL;
    t->end_result = cudaStreamEndCapture(t->stream, &g);
    t->malloc_result = t->end_result;
    if (g)
        cudaGraphDestroy(g);
    return NULL;
}

/* Runtime API cudaStreamEndCapture: a capture not begun in relaxed mode must be ended by the
 * thread that began it (cudaErrorStreamCaptureWrongThread); a relaxed one by any thread. */
static void end_capture_thread_rules(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    other_thread t = {.stream = s};
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(run_other_thread(&t, end_capture_from_other_thread));
    assert_int_equal(status_of(s), cudaStreamCaptureStatusNone);

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(run_other_thread(&t, end_capture_from_other_thread),
                     cudaErrorStreamCaptureWrongThread);
    cudaGraph_t g = (cudaGraph_t)&g;
    cudaError_t err = cudaStreamEndCapture(s, &g); /* still this thread's to end */
    if (err == cudaSuccess)
        CK(cudaGraphDestroy(g));
    else
        assert_int_equal(err, cudaErrorStreamCaptureInvalidated);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}

/* Programming Guide, "Prohibited and Unhandled Operations": an event recorded in a capture
 * stands for captured work, so it cannot be queried or synchronized
 * (cudaErrorCapturedEvent). */
static void captured_event_cannot_be_queried(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(e, s));
    assert_int_equal(cudaEventQuery(e), cudaErrorCapturedEvent);
    end_invalidated(s);
    CK(cudaEventRecord(e, s)); /* recorded outside capture: an ordinary event again */
    CK(cudaEventSynchronize(e));
    CK(cudaEventQuery(e));
    CK(cudaEventDestroy(e));
}

TEST_MAIN("capture",
    BUF(captured_work_runs_only_when_launched),
    BUF(graph_replay_copies_current_data),
    CFX(capture_info_reports_sequence_and_dependencies),
    BUF(fork_and_join_through_events),
    CFX(unjoined_fork_fails_end_capture),
    BUF(allocation_nodes_give_graph_memory_each_launch),
    BUF(relaunch_needs_allocations_freed),
    CFX(freeing_non_graph_memory_in_capture_invalidates),
    CFX(sync_and_query_of_capture_fail),
    RESET(legacy_stream_during_blocking_capture),
    CFX(capture_modes_govern_unsafe_calls),
    CFX(end_capture_thread_rules),
    CFX(captured_event_cannot_be_queried)
)
