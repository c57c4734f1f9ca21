/* Emulator-only capture tests: graph memory against cudasim's device capacity, and the choices
 * cudasim makes where CUDA's documentation gives no error code or leaves the behaviour open
 * (each is listed in tools/cudasim/cudasim.h). */
#include "support/cuda_fixture.h"

static const size_t MiB = (size_t)1 << 20;

static void end_invalidated(cudaStream_t s)
{
    cudaGraph_t g = (cudaGraph_t)&g;
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    assert_null(g);
    (void)cudaGetLastError();
}

/* Graph memory (Programming Guide, "Graph Memory Nodes") comes from the device: cudasim charges
 * a graph's allocations, in 2 MiB units, at its first launch and keeps them (as the graph memory
 * pool does) until the graph is gone; a launch that does not fit fails. */
static void graph_memory_counts_against_capacity(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 16 * MiB));
    cudaStream_t s = cfx.a;
    void *p = NULL, *q = NULL, *big;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, 5 * MiB, s));
    CK(cudaMallocAsync(&q, 512 * 1024, s));
    CK(cudaMemsetAsync(p, 1, 5 * MiB, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaFreeAsync(q, s));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    assert_int_equal(device_bytes_free(), 16 * MiB); /* capture reserves no memory */
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    graph_launch_and_wait(x, s);
    assert_int_equal(device_bytes_free(), 10 * MiB); /* 5.5 MiB in 2 MiB units, kept */
    assert_int_equal(cudaMallocAsync(&big, 12 * MiB, s), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    CK(cudaGraphLaunch(x, s)); /* relaunch: the same memory again */
    CK(cudaStreamSynchronize(s));
    assert_int_equal(device_bytes_free(), 10 * MiB);
    graph_destroy(x, g);
    assert_int_equal(device_bytes_free(), 16 * MiB);

    /* a graph needing more than the device has left cannot launch */
    void *held;
    CK(cudaMalloc(&held, 10 * MiB));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(cudaMallocAsync(&p, 8 * MiB, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    assert_int_equal(cudaGraphLaunch(x, s), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    CK(cudaFree(held));
    graph_launch_and_wait(x, s);
    graph_destroy(x, g);
}

/* Graph memory outlives its executable graph and graph until freed (Programming Guide, "Graph
 * Memory Nodes"); cudaFree frees it too. A launched allocation's range is live device memory,
 * a freed one is not (a copy from it faults, as a bad address does). */
static void graph_memory_outlives_graph_until_freed(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 16 * MiB));
    cudaStream_t s = cfx.a;
    void *p = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, MiB, s));
    CK(cudaMemsetAsync(p, 0x3c, MiB, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s, &g);
    CK(cudaGraphLaunch(x, s));
    graph_destroy(x, g);
    assert_true(device_bytes_are(p, MiB, 0x3c, s));
    assert_int_equal(device_bytes_free(), 14 * MiB);
    CK(cudaFree(p));
    assert_int_equal(device_bytes_free(), 16 * MiB);
    assert_int_equal(cudaFree(p), cudaErrorInvalidValue);
    assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}

/* cudasim's error codes where the Runtime API lists none: capture on the legacy stream is
 * cudaErrorStreamCaptureUnsupported; beginning twice, or ending a stream that is not capturing,
 * cudaErrorIllegalState; ending from a joined stream cudaErrorStreamCaptureUnmatched (and the
 * capture is invalidated). */
static void begin_and_end_misuse(void **state)
{
    (void)state;
    cudaStream_t s1 = cfx.a, s2 = cfx.b;
    cudaGraph_t g;
    assert_int_equal(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(cudaStreamBeginCapture(s1, (enum cudaStreamCaptureMode)7),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaStreamEndCapture(s1, &g), cudaErrorIllegalState);
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal),
                     cudaErrorIllegalState);
    assert_int_equal(status_of(s1), cudaStreamCaptureStatusActive);
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaEventRecord(e, s1));
    CK(cudaStreamWaitEvent(s2, e, 0));
    assert_int_equal(cudaStreamEndCapture(s2, &g), cudaErrorStreamCaptureUnmatched);
    assert_int_equal(status_of(s2), cudaStreamCaptureStatusInvalidated);
    end_invalidated(s1);
    assert_int_equal(status_of(s2), cudaStreamCaptureStatusNone);
    /* the event belongs to a capture that has ended: cudasim keeps refusing it */
    assert_int_equal(cudaEventQuery(e), cudaErrorCapturedEvent);
    assert_int_equal(cudaStreamWaitEvent(s2, e, 0), cudaErrorCapturedEvent);
    CK(cudaEventRecord(e, s2));
    CK(cudaEventSynchronize(e));
    (void)cudaGetLastError();
    CK(cudaEventDestroy(e));
}

/* Programming Guide, "Prohibited and Unhandled Operations": waiting on an event not recorded in
 * the capture is invalid unless cudaEventWaitExternal is given (cudasim: cudaErrorStreamCapture
 * Isolation); waiting from one capture on another's event would merge them
 * (cudaErrorStreamCaptureMerge). An external wait becomes a node that waits, at each launch, for
 * the event's record as of that launch. */
static void event_waits_across_the_capture_boundary(void **state)
{
    (void)state;
    cudaStream_t s1 = cfx.a, s2 = cfx.b, other = cfx.c;
    cudaEvent_t outside, inside;
    CK(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&inside, cudaEventDisableTiming));
    CK(cudaEventRecord(outside, other));

    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaStreamWaitEvent(s1, outside, 0), cudaErrorStreamCaptureIsolation);
    end_invalidated(s1);

    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(inside, s1));
    assert_int_equal(cudaStreamWaitEvent(s2, inside, 0), cudaErrorStreamCaptureMerge);
    end_invalidated(s1);
    end_invalidated(s2);

    order_log log = {0};
    order_mark m_other = {&log, 1}, m_graph = {&log, 2};
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CK(cudaStreamWaitEvent(s1, outside, cudaEventWaitExternal));
    mark(s1, &m_graph);
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s1, &g);
    gate *gt = gate_new();
    gate_hold(gt, other);
    mark(other, &m_other);
    CK(cudaEventRecord(outside, other)); /* the record the launch will wait for */
    CK(cudaGraphLaunch(x, s1));
    assert_int_equal(cudaStreamQuery(s1), cudaErrorNotReady);
    gate_open(gt);
    CK(cudaStreamSynchronize(s1));
    assert_int_equal(atomic_load(&log.len), 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    graph_destroy(x, g);
    CK(cudaEventDestroy(outside));
    CK(cudaEventDestroy(inside));
}

/* cudasim's stricter readings: launching a graph into a capturing stream (a child graph) is not
 * captured but fails with cudaErrorStreamCaptureUnsupported; ending a non-relaxed capture from
 * the wrong thread invalidates it; cudaFreeHost and cudaFree(NULL) are unsafe calls; destroying
 * the origin stream ends its capture. */
static void *end_from_thread(void *arg)
{
    cudaGraph_t g = NULL;
    *(cudaError_t *)((void **)arg)[1] = cudaStreamEndCapture((cudaStream_t)((void **)arg)[0], &g);
    return NULL;
}

static void stricter_choices(void **state)
{
    (void)state;
    cudaStream_t s = cuda_stream(cudaStreamNonBlocking), t = cuda_stream(cudaStreamNonBlocking);
    atomic_int runs = 0;
    CK(cudaStreamBeginCapture(t, cudaStreamCaptureModeGlobal));
    CK(cudaLaunchHostFunc(t, count_fn, &runs));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(t, &g);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaGraphLaunch(x, s), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    cudaError_t err = cudaSuccess;
    void *args[2] = {s, &err};
    pthread_t th;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    assert_int_equal(pthread_create(&th, NULL, end_from_thread, args), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(err, cudaErrorStreamCaptureWrongThread);
    assert_int_equal(status_of(s), cudaStreamCaptureStatusInvalidated);
    end_invalidated(s);

    void *host;
    CK(cudaMallocHost(&host, 4096));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaFreeHost(host), cudaErrorStreamCaptureUnsupported);
    assert_int_equal(cudaFree(NULL), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    CK(cudaFreeHost(host));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaStreamDestroy(s));
    void *p;
    CK(cudaMalloc(&p, 4096)); /* no capture is left to forbid it */
    CK(cudaFree(p));
    graph_launch_and_wait(x, t);
    assert_int_equal(atomic_load(&runs), 1);
    graph_destroy(x, g);
    assert_int_equal(cudaGraphDestroy(g), cudaErrorInvalidValue);
    assert_int_equal(cudaGraphExecDestroy(x), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(t));
}

/* A free node whose allocation was already freed outside the graph is a device fault when the
 * launch reaches it (sticky, as any bad access in cudasim). */
static void free_node_of_freed_allocation_faults(void **state)
{
    (void)state;
    cudaStream_t s = cuda_stream(cudaStreamNonBlocking), c = cuda_stream(cudaStreamNonBlocking);
    void *p = NULL;
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, 4096, c));
    cudaGraph_t ga;
    CK(cudaStreamEndCapture(c, &ga));
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
    CK(cudaFreeAsync(p, c)); /* a free node for another graph's allocation */
    cudaGraph_t gf;
    CK(cudaStreamEndCapture(c, &gf));
    cudaGraphExec_t xa, xf;
    CK(cudaGraphInstantiate(&xa, ga, 0));
    CK(cudaGraphInstantiate(&xf, gf, 0));
    CK(cudaGraphLaunch(xa, s));
    CK(cudaGraphLaunch(xf, s)); /* frees it */
    CK(cudaStreamSynchronize(s));
    CK(cudaGraphLaunch(xa, s)); /* allowed again: nothing unfreed */
    CK(cudaFreeAsync(p, s));
    CK(cudaGraphLaunch(xf, s)); /* frees a freed allocation */
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    assert_int_equal(cudasimCallCount("cudaGraphLaunch"), 4);
}

static void open_gate_fn(void *arg)
{
    gate_open(arg);
}

/* cudasim runs the branches of a fork concurrently, as a GPU may: here the first branch in
 * capture order waits for a gate that only the second branch opens, so a launch that ran the
 * nodes one after another would never finish. */
static void forked_branches_run_concurrently(void **state)
{
    (void)state;
    cudaStream_t s1 = cfx.a, s2 = cfx.b;
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    gate *gt = gate_new();
    order_log log = {0};
    order_mark held = {&log, 1}, opener = {&log, 2}, after = {&log, 3};
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(fork, s1));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    gate_hold(gt, s2);
    mark(s2, &held);
    CK(cudaEventRecord(join, s2));
    mark(s1, &opener);
    CK(cudaLaunchHostFunc(s1, open_gate_fn, gt));
    CK(cudaStreamWaitEvent(s1, join, 0));
    mark(s1, &after);
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s1, &g);
    graph_launch_and_wait(x, s1);
    assert_int_equal(atomic_load(&log.len), 3);
    assert_int_equal(log.order[0], 2);
    assert_int_equal(log.order[1], 1);
    assert_int_equal(log.order[2], 3);
    graph_destroy(x, g);
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
}

/* cudasim's reading of "unfreed" (Runtime API cudaGraphLaunch): a graph allocation freed with
 * cudaFreeAsync on another stream counts as freed for a relaunch only once the launch stream is
 * ordered after that free (event wait) or the host has seen it; else the relaunch would reuse
 * the memory under work that may still use it, and fails with cudaErrorInvalidValue. */
static void relaunch_must_follow_outside_free(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a, other = cfx.b;
    cudaEvent_t freed;
    CK(cudaEventCreateWithFlags(&freed, cudaEventDisableTiming));
    void *p = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, 4096, s));
    CK(cudaMemsetAsync(p, 0x21, 4096, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_and_instantiate(s, &g);
    CK(cudaGraphLaunch(x, s));
    CK(cudaEventRecord(freed, s));
    CK(cudaStreamWaitEvent(other, freed, 0));
    gate *gt = gate_new();
    gate_hold(gt, other);
    CK(cudaMemsetAsync(p, 0x22, 4096, other)); /* still using it ... */
    CK(cudaFreeAsync(p, other));               /* ... then freeing it, behind the gate */
    assert_int_equal(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaEventRecord(freed, other));
    CK(cudaStreamWaitEvent(s, freed, 0));
    CK(cudaGraphLaunch(x, s)); /* ordered after the free now */
    gate_open(gt);
    assert_true(device_bytes_are(p, 4096, 0x21, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaGraphLaunch(x, s)); /* same stream: in order */
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    graph_destroy(x, g);
    CK(cudaEventDestroy(freed));
}

/* Issue 22 item 19: the graph allocator's figures (cudaDeviceGetGraphMemAttribute), their high
 * watermarks reset to zero only, and cudaDeviceGraphMemTrim, which returns the memory of graphs
 * that are neither running nor holding a live allocation. Used and reserved are one figure on
 * cudasim (it keeps no graph memory that no graph holds). */
static uint64_t graph_attr(enum cudaGraphMemAttributeType attr)
{
    uint64_t v = 42;
    CK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
    return v;
}

static void graph_figures_are(uint64_t current, uint64_t high)
{
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemCurrent), current);
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemCurrent), current);
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemHigh), high);
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemHigh), high);
}

/* A graph that allocates `size` bytes and, if `free_it`, frees them again. */
static cudaGraphExec_t alloc_graph(cudaStream_t s, size_t size, bool free_it, cudaGraph_t *g)
{
    void *p = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&p, size, s));
    if (free_it)
        CK(cudaFreeAsync(p, s));
    CK(cudaStreamEndCapture(s, g));
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, *g, 0));
    return x;
}

static void graph_memory_attributes_and_trim(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 64 * MiB));
    cudaStream_t s = cfx.a;
    graph_figures_are(0, 0);
    cudaGraph_t g;
    cudaGraphExec_t x = alloc_graph(s, 5 * MiB + 512 * 1024, true, &g);
    graph_figures_are(0, 0); /* instantiation takes no memory: the first launch does */
    graph_launch_and_wait(x, s);
    graph_figures_are(6 * MiB, 6 * MiB);
    assert_int_equal(device_bytes_free(), 58 * MiB);

    /* only the high watermarks may be set, and only to 0 */
    uint64_t v = 1;
    assert_int_equal(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v),
                     cudaErrorInvalidValue);
    v = 0;
    assert_int_equal(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &v),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceSetGraphMemAttribute(0, (enum cudaGraphMemAttributeType)7, &v),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceGetGraphMemAttribute(0, (enum cudaGraphMemAttributeType)7, &v),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, NULL),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceGetGraphMemAttribute(3, cudaGraphMemAttrUsedMemCurrent, &v),
                     cudaErrorInvalidDevice);
    assert_int_equal(cudaDeviceSetGraphMemAttribute(3, cudaGraphMemAttrUsedMemHigh, &v),
                     cudaErrorInvalidDevice);
    assert_int_equal(cudaDeviceGraphMemTrim(3), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    graph_figures_are(6 * MiB, 6 * MiB);

    /* an idle graph's memory goes back to the device; its next launch takes it again */
    CK(cudaDeviceGraphMemTrim(0));
    graph_figures_are(0, 6 * MiB);
    assert_int_equal(device_bytes_free(), 64 * MiB);
    v = 0;
    CK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v));
    CK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &v));
    graph_figures_are(0, 0);
    graph_launch_and_wait(x, s);
    graph_figures_are(6 * MiB, 6 * MiB);

    /* a running graph, and one whose allocation is live, keep theirs */
    gate *gt = gate_new();
    gate_hold(gt, s);
    CK(cudaGraphLaunch(x, s));
    cudaGraph_t g2;
    cudaGraphExec_t x2 = alloc_graph(s, 3 * MiB, false, &g2);
    CK(cudaGraphLaunch(x2, s));
    CK(cudaDeviceGraphMemTrim(0));
    graph_figures_are(10 * MiB, 10 * MiB);
    gate_open(gt);
    CK(cudaStreamSynchronize(s));
    CK(cudaDeviceGraphMemTrim(0)); /* x is idle now; x2's allocation is still live */
    graph_figures_are(4 * MiB, 10 * MiB);
    v = 0;
    CK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &v));
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemHigh), 4 * MiB); /* from current */
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemHigh), 10 * MiB);

    graph_destroy(x, g);
    CK(cudaGraphExecDestroy(x2));
    CK(cudaGraphDestroy(g2));
    /* x2's allocation outlives its graph until freed */
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemCurrent), 4 * MiB);
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemHigh), 4 * MiB);
}

TEST_MAIN("capture_sim",
    CFX(graph_memory_counts_against_capacity),
    CFX(graph_memory_outlives_graph_until_freed),
    CFX(begin_and_end_misuse),
    CFX(event_waits_across_the_capture_boundary),
    RESET(stricter_choices),
    RESET(free_node_of_freed_allocation_faults),
    CFX(forked_branches_run_concurrently),
    CFX(relaunch_must_follow_outside_free),
    CFX(graph_memory_attributes_and_trim)
)
