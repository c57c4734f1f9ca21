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
    double *latency_us;          /* o->requests of them: the measured requests only */
    long warmup;                 /* unmeasured requests before them */
    pthread_barrier_t *warm, *go;
    atomic_size_t *peak_used;
    long failures;
} stream_worker;

static void note_peak(atomic_size_t *peak, size_t used)
{
    size_t cur = atomic_load(peak);
    while (used > cur && !atomic_compare_exchange_weak(peak, &cur, used))
        ;
}

/* One request: allocate, enqueue the work, free, wait for the stream. Returns its latency. */
/* The default warm-up is 64 requests per stream and at least 512 in all: one stream alone needs
 * more requests than each of many (which also take each other's cached blocks) before its
 * cache has seen the sizes the mix draws and it stops asking the driver. */
long bench_serve_warmup(const serve_options *o, int streams)
{
    if (o->warmup >= 0)
        return o->warmup;
    long per_stream = 512 / streams;
    return per_stream > 64 ? per_stream : 64;
}

static double serve_request(stream_worker *w, uint64_t *rng, long r)
{
    const serve_options *o = w->o;
    void *bufs[64];
    size_t sizes[64];
    int k = o->buffers > 64 ? 64 : o->buffers;
    double t0 = now_s();
    for (int i = 0; i < k; i++) {
        sizes[i] = bench_request_buffer_size(rng, i);
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
    if (bench_stream_sync(w->stream) != cudaSuccess)
        w->failures++;
    return (now_s() - t0) * 1e6;
}

/* Warm-up requests, then a barrier for every stream (the main thread resets the counters
 * there), then the measured ones: the row is the steady state, not first-touch misses. */
static void *serve_stream(void *arg)
{
    stream_worker *w = arg;
    const serve_options *o = w->o;
    uint64_t rng = o->seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(w->index + 1));
    long r = 0;
    for (; r < w->warmup; r++)
        (void)serve_request(w, &rng, r);
    pthread_barrier_wait(w->warm);
    pthread_barrier_wait(w->go);
    for (long i = 0; i < o->requests; i++, r++)
        w->latency_us[i] = serve_request(w, &rng, r);
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

typedef struct {
    double requests_per_s, p50_us, p99_us, calls_per_request, allocs_per_request;
    size_t peak_reserved;
    long failures;
} serve_run;

/* One repeat of one row, the allocator opened on a device it finds empty. */
static int serve_once(const serve_options *o, alloc_kind kind, int streams, serve_run *run)
{
    (void)device_fresh(0);
    bench_alloc alloc;
    if (bench_alloc_open(&alloc, kind) != 0) {
        fprintf(stderr, "serve: cannot set up %s\n", bench_alloc_name(kind));
        return -1;
    }
    long total = o->requests * streams;
    cudaStream_t *ss = calloc((size_t)streams, sizeof *ss);
    stream_worker *ws = calloc((size_t)streams, sizeof *ws);
    pthread_t *ts = calloc((size_t)streams, sizeof *ts);
    double *lat = calloc((size_t)total, sizeof *lat);
    if (!ss || !ws || !ts || !lat)
        return -1;
    for (int i = 0; i < streams; i++)
        cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking);
    pthread_barrier_t warm, go;
    pthread_barrier_init(&warm, NULL, (unsigned)streams + 1);
    pthread_barrier_init(&go, NULL, (unsigned)streams + 1);
    atomic_size_t peak_used = device_used_bytes();
    size_t used_before = atomic_load(&peak_used);
    for (int i = 0; i < streams; i++) {
        ws[i] = (stream_worker){o, &alloc, ss[i], i, lat + (long)i * o->requests,
                                bench_serve_warmup(o, streams), &warm, &go, &peak_used, 0};
        pthread_create(&ts[i], NULL, serve_stream, &ws[i]);
    }
    pthread_barrier_wait(&warm);
    calls_reset();
    pthread_barrier_wait(&go);
    double t0 = now_s();
    long failures = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(ts[i], NULL);
        failures += ws[i].failures;
    }
    double wall = now_s() - t0;
    long long calls = calls_by_allocator(), allocs = calls_allocating();
    for (int i = 0; i < streams; i++) {
        bench_alloc_stream_done(&alloc, ss[i]);
        cudaStreamDestroy(ss[i]);
    }
    bench_alloc_close(&alloc);
    qsort(lat, (size_t)total, sizeof *lat, cmp_double);
    *run = (serve_run){
        .requests_per_s = (double)total / wall,
        .p50_us = percentile(lat, total, 0.50),
        .p99_us = percentile(lat, total, 0.99),
        .calls_per_request = calls >= 0 ? (double)calls / (double)total : -1,
        .allocs_per_request = allocs >= 0 ? (double)allocs / (double)total : -1,
        .peak_reserved = atomic_load(&peak_used) - used_before,
        .failures = failures,
    };
    pthread_barrier_destroy(&warm);
    pthread_barrier_destroy(&go);
    free(ss);
    free(ws);
    free(ts);
    free(lat);
    return 0;
}

static spread spread_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (spread){median, v[0], v[n - 1]};
}

static int serve_row_of(const serve_options *o, alloc_kind kind, int streams, serve_row *row)
{
    enum { MAX_REPEATS = 64 };
    double rps[MAX_REPEATS], p99[MAX_REPEATS], p50[MAX_REPEATS], calls[MAX_REPEATS];
    double allocs[MAX_REPEATS];
    int n = o->repeats < MAX_REPEATS ? o->repeats : MAX_REPEATS;
    *row = (serve_row){.allocator = bench_alloc_name(kind), .streams = streams,
                       .requests = o->requests * streams,
                       .warmup = bench_serve_warmup(o, streams) * streams,
                       .repeats = n};
    for (int i = 0; i < n; i++) {
        serve_run run;
        if (serve_once(o, kind, streams, &run) != 0)
            return -1;
        rps[i] = run.requests_per_s;
        p99[i] = run.p99_us;
        p50[i] = run.p50_us;
        calls[i] = run.calls_per_request;
        allocs[i] = run.allocs_per_request;
        if (run.peak_reserved > row->peak_reserved_bytes)
            row->peak_reserved_bytes = run.peak_reserved;
        row->failures += run.failures;
    }
    row->requests_per_s = spread_of(rps, n);
    row->p99_us = spread_of(p99, n);
    row->p50_us = spread_of(p50, n).median;
    row->cuda_calls_per_request = spread_of(calls, n).median;
    row->driver_allocs_per_request = spread_of(allocs, n).median;
    return 0;
}

/* The rows go in alloc_kind order: cudaMalloc, cudaMallocAsync, the fair baseline
 * cudaMallocAsync (threshold max), then streampool right after it. */
int bench_serve(const serve_options *o, bench_results *r)
{
    int rc = 0;
    for (int si = 0; si < o->n_stream_counts; si++) {
        for (int k = 0; k < ALLOC_KIND_COUNT; k++) {
            if (!o->allocators[k] || r->n_serve >= (int)(sizeof r->serve / sizeof r->serve[0]))
                continue;
            serve_row row;
            if (serve_row_of(o, (alloc_kind)k, o->stream_counts[si], &row) != 0) {
                rc = -1;
                continue;
            }
            if (row.failures) { /* the row stays, with its failures: never dropped */
                fprintf(stderr, "serve: %s with %d streams: %ld failed calls\n", row.allocator,
                        row.streams, row.failures);
                rc = -1;
            }
            r->serve[r->n_serve++] = row;
            fprintf(stderr, "  serve: %-32s %3d streams  %10.0f req/s (%.0f-%.0f)\n",
                    row.allocator, row.streams, row.requests_per_s.median, row.requests_per_s.min,
                    row.requests_per_s.max);
        }
    }
    return rc;
}
