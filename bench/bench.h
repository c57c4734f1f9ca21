/* sp-bench: shared pieces of the benchmarks (serve, hotpath, replay): timing, a seeded
 * generator, the allocators under test behind one interface, and the result rows that
 * report.c prints as a table, JSON and an SVG plot. */
#ifndef SP_BENCH_H
#define SP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cuda_runtime_api.h>

#include "streampool.h"

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: small, seedable, the same sequence for every allocator */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double rng_unit(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * 0x1.0p-53;
}

/* ---- allocators (allocators.c) ---- */

typedef enum {
    ALLOC_CUDA_MALLOC,        /* cudaMalloc / cudaFree: synchronous */
    ALLOC_ASYNC_DEFAULT,      /* cudaMallocAsync on the default pool as CUDA ships it (threshold 0) */
    ALLOC_ASYNC_KEEP,         /* the same with the release threshold at UINT64_MAX */
    ALLOC_STREAMPOOL,
    ALLOC_KIND_COUNT
} alloc_kind;

typedef struct {
    alloc_kind kind;
    const char *name;         /* as in the JSON: "cudaMalloc", "cudaMallocAsync", ... */
    sp_runtime *rt;
    sp_pool *pool;
    cudaMemPool_t default_pool;
} bench_alloc;

int bench_alloc_open(bench_alloc *a, alloc_kind kind);
int bench_alloc_alloc(bench_alloc *a, void **p, size_t n, cudaStream_t s);
int bench_alloc_free(bench_alloc *a, void *p, cudaStream_t s);
void bench_alloc_stream_done(bench_alloc *a, cudaStream_t s); /* before cudaStreamDestroy */
void bench_alloc_close(bench_alloc *a);
const char *bench_alloc_name(alloc_kind kind);

/* ---- CUDA call counting (cudasim only; -1 on a real runtime) ---- */

void calls_reset(void);
/* Calls the allocator made since calls_reset: every CUDA call except the benchmark's own work
 * (memsets, copies, host functions, stream synchronization and memory queries). */
long long calls_by_allocator(void);
bool calls_available(void);

/* Device memory in use (total - free), for the peak-reserved figure. */
size_t device_used_bytes(void);

/* ---- results ---- */

typedef struct {
    const char *allocator;
    int streams;
    long requests;
    double requests_per_s, p50_us, p99_us;
    size_t peak_reserved_bytes;
    double cuda_calls_per_request; /* < 0: not available */
} serve_row;

typedef struct {
    size_t size;
    int threads;
    double ns_per_pair, malloc_ns_per_pair;
} hotpath_row;

typedef struct {
    const char *allocator;
    double calls_per_1000_pairs;  /* CUDA calls per 1,000 alloc+free pairs, steady state */
} calls_row;

typedef struct {
    const char *dimension;        /* "live_allocations", "streams", "pools" */
    long value;
    double ns_per_pair;
} scaling_row;

typedef struct {
    const char *allocator;
    const char *log;
    long events;
    size_t peak_requested, peak_held, peak_reserved;
    long hits;                   /* allocations served without the driver (streampool) */
    long long cuda_calls;        /* < 0: not available */
} replay_row;

typedef struct {
    serve_row serve[64];
    int n_serve;
    hotpath_row hotpath[64];
    int n_hotpath;
    scaling_row scaling[64];
    int n_scaling;
    calls_row calls[ALLOC_KIND_COUNT];
    int n_calls;
    replay_row replay[16];
    int n_replay;
} bench_results;

/* ---- the benchmarks ---- */

typedef struct {
    int stream_counts[8];
    int n_stream_counts;
    long requests;               /* per configuration, split across its streams */
    int buffers;                 /* per request */
    int work_us;                 /* host-function delay per request */
    size_t memset_bytes;         /* bytes of each buffer a request writes; 0: all of it */
    uint64_t seed;
    bool allocators[ALLOC_KIND_COUNT];
} serve_options;

int bench_serve(const serve_options *o, bench_results *r);
/* The i-th buffer size of a request (serve.c documents the shape). */
size_t bench_request_buffer_size(uint64_t *rng, int i);

typedef struct {
    double seconds_per_cell;
    bool quick;                  /* smaller scaling sweeps (for CI) */
} hotpath_options;

int bench_hotpath(const hotpath_options *o, bench_results *r);

/* Replays an RMM-format CSV log; returns 0, or 2 with a message naming the bad line. */
int bench_replay(const char *path, int max_streams, bench_results *r);
/* Writes a synthetic log of `requests` LLM-like requests over `streams` streams. */
int bench_generate_log(const char *path, long requests, int streams, uint64_t seed);

/* ---- report.c ---- */

void report_table(const bench_results *r, const char *device, const char *runtime);
int report_json(const bench_results *r, const char *device, const char *runtime, const char *path);
int report_svg(const bench_results *r, const char *device, const char *path);

#endif
