/* sp-bench serve: a simulated inference server. S streams, one host thread each, serve requests
 * back to back: allocate K buffers on the stream, do the request's work there (a host-function
 * delay standing in for kernels, and a memset of each buffer), free the buffers on the stream,
 * wait for the stream. Every allocator gets the same seeded requests. The `preallocated` row does
 * the same work on buffers each stream allocated once before measuring: the ceiling, with no
 * allocator call (serve_variant says how each row gets its buffers).
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

size_t bench_request_buffer_max(int i)
{
    const size_t KiB = 1024, MiB = KiB * 1024;
    switch (i % 8) {
    case 0: case 1: case 2: case 3: return 64 * KiB;
    case 4: case 5: case 6: return 8 * MiB;
    default: return 48 * MiB;
    }
}

/* ---- the rows ---- */

typedef struct serve_variant {
    const char *label;        /* the table's and the JSON's "allocator" */
    const char *option;       /* its name in --allocators */
    alloc_kind kind;          /* the allocator opened for the row */
    /* Each stream allocates, before the warm-up, one buffer per slot of the largest size the mix
     * can draw there (bench_request_buffer_max), and every request uses them: no allocator call
     * while measured. Its requests/s is what the benchmark's own work allows; its peak reserved
     * is the price of never sharing memory. */
    bool preallocated;
    /* A request scope around each request, for a row that uses one (all three set, or none):
     * begin before the request's first allocation, its buffers allocated into the request,
     * end after the wait for the stream (so a row may promise that the host synchronized it),
     * which frees the buffers: none is freed one by one. NULL for rows without; a
     * non-zero return counts as a failed call. */
    int (*request_begin)(bench_alloc *a, cudaStream_t s, uint64_t *req);
    int (*request_alloc)(bench_alloc *a, uint64_t req, void **p, size_t n);
    int (*request_end)(bench_alloc *a, uint64_t req);
    /* the end comes after serve's wait for the stream (with the synchronized hint), not in
     * stream order right after the request's last use is queued, as a server ends one */
    bool end_after_wait;
} serve_variant;

/* The request-scope rows: each request is a request scope, its buffers allocated into it and
 * freed by its end. `streampool (requests)` ends it in stream order as soon as the request's
 * last use is queued, before serve's wait, as a server does (its frees then settle as the
 * plain row's do); `streampool (requests, synced)` ends it after the wait with
 * SP_REQUEST_SYNCHRONIZED, the host's word that its frees settled: no CUDA call for them. */
static int scope_begin(bench_alloc *a, cudaStream_t s, uint64_t *req)
{
    return sp_request_begin(a->pool, s, NULL, req) == SP_OK ? 0 : -1;
}

static int scope_alloc(bench_alloc *a, uint64_t req, void **p, size_t n)
{
    return sp_request_alloc(a->pool, req, p, n) == SP_OK ? 0 : -1;
}

static int scope_end(bench_alloc *a, uint64_t req)
{
    return sp_request_end(a->pool, req, 0, NULL) == SP_OK ? 0 : -1;
}

static int scope_end_synchronized(bench_alloc *a, uint64_t req)
{
    return sp_request_end(a->pool, req, SP_REQUEST_SYNCHRONIZED, NULL) == SP_OK ? 0 : -1;
}

/* One row per entry, in table order; a new row is an entry here (and its hooks). README's
 * benchmark section and tests/test_bench_cli.py's SERVE_ROWS list the rows. */
static const serve_variant variants[] = {
    {"cudaMalloc", "cudaMalloc", ALLOC_CUDA_MALLOC, false, NULL, NULL, NULL, false},
    {"cudaMallocAsync", "cudaMallocAsync", ALLOC_ASYNC_DEFAULT, false, NULL, NULL, NULL, false},
    {"cudaMallocAsync (threshold max)", "cudaMallocAsync-max", ALLOC_ASYNC_KEEP, false, NULL,
     NULL, NULL, false},
    {"streampool", "streampool", ALLOC_STREAMPOOL, false, NULL, NULL, NULL, false},
    {"streampool (requests)", "streampool-requests", ALLOC_STREAMPOOL, false, scope_begin,
     scope_alloc, scope_end, false},
    {"streampool (requests, synced)", "streampool-requests-synced", ALLOC_STREAMPOOL, false,
     scope_begin, scope_alloc, scope_end_synchronized, true},
    {SERVE_PREALLOCATED, "preallocated", ALLOC_CUDA_MALLOC, true, NULL, NULL, NULL, false},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };
_Static_assert(N_VARIANTS <= SERVE_MAX_VARIANTS, "serve_options.rows holds every row");

int serve_variant_count(void)
{
    return N_VARIANTS;
}

const char *serve_variant_label(int i)
{
    return i >= 0 && i < N_VARIANTS ? variants[i].label : "?";
}

const char *serve_variant_option(int i)
{
    return i >= 0 && i < N_VARIANTS ? variants[i].option : "?";
}

bool serve_variant_plain(int i, alloc_kind *kind)
{
    if (i < 0 || i >= N_VARIANTS || variants[i].preallocated || variants[i].request_begin)
        return false;
    *kind = variants[i].kind;
    return true;
}

static void delay_fn(void *arg)
{
    long us = (long)(intptr_t)arg;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL); /* the device's time for the request's kernels */
}

typedef struct {
    const serve_options *o;
    const serve_variant *v;
    bench_alloc *alloc;
    cudaStream_t stream;
    int index;
    double *latency_us;          /* o->requests of them: the measured requests only */
    long warmup;                 /* unmeasured requests before them */
    pthread_barrier_t *warm, *go;
    atomic_size_t *peak_used;
    long failures;
    void *prealloc[64];          /* the preallocated row's buffers, one per slot */
} stream_worker;

static void note_peak(atomic_size_t *peak, size_t used)
{
    size_t cur = atomic_load(peak);
    while (used > cur && !atomic_compare_exchange_weak(peak, &cur, used))
        ;
}

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

/* One request: allocate (or take the stream's preallocated buffers), enqueue the work, free,
 * wait for the stream. Returns its latency. */
static double serve_request(stream_worker *w, uint64_t *rng, long r)
{
    const serve_options *o = w->o;
    const serve_variant *v = w->v;
    void *bufs[64];
    size_t sizes[64];
    uint64_t req = 0;
    int k = o->buffers > 64 ? 64 : o->buffers;
    double t0 = now_s();
    bool scoped = v->request_begin && v->request_begin(w->alloc, w->stream, &req) == 0;
    if (v->request_begin && !scoped)
        w->failures++;
    for (int i = 0; i < k; i++) {
        sizes[i] = bench_request_buffer_size(rng, i);
        int rc = 0;
        if (v->preallocated)
            bufs[i] = w->prealloc[i];
        else if (scoped)
            rc = v->request_alloc(w->alloc, req, &bufs[i], sizes[i]);
        else
            rc = bench_alloc_alloc(w->alloc, &bufs[i], sizes[i], w->stream);
        if (rc != 0) {
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
    for (int i = 0; i < k && !v->preallocated && !scoped; i++)
        if (bufs[i] && bench_alloc_free(w->alloc, bufs[i], w->stream) != 0)
            w->failures++;
    /* a server ends a request once its last use is queued, in stream order; the synced row
     * ends it after the wait, with the host's word that the stream is done */
    if (scoped && !v->end_after_wait && v->request_end(w->alloc, req) != 0)
        w->failures++;
    if (bench_stream_sync(w->stream) != cudaSuccess)
        w->failures++;
    if (scoped && v->end_after_wait && v->request_end(w->alloc, req) != 0)
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
    double requests_per_s, p50_us, p99_us;
    long long calls, api[API_COUNT]; /* the allocator's, while measured; < 0: not available */
    long long misses;            /* streampool's, while measured; < 0: not available */
    size_t peak_reserved;
    long failures;
} serve_run;

/* Allocations streampool served without a cache hit, so far. */
static long long misses_so_far(bench_alloc *a)
{
    sp_stats st;
    bench_alloc_stats(a, &st);
    return (long long)(st.allocs - st.same_stream_hits - st.cross_stream_reuses -
                       st.cross_stream_waits);
}

/* The preallocated row's buffers, before any request: the stream's slots, each at the largest
 * size the mix can draw there. */
static int preallocate(stream_worker *w)
{
    int k = w->o->buffers > 64 ? 64 : w->o->buffers;
    for (int i = 0; i < k; i++) {
        size_t n = bench_request_buffer_max(i);
        if (bench_alloc_alloc(w->alloc, &w->prealloc[i], n, w->stream) != 0)
            return -1;
    }
    return 0;
}

static void release_preallocated(stream_worker *w)
{
    for (int i = 0; i < 64; i++)
        if (w->prealloc[i] && bench_alloc_free(w->alloc, w->prealloc[i], w->stream) != 0)
            w->failures++;
}

/* One repeat of one row, the allocator opened on a device it finds empty. */
static int serve_once(const serve_options *o, const serve_variant *v, int streams, serve_run *run)
{
    (void)device_fresh(0);
    bench_alloc alloc;
    if (bench_alloc_open(&alloc, v->kind) != 0) {
        fprintf(stderr, "serve: cannot set up %s\n", v->label);
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
    long failures = 0;
    for (int i = 0; i < streams; i++) {
        ws[i] = (stream_worker){o, v, &alloc, ss[i], i, lat + (long)i * o->requests,
                                bench_serve_warmup(o, streams), &warm, &go, &peak_used, 0, {0}};
        if (v->preallocated && preallocate(&ws[i]) != 0)
            failures++;
    }
    for (int i = 0; i < streams; i++)
        pthread_create(&ts[i], NULL, serve_stream, &ws[i]);
    pthread_barrier_wait(&warm);
    /* streampool's stats before the counters' reset: reading them may call CUDA */
    bool streampool = v->kind == ALLOC_STREAMPOOL;
    long long misses_before = streampool ? misses_so_far(&alloc) : 0;
    calls_reset();
    pthread_barrier_wait(&go);
    double t0 = now_s();
    for (int i = 0; i < streams; i++)
        pthread_join(ts[i], NULL);
    double wall = now_s() - t0;
    *run = (serve_run){.calls = calls_by_allocator(), .misses = -1};
    for (int a = 0; a < API_COUNT; a++)
        run->api[a] = calls_by_api((call_api)a);
    if (streampool)
        run->misses = misses_so_far(&alloc) - misses_before;
    for (int i = 0; i < streams; i++) {
        release_preallocated(&ws[i]);
        failures += ws[i].failures;
        bench_alloc_stream_done(&alloc, ss[i]);
        cudaStreamDestroy(ss[i]);
    }
    bench_alloc_close(&alloc);
    qsort(lat, (size_t)total, sizeof *lat, cmp_double);
    run->requests_per_s = (double)total / wall;
    run->p50_us = percentile(lat, total, 0.50);
    run->p99_us = percentile(lat, total, 0.99);
    run->peak_reserved = atomic_load(&peak_used) - used_before;
    run->failures = failures;
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

/* Orders repeats by their total calls (serve_row_of's median repeat). */
static int cmp_run_calls(const void *a, const void *b)
{
    const serve_run *x = a, *y = b;
    return (x->calls > y->calls) - (x->calls < y->calls);
}

/* The calls figures of the repeat with the median total: the middle one, or the mean of the two
 * middle ones, so that the groups add up to the total as each repeat's do. */
static void median_calls(serve_run *runs, int n, long requests, serve_row *row)
{
    qsort(runs, (size_t)n, sizeof *runs, cmp_run_calls);
    const serve_run *a = &runs[(n - 1) / 2], *b = &runs[n / 2];
    double per = 2.0 * (double)requests;
    /* sorted by total: the spread is the first and the last repeat's */
    row->calls_per_request_spread = (spread){-1, -1, -1};
    if (a->calls >= 0)
        row->calls_per_request_spread =
            (spread){(double)(a->calls + b->calls) / per, (double)runs[0].calls / (double)requests,
                     (double)runs[n - 1].calls / (double)requests};
    row->cuda_calls_per_request = a->calls >= 0 ? (double)(a->calls + b->calls) / per : -1;
    for (int k = 0; k < API_COUNT; k++)
        row->calls_per_api[k] = a->api[k] >= 0 ? (double)(a->api[k] + b->api[k]) / per : -1;
    row->driver_allocs_per_request = row->calls_per_api[API_DRIVER_ALLOC];
    row->misses_per_request = a->misses >= 0 ? (double)(a->misses + b->misses) / per : -1;
    row->fence_queries_per_miss = -1;
    if (a->misses >= 0 && a->api[API_EVENT_QUERY] >= 0 && a->misses + b->misses > 0)
        row->fence_queries_per_miss = (double)(a->api[API_EVENT_QUERY] + b->api[API_EVENT_QUERY]) /
                                      (double)(a->misses + b->misses);
}

static int serve_row_of(const serve_options *o, const serve_variant *v, int streams,
                        serve_row *row)
{
    enum { MAX_REPEATS = 64 };
    double rps[MAX_REPEATS], p99[MAX_REPEATS], p50[MAX_REPEATS];
    serve_run runs[MAX_REPEATS];
    int n = o->repeats < MAX_REPEATS ? o->repeats : MAX_REPEATS;
    *row = (serve_row){.allocator = v->label, .streams = streams,
                       .requests = o->requests * streams,
                       .warmup = bench_serve_warmup(o, streams) * streams,
                       .repeats = n};
    for (int i = 0; i < n; i++) {
        serve_run *run = &runs[i];
        if (serve_once(o, v, streams, run) != 0)
            return -1;
        rps[i] = run->requests_per_s;
        p99[i] = run->p99_us;
        p50[i] = run->p50_us;
        if (run->peak_reserved > row->peak_reserved_bytes)
            row->peak_reserved_bytes = run->peak_reserved;
        row->failures += run->failures;
    }
    row->requests_per_s = spread_of(rps, n);
    row->p99_us = spread_of(p99, n);
    row->p50_us = spread_of(p50, n).median;
    median_calls(runs, n, row->requests, row);
    return 0;
}

/* The rows go in the variants' order: cudaMalloc, cudaMallocAsync, the fair baseline
 * cudaMallocAsync (threshold max), streampool right after it, then the preallocated ceiling. */
int bench_serve(const serve_options *o, bench_results *r)
{
    int rc = 0;
    for (int si = 0; si < o->n_stream_counts; si++) {
        for (int k = 0; k < N_VARIANTS; k++) {
            if (!o->rows[k] || r->n_serve >= (int)(sizeof r->serve / sizeof r->serve[0]))
                continue;
            serve_row row;
            if (serve_row_of(o, &variants[k], o->stream_counts[si], &row) != 0) {
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
