/* Helpers for the streampool suites (on top of test_support.h): status checks, stats, pools,
 * a call made on another thread, streams that are released from every pool before they are
 * destroyed, tracked runtimes and their teardowns (TRACKED, teardown_faults). The shared
 * fixture built on them is fixtures.h. */
#ifndef SP_TEST_SP_SUPPORT_H
#define SP_TEST_SP_SUPPORT_H

#include <stdio.h>

#include "streampool.h"
#include "test_support.h"

#define SP(call) assert_int_equal((call), SP_OK)

/* A call made on another thread: what it needs (the fields its call uses) and its status. */
typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t stream;
    size_t bytes;
    void *ptr;
    int rc;
} thread_call;

/* A thread's body: sp_free(pool, ptr, stream) of its thread_call, the status in rc. */
static inline void *thread_call_free(void *arg)
{
    thread_call *a = arg;
    a->rc = sp_free(a->pool, a->ptr, a->stream);
    return NULL;
}

static inline sp_stats stats_of(sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    SP(sp_pool_stats(pool, &st));
    return st;
}

/* A status code's value, name and sentence. */
static inline void status_is(int code, int value, const char *name, const char *sentence)
{
    assert_int_equal(code, value);
    assert_string_equal(sp_status_name(code), name);
    assert_string_equal(sp_strerror(code), sentence);
}

/* The runtime's default pool. */
static inline sp_pool *default_pool(sp_runtime *rt)
{
    sp_pool *pool;
    SP(sp_runtime_default_pool(rt, &pool));
    return pool;
}

/* A pool named `name` of rt with this configuration, its creation asserted. */
static inline sp_pool *pool_with_config(sp_runtime *rt, const char *name, const sp_pool_config *cfg)
{
    sp_pool *pool = NULL;
    SP(sp_pool_create(rt, name, cfg, &pool));
    return pool;
}

/* A pool named `name` of rt with this limit, reservation and cache limit (0, 0 and UINT64_MAX
 * are the defaults); the rest of its configuration the defaults. */
static inline sp_pool *pool_of(sp_runtime *rt, const char *name, uint64_t limit, uint64_t reserve,
                               uint64_t cache_limit)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = limit;
    cfg.reserve = reserve;
    cfg.cache_limit = cache_limit;
    return pool_with_config(rt, name, &cfg);
}

/* The three kinds of pool the fault suites spread their work over, by index: 0 "plain" (the
 * defaults), 1 "limited" (a 96 MiB limit), 2 "reserved" (32 MiB reserved). */
enum { POOL_KINDS = 3 };

static inline const char *pool_kind_name(int i)
{
    return i == 0 ? "plain" : i == 1 ? "limited" : "reserved";
}

static inline sp_pool_config pool_kind_config(int i)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    if (i == 1)
        cfg.limit = (uint64_t)96 << 20;
    if (i == 2)
        cfg.reserve = (uint64_t)32 << 20;
    return cfg;
}

/* A worker thread's error count, asserted 0; when it is not, the worker (`who` and its index)
 * and the status of its first error are printed first, so that the failure names them. */
static inline void assert_no_worker_errors(const char *who, int i, uint64_t errors,
                                           int first_error)
{
    if (errors)
        fprintf(stderr, "%s %d: %llu errors, the first %d (%s)\n", who, i,
                (unsigned long long)errors, first_error, sp_status_name(first_error));
    assert_int_equal(errors, 0);
}

/* The limit in force of a pool (sp_pool_get_config). */
static inline uint64_t limit_of(sp_pool *pool)
{
    sp_pool_config c = {.size = sizeof c};
    SP(sp_pool_get_config(pool, &c));
    return c.limit;
}

static inline cudaStream_t new_stream(void)
{
    return cuda_stream(cudaStreamNonBlocking);
}

static inline void drop_stream(sp_runtime *rt, cudaStream_t s)
{
    SP(sp_stream_release(rt, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

/* Runtimes a test made through track_runtime are destroyed by the fixture's teardown
 * (destroy_tracked_runtimes) when a failed assertion left the test early; a test that gets to
 * its end destroys them itself with destroy_runtime. */
static sp_runtime *tracked_runtimes[8];
static int tracked_count;

static inline sp_runtime *track_runtime(int device, const sp_runtime_config *cfg)
{
    sp_runtime *rt = NULL;
    SP(sp_runtime_create(device, cfg, &rt));
    assert_true(tracked_count < 8);
    tracked_runtimes[tracked_count++] = rt;
    return rt;
}

static inline void destroy_runtime(sp_runtime *rt)
{
    for (int i = 0; i < tracked_count; i++)
        if (tracked_runtimes[i] == rt)
            tracked_runtimes[i] = tracked_runtimes[--tracked_count];
    SP(sp_runtime_destroy(rt));
}

/* The end of a test on its own runtime and two streams: both streams released from every pool
 * and destroyed, then the runtime. */
static inline void drop_streams_and_runtime(sp_runtime *rt, cudaStream_t a, cudaStream_t b)
{
    drop_stream(rt, a);
    drop_stream(rt, b);
    destroy_runtime(rt);
}

/* The end of a test on its own runtime: the pool and then the runtime destroyed, and the device
 * has every byte back. */
static inline void destroy_leaving_the_device_empty(sp_runtime *rt, sp_pool *pool)
{
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
    assert_int_equal(device_bytes_used(), 0);
}

/* The end of a long test on its own runtime: the runtime destroyed, the device's bytes still in
 * use printed as a TAP comment, and there may be none. */
static inline void destroy_runtime_reporting_bytes_left(sp_runtime *rt)
{
    destroy_runtime(rt);
    printf("# bytes left on the device after destroy: %llu\n",
           (unsigned long long)device_bytes_used());
    assert_int_equal(device_bytes_used(), 0);
}

/* Opens the gates a failed test left closed, waits for the device, and destroys what is left;
 * the number of runtimes that could not be destroyed (live allocations: SP_ERR_BUSY). */
static inline int destroy_tracked_runtimes(void)
{
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    (void)cudaDeviceSynchronize();
    int busy = 0;
    while (tracked_count > 0)
        busy += sp_runtime_destroy(tracked_runtimes[--tracked_count]) != SP_OK;
    return busy;
}

/* A cmocka teardown for the streampool suites: the runtimes a failed test left (destroyed before
 * the reset, which would pull their memory away), then a fresh device. */
static inline int teardown_runtimes(void **state)
{
    (void)state;
    int busy = destroy_tracked_runtimes();
    reset_device(NULL);
    return busy ? -1 : 0;
}

/* A test whose teardown is teardown_runtimes. */
#define TRACKED(fn) cmocka_unit_test_teardown(fn, teardown_runtimes)

#ifdef SP_CUDASIM
/* The teardown of the fault suites: the injected faults cleared first, so that the runtime of a
 * failed test can still be destroyed. */
static inline int teardown_faults(void **state)
{
    cudasimClearFaults();
    return teardown_runtimes(state);
}

/* A tracked runtime with exact figures at every read (stats_flush_bytes 0) on a device of
 * `bytes` (emulator only: cudasimSetDeviceMemory). */
static inline sp_runtime *exact_runtime_on_device_of(uint64_t bytes)
{
    CK(cudasimSetDeviceMemory(0, bytes));
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0;
    return track_runtime(0, &cfg);
}
#endif

#endif
