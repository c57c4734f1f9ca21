/* sim-scaling: calls/s of cudaMallocFromPoolAsync + cudaFreeAsync pairs from 1..N host threads,
 * each on its own non-blocking stream, with one shared pool or one pool per thread. It measures
 * how far the runtime (cudasim in particular) serializes independent streams' allocator calls;
 * written against the runtime API alone, so it runs on a GPU too. Not part of sp-bench.
 * Usage: sim-scaling [seconds per row, default 0.5 [threads shared|own]]: with the last two, only
 * that row (for a profiler or a lock-counting run). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define MAX_THREADS 8

typedef struct {
    cudaMemPool_t pool;
    double seconds;
    atomic_int *start;
    unsigned long long pairs;
    int failed;
} worker_arg;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static cudaMemPool_t new_pool(void)
{
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess)
        exit(1);
    uint64_t max = UINT64_MAX; /* keep memory: the row measures bookkeeping, not the OS */
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &max) != cudaSuccess)
        exit(1);
    return pool;
}

static void *worker(void *p)
{
    worker_arg *a = p;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        a->failed = 1;
        return NULL;
    }
    while (!atomic_load(a->start))
        ;
    double end = now() + a->seconds;
    unsigned long long n = 0;
    while (!a->failed) {
        for (int i = 0; i < 256; i++) {
            void *ptr;
            size_t size = (size_t)4096 << (i % 8); /* 4 KiB .. 512 KiB */
            if (cudaMallocFromPoolAsync(&ptr, size, a->pool, s) != cudaSuccess ||
                cudaFreeAsync(ptr, s) != cudaSuccess)
                a->failed = 1;
        }
        n += 256;
        /* bound the stream's queue as a real serving loop would */
        if (cudaStreamSynchronize(s) != cudaSuccess)
            a->failed = 1;
        if (now() >= end)
            break;
    }
    a->pairs = n;
    cudaStreamDestroy(s);
    return NULL;
}

static double run(int threads, int shared, double seconds, unsigned long long *pairs)
{
    pthread_t t[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    cudaMemPool_t pools[MAX_THREADS];
    atomic_int start = 0;
    for (int i = 0; i < threads; i++) {
        pools[i] = shared && i ? pools[0] : new_pool();
        args[i] = (worker_arg){.pool = pools[i], .seconds = seconds, .start = &start};
        if (pthread_create(&t[i], NULL, worker, &args[i]) != 0)
            exit(1);
    }
    double t0 = now();
    atomic_store(&start, 1);
    unsigned long long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (args[i].failed) {
            fprintf(stderr, "sim-scaling: a CUDA call failed\n");
            exit(1);
        }
        total += args[i].pairs;
    }
    double elapsed = now() - t0;
    for (int i = 0; i < threads; i++)
        if (!shared || i == 0)
            cudaMemPoolDestroy(pools[i]);
    *pairs = total;
    return (double)total / elapsed;
}

static void row(int threads, int shared, double seconds)
{
    unsigned long long pairs;
    double rate = run(threads, shared, seconds, &pairs);
    printf("%-8d %-14s %14.0f %12llu\n", threads, shared ? "shared" : "one per thread", rate,
           pairs);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    if (seconds <= 0)
        seconds = 0.5;
    int only_threads = argc > 3 ? atoi(argv[2]) : 0;
    if (argc > 3 && (only_threads < 1 || only_threads > MAX_THREADS ||
                     (strcmp(argv[3], "shared") && strcmp(argv[3], "own")))) {
        fprintf(stderr, "usage: sim-scaling [seconds [threads(1-%d) shared|own]]\n", MAX_THREADS);
        return 2;
    }
    printf("sim-scaling: cudaMallocFromPoolAsync+cudaFreeAsync pairs/s, one stream per thread\n");
    printf("%-8s %-14s %14s %12s\n", "threads", "pool", "pairs/s", "pairs");
    if (only_threads) {
        row(only_threads, strcmp(argv[3], "shared") == 0, seconds);
        return 0;
    }
    for (int shared = 1; shared >= 0; shared--)
        for (int threads = 1; threads <= 2; threads++)
            row(threads, shared, seconds);
    return 0;
}
