/* cudasim is never more lenient than CUDA: calls a real driver rejects are rejected here too,
 * and misuse a GPU turns into a fault or a race is made a deterministic fault. Emulator-only
 * (several devices from the environment, device faults). */
#include <stdlib.h>

#include "support/cuda_fixture.h"

static const size_t MiB = (size_t)1 << 20;

/* cudaEventRecord: "event and stream must be on the same CUDA context" (cuEventRecord:
 * CUDA_ERROR_INVALID_HANDLE otherwise). A wait on another device's event stays legal. */
static void event_record_on_another_devices_stream_is_rejected(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    cudaEvent_t e0;
    cudaStream_t s1;
    CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming)); /* device 0 */
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    assert_int_equal(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CK(cudaEventQuery(e0)); /* still never recorded */
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(e0, 0));
    CK(cudaStreamWaitEvent(s1, e0, 0)); /* cross-device waits are allowed */
    CK(cudaStreamSynchronize(s1));
    CK(cudaEventDestroy(e0));
    CK(cudaStreamDestroy(s1));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

/* Rule 3: a free on another stream must be ordered after every use. Freed on b while a's memset
 * of the block is still pending and b does not wait for it, the block could be handed out and
 * overwritten under that memset: on a GPU a silent race, here a device fault (sticky
 * cudaErrorIllegalAddress) when the free runs. The same free after an event wait is legal. */
static void free_unordered_with_pending_use_is_a_fault(void **state)
{
    (void)state;
    cudaStream_t a, b;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *p, *q;
    CK(cudaMallocAsync(&p, MiB, a));
    CK(cudaMallocAsync(&q, MiB, a));
    CK(cudaStreamSynchronize(a));
    gate_hold(g, a);
    CK(cudaMemsetAsync(p, 1, MiB, a));
    CK(cudaMemsetAsync(q, 2, MiB, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaFreeAsync(p, b)); /* ordered after the memset: legal */
    CK(cudaMemsetAsync(q, 3, MiB, a));  /* a use the wait does not cover */
    CK(cudaFreeAsync(q, b));           /* returns: CUDA cannot tell */
    gate_open(g);
    assert_int_equal(cudaStreamSynchronize(b), cudaErrorIllegalAddress);
}

/* The legal cases the check must not flag: a use that has already run, a use on the freeing
 * stream itself, and uses of separate allocations on other streams. */
static void free_after_completed_or_same_stream_use_is_legal(void **state)
{
    (void)state;
    cudaStream_t a = cfx.a, b = cfx.b;
    gate *g = gate_new();
    void *p, *q, *r;
    CK(cudaMallocAsync(&p, MiB, a));
    CK(cudaMallocAsync(&q, MiB, b));
    CK(cudaMallocAsync(&r, MiB, a));
    CK(cudaMemsetAsync(p, 1, MiB, a));
    CK(cudaStreamSynchronize(a));
    CK(cudaStreamSynchronize(b));
    CK(cudaFreeAsync(p, b)); /* its use on a has completed */
    gate_hold(g, a);
    CK(cudaMemsetAsync(r, 1, MiB, a));
    CK(cudaMemsetAsync(q, 2, MiB, b));
    CK(cudaFreeAsync(q, b)); /* used on b only */
    CK(cudaFreeAsync(r, a)); /* same stream */
    gate_open(g);
    CK(cudaStreamSynchronize(a));
    CK(cudaStreamSynchronize(b));
}

/* cudaFree of stream-ordered memory: "callers must ensure that all accesses to these pointers
 * have completed" (Runtime API). With a memset of it still pending the memory is gone under
 * the memset: a device fault. After the stream is synchronized, cudaFree is legal. */
static void cudafree_with_pending_use_is_a_fault(void **state)
{
    (void)state;
    cudaStream_t s;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p, *q;
    CK(cudaMallocAsync(&p, MiB, s));
    CK(cudaMallocAsync(&q, MiB, s));
    CK(cudaMemsetAsync(q, 1, MiB, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(q)); /* every use done */
    gate_hold(g, s);
    CK(cudaMemsetAsync(p, 1, MiB, s));
    CK(cudaFree(p));
    gate_open(g);
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
}

/* Rule 2: another stream may use an allocation only once ordered after it. A memset on b of
 * memory allocated on a busy stream a, with no event wait, is a fault when it runs; after a
 * wait, or once a has run past the allocation, it is legal. */
static void use_on_other_stream_before_allocation_is_a_fault(void **state)
{
    (void)state;
    cudaStream_t a, b, c;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *idle, *p;
    CK(cudaMallocAsync(&idle, MiB, a));
    CK(cudaStreamSynchronize(a));
    CK(cudaMemsetAsync(idle, 1, MiB, b)); /* a has run past the allocation */
    CK(cudaStreamSynchronize(b));
    gate_hold(g, a);
    CK(cudaMallocAsync(&p, MiB, a));
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(c, e, 0));
    CK(cudaMemsetAsync(p, 2, MiB, c)); /* ordered after the allocation: legal */
    gate_open(g);
    CK(cudaStreamSynchronize(c));
    assert_true(device_bytes_are(p, MiB, 2, c));
    gate *g2 = gate_new();
    gate_hold(g2, a);
    CK(cudaMallocAsync(&p, MiB, a));
    CK(cudaMemsetAsync(p, 3, MiB, b)); /* not ordered: the fault */
    gate_open(g2);
    assert_int_equal(cudaStreamSynchronize(b), cudaErrorIllegalAddress);
}

/* A capture in global mode on another thread, held open while the test thread calls. */
typedef struct {
    cudaStream_t s;
    enum cudaStreamCaptureMode mode;
    gate *begun, *end;
    cudaError_t end_err;
} capture_thread_args;

static void *capture_thread(void *arg)
{
    capture_thread_args *a = arg;
    cudaGraph_t graph = NULL;
    CK(cudaStreamBeginCapture(a->s, a->mode));
    gate_open(a->begun);
    gate_wait_fn(a->end);
    a->end_err = cudaStreamEndCapture(a->s, &graph);
    if (graph)
        CK(cudaGraphDestroy(graph));
    return NULL;
}

/* Runs `call` on this thread (in `my_mode`) while another thread captures in global mode;
 * returns the call's result and, through *end_err, how that capture ended. */
static cudaError_t during_global_capture(cudaError_t (*call)(void *), void *arg,
                                         enum cudaStreamCaptureMode my_mode, cudaError_t *end_err)
{
    cudaStream_t cs;
    CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    capture_thread_args a = {cs, cudaStreamCaptureModeGlobal, gate_new(), gate_new(), cudaSuccess};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, capture_thread, &a), 0);
    gate_wait_fn(a.begun);
    enum cudaStreamCaptureMode mode = my_mode;
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = call(arg);
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    gate_open(a.end);
    pthread_join(t, NULL);
    CK(cudaStreamDestroy(cs));
    *end_err = a.end_err;
    (void)cudaGetLastError();
    return err;
}

static cudaError_t query_event(void *e) { return cudaEventQuery(e); }
static cudaError_t sync_event(void *e) { return cudaEventSynchronize(e); }

/* Rule 25, cudaThreadExchangeStreamCaptureMode: while another thread captures in global mode, a
 * thread in global mode may make no potentially unsafe call; cudaEventQuery and
 * cudaEventSynchronize of an event recorded outside any capture are such calls (PyTorch runs its
 * allocator's and NCCL watchdog's event queries in relaxed or thread-local mode for this
 * reason): cudaErrorStreamCaptureUnsupported, and the capture is invalidated. A thread in
 * thread-local or relaxed mode ignores other threads' captures. */
static void event_query_and_sync_during_another_threads_global_capture(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaEventRecord(e, s));
    CK(cudaStreamSynchronize(s));
    cudaError_t end_err;
    assert_int_equal(during_global_capture(query_event, e, cudaStreamCaptureModeGlobal, &end_err),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(end_err, cudaErrorStreamCaptureInvalidated);
    assert_int_equal(during_global_capture(sync_event, e, cudaStreamCaptureModeGlobal, &end_err),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(end_err, cudaErrorStreamCaptureInvalidated);
    CK(during_global_capture(query_event, e, cudaStreamCaptureModeThreadLocal, &end_err));
    CK(end_err);
    CK(during_global_capture(sync_event, e, cudaStreamCaptureModeRelaxed, &end_err));
    CK(end_err);
    CK(cudaEventDestroy(e));
}

static cudaError_t get_pool_attr(void *pool)
{
    uint64_t v = 0;
    return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v);
}
static cudaError_t set_pool_attr(void *pool)
{
    uint64_t v = UINT64_MAX;
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v);
}
static cudaError_t trim_pool(void *pool) { return cudaMemPoolTrimTo(pool, 0); }

/* Rule 25, cudaThreadExchangeStreamCaptureMode: reading or setting a memory pool's attributes
 * and trimming it are potentially unsafe calls too (NVIDIA/cccl#11360: libcu++'s pool-attribute
 * access failed with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED under capture and now runs in
 * relaxed mode; HIP, matching CUDA, checks capture in hipMemPoolGetAttribute/SetAttribute/TrimTo,
 * rocm-systems#1857). A global-mode thread during another thread's global capture gets
 * cudaErrorStreamCaptureUnsupported and invalidates it; a relaxed thread does not. */
static void pool_attributes_and_trim_during_another_threads_global_capture(void **state)
{
    (void)state;
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    cudaError_t (*calls[])(void *) = {get_pool_attr, set_pool_attr, trim_pool};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        cudaError_t end_err;
        assert_int_equal(during_global_capture(calls[i], pool, cudaStreamCaptureModeGlobal,
                                               &end_err),
                         cudaErrorStreamCaptureUnsupported);
        assert_int_equal(end_err, cudaErrorStreamCaptureInvalidated);
        CK(during_global_capture(calls[i], pool, cudaStreamCaptureModeRelaxed, &end_err));
        CK(end_err);
    }
}

/* cudaErrorIllegalAddress (driver_types.h): "any further CUDA work will return the same error".
 * After a device fault every call on the device's context fails with it, outputs untouched;
 * only calls that need no context (device count and attributes, the current device, versions)
 * still answer. */
static void sticky_fault_fails_every_context_call(void **state)
{
    (void)state;
    cudaStream_t s, spare;
    cudaEvent_t e, never;
    cudaMemPool_t pool = new_pool(0), cur = NULL;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&spare, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e));
    CK(cudaEventCreate(&never));
    void *p, *q;
    CK(cudaMallocAsync(&p, 4096, s));
    CK(cudaMallocFromPoolAsync(&q, 4096, pool, s));
    CK(cudaEventRecord(e, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemsetAsync((char *)p + 4000, 0, 4096, s)); /* runs past the allocation */
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);

    const cudaError_t bad = cudaErrorIllegalAddress;
    cudaEvent_t e2 = NULL;
    assert_int_equal(cudaEventCreate(&e2), bad);
    assert_int_equal(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming), bad);
    assert_null(e2);
    assert_int_equal(cudaEventSynchronize(never), bad); /* never recorded: still the error */
    float ms = -1.0f;
    assert_int_equal(cudaEventElapsedTime(&ms, e, e), bad);
    assert_true(ms == -1.0f);
    size_t free_b = 1, total = 1;
    assert_int_equal(cudaMemGetInfo(&free_b, &total), bad);
    assert_int_equal(free_b, 1);
    assert_int_equal(total, 1);
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t p2 = NULL;
    assert_int_equal(cudaMemPoolCreate(&p2, &props), bad);
    assert_null(p2);
    uint64_t v = 7;
    assert_int_equal(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v), bad);
    assert_int_equal(v, 7);
    assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v), bad);
    assert_int_equal(cudaMemPoolTrimTo(pool, 0), bad);
    assert_int_equal(cudaDeviceGetMemPool(&cur, 0), bad);
    assert_null(cur);
    void *h = NULL;
    assert_int_equal(cudaMallocHost(&h, 64), bad);
    assert_null(h);
    assert_int_equal(cudaFree(q), bad);
    assert_int_equal(cudaEventDestroy(never), bad);
    assert_int_equal(cudaStreamDestroy(spare), bad);
    assert_int_equal(cudaMemPoolDestroy(pool), bad);
    int n = 0, dev = -1, attr = 0;
    CK(cudaGetDeviceCount(&n));
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&attr, cudaDevAttrMemoryPoolsSupported, 0));
    assert_int_equal(cudaGetLastError(), bad);
}

/* Rule 2 within one allocation (a caching allocator hands parts of one driver allocation to
 * several streams): a memset or copy that writes bytes another stream's pending memset or copy
 * reads or writes, or reads bytes it writes, with no ordering between them, races on a GPU;
 * here it is a device fault when it runs. */
static void conflicting_uses_on_two_streams_are_a_fault(void **state)
{
    (void)state;
    cudaStream_t a, b;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    char *p;
    CK(cudaMallocAsync((void **)&p, 2 * MiB, a));
    CK(cudaStreamSynchronize(a));
    gate_hold(g, a);
    CK(cudaMemsetAsync(p, 1, MiB + 512, a));       /* pending on a */
    CK(cudaMemsetAsync(p + MiB, 2, MiB, b));       /* overlaps a's last 512 bytes */
    gate_open(g);
    assert_int_equal(cudaStreamSynchronize(b), cudaErrorIllegalAddress);
}

/* What must stay legal: disjoint parts of one allocation written on two streams at once, the
 * same bytes read on two streams at once, and a conflicting use ordered by an event. */
static void disjoint_reads_and_ordered_uses_on_two_streams_are_legal(void **state)
{
    (void)state;
    cudaStream_t a = cfx.a, b = cfx.b;
    cudaEvent_t e;
    gate *g = gate_new();
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    char *p;
    static char host_a[4096], host_b[4096];
    CK(cudaMallocAsync((void **)&p, 2 * MiB, a));
    CK(cudaMemsetAsync(p, 5, 2 * MiB, a));
    CK(cudaStreamSynchronize(a));
    gate_hold(g, a);
    CK(cudaMemsetAsync(p, 1, MiB, a));
    CK(cudaMemsetAsync(p + MiB, 2, MiB / 2, b));   /* disjoint */
    char *shared = p + MiB + MiB / 2;              /* written by neither meanwhile */
    CK(cudaMemcpyAsync(host_a, shared, sizeof host_a, cudaMemcpyDeviceToHost, b));
    CK(cudaMemcpyAsync(host_b, shared, sizeof host_b, cudaMemcpyDeviceToHost, a)); /* reads */
    CK(cudaEventRecord(e, a));
    CK(cudaStreamWaitEvent(b, e, 0));
    CK(cudaMemsetAsync(p, 3, 2 * MiB, b));         /* after a's uses */
    gate_open(g);
    CK(cudaStreamSynchronize(b));
    CK(cudaStreamSynchronize(a));
    assert_true(device_bytes_are(p, 2 * MiB, 3, b));
    assert_int_equal(host_a[0], 5);
    assert_int_equal(host_b[sizeof host_b - 1], 5);
    CK(cudaFreeAsync(p, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaEventDestroy(e));
}

TEST_MAIN("sim_strict",
    RESET(event_record_on_another_devices_stream_is_rejected),
    RESET(free_unordered_with_pending_use_is_a_fault),
    CFX(free_after_completed_or_same_stream_use_is_legal),
    RESET(cudafree_with_pending_use_is_a_fault),
    RESET(use_on_other_stream_before_allocation_is_a_fault),
    CFX(event_query_and_sync_during_another_threads_global_capture),
    RESET(pool_attributes_and_trim_during_another_threads_global_capture),
    RESET(sticky_fault_fails_every_context_call),
    RESET(conflicting_uses_on_two_streams_are_a_fault),
    CFX(disjoint_reads_and_ordered_uses_on_two_streams_are_legal)
)
