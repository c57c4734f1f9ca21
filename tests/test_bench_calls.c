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

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_teardown(fn, reset_device)
        T(benchmark_work_is_not_counted),
        T(allocator_sync_and_mem_info_are_counted),
        T(streampool_out_of_memory_counts_every_call),
#undef T
    };
    return cmocka_run_group_tests_name("bench_calls", tests, NULL, NULL);
}
