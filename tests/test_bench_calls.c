/* sp-bench's CUDA call counts (bench/allocators.c), cudasim only: calls_by_allocator must leave
 * out exactly the benchmark's own work and keep every call the allocator under test made, even
 * where both make a call of the same name (streampool synchronizes streams and queries device
 * memory itself). Otherwise streampool's calls/req in serve and its cuda_calls in replay drop the
 * calls it shares a name with the benchmark's work, which the raw allocators never make. */
#include <stdio.h>
#include <stdlib.h>

#include "support/test_support.h"
#include "../bench/bench.h"

static const size_t MiB = (size_t)1 << 20;

/* The benchmark's own waits and queries, and its memsets and host functions: none counted. */
static void benchmark_work_is_not_counted(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p;
    CK(cudaMalloc(&p, MiB));
    atomic_int runs = 0;
    calls_reset();
    CK(cudaMemsetAsync(p, 1, MiB, s));
    CK(cudaLaunchHostFunc(s, count_fn, &runs));
    CK(bench_stream_sync(s));
    bench_stream_drain(s);
    assert_true(device_used_bytes() >= MiB);
    assert_int_equal(atomic_load(&runs), 1);
    assert_int_equal(calls_by_allocator(), 0);
    CK(cudaFree(p));
    CK(cudaStreamDestroy(s));
}

/* The same names from the allocator's side count: a synchronize and a memory query it makes. */
static void allocator_sync_and_mem_info_are_counted(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t free_b, total;
    calls_reset();
    CK(cudaStreamSynchronize(s)); /* as streampool's fence settle does */
    CK(cudaMemGetInfo(&free_b, &total)); /* as streampool's out-of-memory answer does */
    CK(bench_stream_sync(s));
    assert_int_equal(calls_by_allocator(), 2);
    CK(cudaStreamDestroy(s));
}

/* streampool refusing a request larger than the device: every call in the window is its own,
 * among them the cudaMemGetInfo it asks before answering. */
static void streampool_out_of_memory_counts_every_call(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 64 * MiB));
    bench_alloc a;
    assert_int_equal(bench_alloc_open(&a, ALLOC_STREAMPOOL), 0);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p = NULL;
    calls_reset();
    assert_int_equal(bench_alloc_alloc(&a, &p, 128 * MiB, s), -1);
    assert_true(cudasimCallCount("cudaMemGetInfo") >= 1);
    assert_int_equal(calls_by_allocator(), (long long)cudasimCallCount(NULL));
    bench_alloc_stream_done(&a, s);
    CK(cudaStreamDestroy(s));
    bench_alloc_close(&a);
}

/* serve's breakdown: each call lands in its group, the benchmark's own waits and queries in
 * none, and the groups add up to calls_by_allocator. */
static void calls_by_api_groups_add_up(void **state)
{
    (void)state;
    cudaStream_t s;
    cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    void *p, *q;
    size_t free_b, total;
    calls_reset();
    CK(cudaMalloc(&p, MiB));
    CK(cudaMallocAsync(&q, MiB, s));
    CK(cudaMemsetAsync(q, 0, MiB, s));   /* the benchmark's work */
    CK(cudaFreeAsync(q, s));
    CK(cudaEventRecord(e, s));
    CK(cudaStreamWaitEvent(s, e, 0));
    CK(cudaEventSynchronize(e));
    CK(cudaEventQuery(e));
    CK(cudaEventQuery(e));
    CK(cudaStreamQuery(s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemGetInfo(&free_b, &total));
    CK(cudaFree(p));
    CK(bench_stream_sync(s));            /* the benchmark's own */
    bench_stream_drain(s);
    assert_true(device_used_bytes() < total);
    const long long want[API_COUNT] = {
        [API_DRIVER_ALLOC] = 2, [API_DRIVER_FREE] = 2, [API_EVENT_RECORD] = 1,
        [API_EVENT_QUERY] = 2, [API_STREAM_WAIT_EVENT] = 1, [API_EVENT_SYNCHRONIZE] = 1,
        [API_STREAM_QUERY] = 1, [API_STREAM_SYNCHRONIZE] = 2, [API_OTHER] = 1,
    };
    long long sum = 0;
    for (int a = 0; a < API_COUNT; a++) {
        assert_int_equal(calls_by_api((call_api)a), want[a]);
        sum += calls_by_api((call_api)a);
    }
    assert_int_equal(sum, 13);
    assert_int_equal(calls_by_allocator(), sum);
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(s));
}

/* The breakdown's JSON keys, which README and the bench_cli test name. */
static void call_api_names_are_the_json_keys(void **state)
{
    (void)state;
    static const char *const keys[API_COUNT] = {
        "driver_alloc", "driver_free", "cudaEventRecord", "cudaEventQuery", "cudaStreamWaitEvent",
        "cudaEventSynchronize", "cudaStreamQuery", "cudaStreamSynchronize", "other",
    };
    for (int a = 0; a < API_COUNT; a++)
        assert_string_equal(call_api_name((call_api)a), keys[a]);
}

TEST_MAIN("bench_calls",
    RESET(benchmark_work_is_not_counted),
    RESET(allocator_sync_and_mem_info_are_counted),
    RESET(streampool_out_of_memory_counts_every_call),
    RESET(calls_by_api_groups_add_up),
    RESET(call_api_names_are_the_json_keys)
)
