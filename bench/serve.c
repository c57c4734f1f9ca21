/* sp-bench serve: a simulated inference server. S streams, one host thread each, serve requests
 * back to back: allocate K buffers on the stream, do the request's work there (a host-function
 * delay standing in for kernels, and a memset of each buffer), free the buffers on the stream,
 * wait for the stream. Every allocator gets the same seeded requests.
 *
 * Buffer sizes follow the shape of one decoder-only transformer step (hidden size 4096, 32
 * layers, fp16), cycling through four kinds per request:
 *   - workspace and metadata (token ids, positions, attention and sampling parameters):
 *     log-uniform 1 KiB .. 64 KiB, four of every eight buffers;
 *   - activations (tokens x hidden x 2 bytes, for 128..1024 tokens): log-uniform 1 .. 8 MiB,
 *     three of every eight;
 *   - a KV-cache block (tokens x layers x 2 x kv_heads 8 x head_dim 128 x 2 bytes, for 64..192
 *     tokens): uniform 16 .. 48 MiB, one of every eight. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static size_t log_uniform(uint64_t *rng, size_t lo, size_t hi)
{
    double x = exp(log((double)lo) + rng_unit(rng) * (log((double)hi) - log((double)lo)));
    return (size_t)x;
}

size_t bench_request_buffer_size(uint64_t *rng, int i)
{
    const size_t KiB = 1024, MiB = KiB * 1024;
    switch (i % 8) {
    case 0: case 1: case 2: case 3: return log_uniform(rng, KiB, 64 * KiB);
    case 4: case 5: case 6: return log_uniform(rng, MiB, 8 * MiB);
    default: return 16 * MiB + (size_t)(rng_unit(rng) * (double)(32 * MiB));
    }
}

static void delay_fn(void *arg)
{
    long us = (long)(intptr_t)arg;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL); /* the device's time for the request's kernels */
}

typedef struct {
    const serve_options *o;
    bench_alloc *alloc;
    cudaStream_t stream;
    int index;
    long requests;
    double *latency_us;
    pthread_barrier_t *start;
    atomic_size_t *peak_used;
    int failures;
} stream_worker;

static void note_peak(atomic_size_t *peak, size_t used)
{
    size_t cur = atomic_load(peak);
    while (used > cur && !atomic_compare_exchange_weak(peak, &cur, used))
        ;
}

static void *serve_stream(void *arg)
{
    stream_worker *w = arg;
    const serve_options *o = w->o;
    uint64_t rng = o->seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(w->index + 1));
    void *bufs[64];
    size_t sizes[64];
    int k = o->buffers > 64 ? 64 : o->buffers;
    pthread_barrier_wait(w->start);
    for (long r = 0; r < w->requests; r++) {
        double t0 = now_s();
        for (int i = 0; i < k; i++) {
            sizes[i] = bench_request_buffer_size(&rng, i);
            if (bench_alloc_alloc(w->alloc, &bufs[i], sizes[i], w->stream) != 0) {
                w->failures++;
                bufs[i] = NULL;
            }
        }
        note_peak(w->peak_used, device_used_bytes());
        if (o->work_us > 0)
            cudaLaunchHostFunc(w->stream, delay_fn, (void *)(intptr_t)o->work_us);
        for (int i = 0; i < k; i++) {
            if (!bufs[i])
                continue;
            size_t n = o->memset_bytes && o->memset_bytes < sizes[i] ? o->memset_bytes : sizes[i];
            cudaMemsetAsync(bufs[i], (int)(r & 0xff), n, w->stream);
        }
        for (int i = 0; i < k; i++)
            if (bufs[i] && bench_alloc_free(w->alloc, bufs[i], w->stream) != 0)
                w->failures++;
        if (cudaStreamSynchronize(w->stream) != cudaSuccess)
            w->failures++;
        w->latency_us[r] = (now_s() - t0) * 1e6;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, long n, double p)
{
    long i = (long)ceil(p * (double)n) - 1;
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static int serve_one(const serve_options *o, alloc_kind kind, int streams, serve_row *row)
{
    bench_alloc alloc;
    if (bench_alloc_open(&alloc, kind) != 0) {
        fprintf(stderr, "serve: cannot set up %s\n", bench_alloc_name(kind));
        return -1;
    }
    long per_stream = o->requests / streams > 0 ? o->requests / streams : 1;
    long total = per_stream * streams;
    cudaStream_t *ss = calloc((size_t)streams, sizeof *ss);
    stream_worker *ws = calloc((size_t)streams, sizeof *ws);
    pthread_t *ts = calloc((size_t)streams, sizeof *ts);
    double *lat = calloc((size_t)total, sizeof *lat);
    if (!ss || !ws || !ts || !lat)
        return -1;
    for (int i = 0; i < streams; i++)
        cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)streams + 1);
    atomic_size_t peak_used = device_used_bytes();
    size_t used_before = atomic_load(&peak_used);
    calls_reset();
    for (int i = 0; i < streams; i++) {
        ws[i] = (stream_worker){o, &alloc, ss[i], i, per_stream, lat + (long)i * per_stream,
                                &start, &peak_used, 0};
        pthread_create(&ts[i], NULL, serve_stream, &ws[i]);
    }
    pthread_barrier_wait(&start);
    double t0 = now_s();
    int failures = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(ts[i], NULL);
        failures += ws[i].failures;
    }
    double wall = now_s() - t0;
    long long calls = calls_by_allocator();
    for (int i = 0; i < streams; i++) {
        bench_alloc_stream_done(&alloc, ss[i]);
        cudaStreamDestroy(ss[i]);
    }
    bench_alloc_close(&alloc);
    qsort(lat, (size_t)total, sizeof *lat, cmp_double);
    *row = (serve_row){
        .allocator = bench_alloc_name(kind),
        .streams = streams,
        .requests = total,
        .requests_per_s = (double)total / wall,
        .p50_us = percentile(lat, total, 0.50),
        .p99_us = percentile(lat, total, 0.99),
        .peak_reserved_bytes = atomic_load(&peak_used) - used_before,
        .cuda_calls_per_request = calls >= 0 ? (double)calls / (double)total : -1,
    };
    pthread_barrier_destroy(&start);
    free(ss);
    free(ws);
    free(ts);
    free(lat);
    if (failures)
        fprintf(stderr, "serve: %s with %d streams: %d failed calls\n", bench_alloc_name(kind),
                streams, failures);
    return failures ? -1 : 0;
}

int bench_serve(const serve_options *o, bench_results *r)
{
    int rc = 0;
    for (int si = 0; si < o->n_stream_counts; si++) {
        for (int k = 0; k < ALLOC_KIND_COUNT; k++) {
            if (!o->allocators[k] || r->n_serve >= (int)(sizeof r->serve / sizeof r->serve[0]))
                continue;
            serve_row row;
            if (serve_one(o, (alloc_kind)k, o->stream_counts[si], &row) != 0) {
                rc = -1;
                continue;
            }
            r->serve[r->n_serve++] = row;
            fprintf(stderr, "  serve: %-32s %3d streams  %10.0f req/s\n", row.allocator,
                    row.streams, row.requests_per_s);
        }
    }
    return rc;
}
