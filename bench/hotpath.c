/* sp-bench hotpath: what one sp_alloc + sp_free pair costs on the CPU, on one stream, beside
 * glibc malloc + free of the same size in the same run (the ratio is the figure), with one and
 * two threads; and how that cost grows with live allocations, streams and pools. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

/* keeps the compiler from eliding malloc/free pairs; per thread, so the threads share nothing */
static _Thread_local void *volatile sink;

typedef struct {
    sp_pool *pool;          /* NULL: glibc malloc */
    cudaStream_t stream;
    size_t size;
    double seconds;
    pthread_barrier_t *start;
    double ns_per_pair;
    long pairs;
} pair_loop;

static void *run_pairs(void *arg)
{
    pair_loop *l = arg;
    void *p;
    if (l->pool) { /* warm: the first pair goes to the driver */
        sp_alloc(l->pool, &p, l->size, l->stream);
        sp_free(l->pool, p, l->stream);
    } else {
        p = malloc(l->size);
        sink = p;
        free(p);
    }
    pthread_barrier_wait(l->start);
    /* the clock is read once a batch; large blocks cost glibc an mmap each, so smaller batches */
    const int batch = l->size < ((size_t)1 << 20) ? 1000 : 10;
    long pairs = 0;
    double t0 = now_s(), t;
    do {
        if (l->pool) {
            for (int i = 0; i < batch; i++) {
                sp_alloc(l->pool, &p, l->size, l->stream);
                sp_free(l->pool, p, l->stream);
            }
        } else {
            for (int i = 0; i < batch; i++) {
                p = malloc(l->size);
                sink = p; /* published, so the pair cannot be elided; freed from the local */
                free(p);
            }
        }
        pairs += batch;
        t = now_s();
    } while (t - t0 < l->seconds);
    l->ns_per_pair = (t - t0) * 1e9 / (double)pairs;
    l->pairs = pairs;
    return NULL;
}

static uint64_t driver_calls(sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    if (!pool || sp_pool_stats(pool, &st) != SP_OK)
        return 0;
    return st.driver_allocs + st.driver_frees;
}

/* Mean ns per pair over `threads` threads, each on its own stream; *driver gets the pool's
 * driver allocations and frees per 1,000 pairs meanwhile (0 once sizes are reused). */
static double measure(sp_pool *pool, cudaStream_t *streams, int threads, size_t size, double s,
                      double *driver)
{
    pthread_t t[2];
    pair_loop loops[2];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1); /* and this thread */
    for (int i = 0; i < threads; i++) {
        loops[i] = (pair_loop){pool, streams[i], size, s, &start, 0, 0};
        pthread_create(&t[i], NULL, run_pairs, &loops[i]);
    }
    pthread_barrier_wait(&start); /* every warm pair is done: count from here */
    uint64_t calls0 = driver_calls(pool);
    double sum = 0, pairs = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        sum += loops[i].ns_per_pair;
        pairs += loops[i].pairs;
    }
    if (driver)
        *driver = pairs > 0 ? (double)(driver_calls(pool) - calls0) * 1000.0 / pairs : 0;
    pthread_barrier_destroy(&start);
    return sum / threads;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define HOTPATH_MAX_REPEATS 64

/* One cell: o->repeats rounds, each measuring streampool and glibc back to back (which comes
 * first alternates), so that a slow stretch of the machine falls on both sides of a round's
 * ratio; medians and the ratios' min-max over the rounds. */
static hotpath_row measure_cell(sp_pool *pool, cudaStream_t *streams, int threads, size_t size,
                                const hotpath_options *o)
{
    int n = o->repeats < HOTPATH_MAX_REPEATS ? o->repeats : HOTPATH_MAX_REPEATS;
    double sp[HOTPATH_MAX_REPEATS], libc[HOTPATH_MAX_REPEATS], ratio[HOTPATH_MAX_REPEATS];
    double driver = 0;
    for (int k = 0; k < n; k++) {
        double calls = 0;
        if (k % 2)
            libc[k] = measure(NULL, streams, threads, size, o->seconds_per_cell, NULL);
        sp[k] = measure(pool, streams, threads, size, o->seconds_per_cell, &calls);
        if (!(k % 2))
            libc[k] = measure(NULL, streams, threads, size, o->seconds_per_cell, NULL);
        ratio[k] = sp[k] / libc[k];
        driver += calls / n;
    }
    hotpath_row row = {.size = size, .threads = threads, .repeats = n,
                       .driver_calls_per_1000_pairs = driver};
    row.ns_per_pair = median(sp, n);
    row.malloc_ns_per_pair = median(libc, n);
    row.ratio_median = median(ratio, n); /* sorts: min and max are the ends */
    row.ratio_min = ratio[0];
    row.ratio_max = ratio[n - 1];
    return row;
}

/* Pair cost on one stream, round-robin over `nstreams` streams and `npools` pools, with
 * `live` allocations held meanwhile. */
static double scaled_pair_ns(sp_runtime *rt, long live, int nstreams, int npools, double seconds,
                             size_t *held_bytes)
{
    cudaStream_t *streams = calloc((size_t)nstreams, sizeof *streams);
    sp_pool **pools = calloc((size_t)npools, sizeof *pools);
    void **held = calloc((size_t)live + 1, sizeof *held);
    if (!streams || !pools || !held)
        return -1;
    for (int i = 0; i < nstreams; i++)
        cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    for (int i = 0; i < npools; i++) {
        char name[32];
        snprintf(name, sizeof name, "scale-%d", i);
        sp_pool_create(rt, name, NULL, &pools[i]);
    }
    for (long i = 0; i < live; i++)
        sp_alloc(pools[0], &held[i], 256, streams[0]);
    /* warm every (pool, stream) cache with a block of its own: all are held before any is
     * freed, or an idle stream's block would simply move to the next stream */
    void *p, **warm = calloc((size_t)nstreams * (size_t)npools, sizeof *warm);
    if (!warm)
        return -1;
    for (int s = 0; s < nstreams; s++)
        for (int q = 0; q < npools; q++)
            sp_alloc(pools[q], &warm[s * npools + q], 256, streams[s]);
    for (int s = 0; s < nstreams; s++)
        for (int q = 0; q < npools; q++)
            sp_free(pools[q], warm[s * npools + q], streams[s]);
    free(warm);
    long pairs = 0;
    int s = 0, q = 0;
    double t0 = now_s(), t;
    do {
        for (int i = 0; i < 1000; i++) {
            sp_alloc(pools[q], &p, 256, streams[s]);
            sp_free(pools[q], p, streams[s]);
            if (++s == nstreams)
                s = 0;
            if (++q == npools)
                q = 0;
        }
        pairs += 1000;
        t = now_s();
    } while (t - t0 < seconds);
    double ns = (t - t0) * 1e9 / (double)pairs;
    sp_stats st = {.size = sizeof st};
    *held_bytes = sp_runtime_stats(rt, &st) == SP_OK ? st.held.current : 0;
    for (long i = 0; i < live; i++)
        sp_free(pools[0], held[i], streams[0]);
    for (int i = 0; i < nstreams; i++)
        sp_stream_release(rt, streams[i]);
    for (int i = 0; i < npools; i++)
        sp_pool_destroy(pools[i]);
    for (int i = 0; i < nstreams; i++)
        cudaStreamDestroy(streams[i]);
    cudaDeviceSynchronize();
    free(streams);
    free(pools);
    free(held);
    return ns;
}

/* CUDA calls per 1,000 alloc+free pairs of one size on one stream once warm: what each
 * allocator asks of the driver in steady state (cudasim's counters). */
static void calls_per_pairs(bench_results *r)
{
    for (int k = 0; k < ALLOC_KIND_COUNT; k++) {
        bench_alloc a;
        if (bench_alloc_open(&a, (alloc_kind)k) != 0)
            continue;
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        void *p;
        for (int i = 0; i < 10; i++) {
            bench_alloc_alloc(&a, &p, 65536, s);
            bench_alloc_free(&a, p, s);
        }
        calls_reset();
        for (int i = 0; i < 1000; i++) {
            bench_alloc_alloc(&a, &p, 65536, s);
            bench_alloc_free(&a, p, s);
        }
        long long calls = calls_by_allocator();
        bench_alloc_stream_done(&a, s);
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
        bench_alloc_close(&a);
        r->calls[r->n_calls++] = (calls_row){bench_alloc_name((alloc_kind)k), (double)calls};
        fprintf(stderr, "  calls: %-32s %6lld per 1,000 pairs\n", bench_alloc_name((alloc_kind)k),
                calls);
    }
}

int bench_hotpath(const hotpath_options *o, bench_results *r)
{
    if (calls_available())
        calls_per_pairs(r);
    sp_runtime *rt;
    sp_pool *pool;
    if (sp_runtime_create(0, NULL, &rt) != SP_OK || sp_pool_create(rt, "hot", NULL, &pool) != SP_OK)
        return -1;
    cudaStream_t streams[2];
    for (int i = 0; i < 2; i++)
        cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    /* the large sizes (1-64 MiB) are served from blocks the pool keeps and reuses: the driver
     * column shows whether they are */
    static const size_t sizes[] = {256, 4096, 65536, (size_t)1 << 20, (size_t)4 << 20,
                                   (size_t)16 << 20, (size_t)64 << 20};
    for (int threads = 1; threads <= 2; threads++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            r->hotpath[r->n_hotpath++] = measure_cell(pool, streams, threads, sizes[i], o);
            const hotpath_row *row = &r->hotpath[r->n_hotpath - 1];
            fprintf(stderr,
                    "  hotpath: %9zu B x%d  %7.1f ns  (malloc %7.1f ns)  %.3gx [%.3g-%.3g]\n",
                    row->size, threads, row->ns_per_pair, row->malloc_ns_per_pair,
                    row->ratio_median, row->ratio_min, row->ratio_max);
        }
    }
    for (int i = 0; i < 2; i++) {
        sp_stream_release(rt, streams[i]);
        cudaStreamDestroy(streams[i]);
    }
    sp_pool_destroy(pool);

    static const long live_full[] = {1, 100, 10000, 1000000}, live_quick[] = {1, 100, 10000};
    static const long streams_full[] = {1, 16, 256, 4096}, streams_quick[] = {1, 16, 256};
    static const long pools_full[] = {1, 4, 16, 256}, pools_quick[] = {1, 4, 16};
    struct {
        const char *name;
        const long *values;
        int n;
    } dims[] = {
        {"live_allocations", o->quick ? live_quick : live_full, o->quick ? 3 : 4},
        {"streams", o->quick ? streams_quick : streams_full, o->quick ? 3 : 4},
        {"pools", o->quick ? pools_quick : pools_full, o->quick ? 3 : 4},
    };
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < dims[d].n; i++) {
            long v = dims[d].values[i];
            size_t held = 0;
            double ns = scaled_pair_ns(rt, d == 0 ? v : 0, d == 1 ? (int)v : 1, d == 2 ? (int)v : 1,
                                       o->seconds_per_cell, &held);
            r->scaling[r->n_scaling++] = (scaling_row){dims[d].name, v, ns, held};
            fprintf(stderr, "  scaling: %-16s %8ld  %7.1f ns  held %zu KiB\n", dims[d].name, v,
                    ns, held >> 10);
        }
    }
    return sp_runtime_destroy(rt) == SP_OK ? 0 : -1;
}
