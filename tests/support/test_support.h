/* Test helpers shared by the suites: a host-function gate that holds a stream until the test
 * thread opens it, an ordering log written by host functions, and CUDA call checks. Only the
 * CUDA runtime API is used here, so the suites run on a real GPU as well as on cudasim. */
#ifndef SP_TEST_SUPPORT_H
#define SP_TEST_SUPPORT_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>

#ifdef SP_CUDASIM
#include "cudasim.h"
#endif

#include "hold_point.h"

#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

/* A suite's main: runs the group `name` of the tests listed (FX, CFX, RESET, ... entries), in
 * their order, and exits with the number that failed. */
#define TEST_MAIN(name, ...)                                                                   \
    int main(void)                                                                             \
    {                                                                                          \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                       \
        return cmocka_run_group_tests_name(name, tests, NULL, NULL);                           \
    }

/* TEST_MAIN for the suites whose runtimes must not read an SP_ALLOC_CONF from the environment
 * that runs them: it is unset before the first test. */
#define TEST_MAIN_WITHOUT_ALLOC_CONF(name, ...)                                                \
    int main(void)                                                                             \
    {                                                                                          \
        unsetenv("SP_ALLOC_CONF");                                                             \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                       \
        return cmocka_run_group_tests_name(name, tests, NULL, NULL);                           \
    }

/* A test registered with a fresh device after it (reset_device, below) as its only teardown. */
#define RESET(fn) cmocka_unit_test_teardown(fn, reset_device)

/* A thread that runs fn(arg, s) on a non-blocking stream of its own, made on that thread as an
 * application's worker would make it: stream_thread_start, then stream_thread_join, which fails
 * the test if the thread could not be joined or its stream not made. What happens to the stream
 * at the end (released, synchronized, destroyed, or handed back through arg) is fn's. */
typedef struct {
    pthread_t thread;
    void (*fn)(void *arg, cudaStream_t s);
    void *arg;
    bool no_stream; /* the stream could not be made: fn did not run */
} stream_thread;

static inline void *stream_thread_main(void *p)
{
    stream_thread *t = p;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        t->no_stream = true;
    else
        t->fn(t->arg, s);
    return NULL;
}

static inline void stream_thread_start(stream_thread *t, void (*fn)(void *, cudaStream_t),
                                       void *arg)
{
    *t = (stream_thread){.fn = fn, .arg = arg};
    assert_int_equal(pthread_create(&t->thread, NULL, stream_thread_main, t), 0);
}

static inline void stream_thread_join(stream_thread *t)
{
    assert_int_equal(pthread_join(t->thread, NULL), 0);
    assert_false(t->no_stream);
}

/* A stream with these flags (sp_test_support.h's new_stream: non-blocking). */
static inline cudaStream_t cuda_stream(unsigned flags)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

/* A host function that counts its runs in the atomic_int it is given. */
static inline void count_fn(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* The capture status of s, as cudaStreamIsCapturing reports it. */
static inline enum cudaStreamCaptureStatus status_of(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = (enum cudaStreamCaptureStatus)-1;
    CK(cudaStreamIsCapturing(s, &st));
    return st;
}

/* A gate: a host function on a stream blocks there until gate_open() from the test thread. The
 * host function is the thread held at the hold point; its arrival means the stream's work
 * before the gate is done. */
typedef hold_point gate;

/* Gates come from a static pool, not the test's stack: a failed assertion leaves the test early,
 * and teardown opens every gate it handed out so that it can synchronize instead of hanging. */
static gate gate_pool[32];
static int gate_pool_used;

static inline gate *gate_new(void)
{
    assert_true(gate_pool_used < 32);
    gate *g = &gate_pool[gate_pool_used++];
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    hold_point_reset(g);
    return g;
}

static inline void gate_wait_fn(void *arg)
{
    hold_point_here(arg);
}

static inline void gate_hold(gate *g, cudaStream_t s)
{
    CK(cudaLaunchHostFunc(s, gate_wait_fn, g));
}

/* Blocks the test thread until the gated stream's work reaches the gate. */
static inline void gate_wait_arrival(gate *g)
{
    hold_point_wait(g);
}

static inline void gate_open(gate *g)
{
    hold_point_let_go(g);
}

/* Records the order in which host functions ran, across streams. */
typedef struct {
    atomic_int len;
    int order[64];
} order_log;

typedef struct {
    order_log *log;
    int id;
} order_mark;

static inline void order_mark_fn(void *arg)
{
    order_mark *m = arg;
    int i = atomic_fetch_add(&m->log->len, 1);
    if (i < 64)
        m->log->order[i] = m->id;
}

static inline void mark(cudaStream_t s, order_mark *m)
{
    CK(cudaLaunchHostFunc(s, order_mark_fn, m));
}

/* Fills n bytes of device memory with `byte` on s and checks, through pinned memory copied back
 * on s, that every byte reads `byte` once s is done. */
static inline bool device_bytes_are(void *dev, size_t n, unsigned char byte, cudaStream_t s)
{
    unsigned char *host = NULL;
    if (cudaMallocHost((void **)&host, n) != cudaSuccess)
        return false;
    bool ok = cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
              cudaStreamSynchronize(s) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++)
        ok = host[i] == byte;
    cudaFreeHost(host);
    return ok;
}

/* Leaves the device as a fresh test expects it: idle, and on cudasim a new device. */
static inline int reset_device(void **state)
{
    (void)state;
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    cudaDeviceSynchronize();
    gate_pool_used = 0;
#ifdef SP_CUDASIM
    cudasimReset();
#endif
    (void)cudaGetLastError();
    return 0;
}

/* The device's free bytes, and its bytes in use (cudaMemGetInfo). */
static inline uint64_t device_bytes_free(void)
{
    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    return free_b;
}

static inline uint64_t device_bytes_used(void)
{
    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    return total - free_b;
}

/* Ends the capture on s into *g and instantiates the graph: its executable graph. */
static inline cudaGraphExec_t end_capture_and_instantiate(cudaStream_t s, cudaGraph_t *g)
{
    CK(cudaStreamEndCapture(s, g));
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, *g, 0));
    return x;
}

/* One launch of an executable graph on s, waited for. */
static inline void graph_launch_and_wait(cudaGraphExec_t x, cudaStream_t s)
{
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
}

/* An executable graph and the graph it was made from, destroyed. */
static inline void graph_destroy(cudaGraphExec_t x, cudaGraph_t g)
{
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
}

static inline cudaMemPool_t new_pool(uint64_t threshold)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL;
    CK(cudaMemPoolCreate(&pool, &props));
    uint64_t t = threshold;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &t));
    return pool;
}

static inline uint64_t pool_attr(cudaMemPool_t pool, enum cudaMemPoolAttr attr)
{
    uint64_t v = 0;
    CK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

/* Once s is done, a trim to 0 leaves the pool nothing reserved; then it is destroyed. */
static inline void trim_leaves_nothing_then_destroy(cudaMemPool_t pool, cudaStream_t s)
{
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolTrimTo(pool, 0));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0);
    CK(cudaMemPoolDestroy(pool));
}

static inline void pool_flag(cudaMemPool_t pool, enum cudaMemPoolAttr attr, int on)
{
    CK(cudaMemPoolSetAttribute(pool, attr, &on));
}

#endif
