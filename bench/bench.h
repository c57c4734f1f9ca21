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

#define BENCH_MAX_TENANTS 16

typedef struct {
    alloc_kind kind;
    const char *name;         /* as in the JSON: "cudaMalloc", "cudaMallocAsync", ... */
    sp_runtime *rt;
    sp_pool *pool;            /* tenant 0's: pools[0] */
    sp_pool *pools[BENCH_MAX_TENANTS]; /* streampool: one pool per tenant, made on first use */
    cudaMemPool_t default_pool;
} bench_alloc;

int bench_alloc_open(bench_alloc *a, alloc_kind kind);
int bench_alloc_alloc(bench_alloc *a, void **p, size_t n, cudaStream_t s);
int bench_alloc_free(bench_alloc *a, void *p, cudaStream_t s);
/* The same for a tenant (0 .. BENCH_MAX_TENANTS-1): its own streampool pool; the raw
 * allocators have one device pool for every tenant, as a program without streampool would. */
int bench_alloc_alloc_tenant(bench_alloc *a, int tenant, void **p, size_t n, cudaStream_t s);
int bench_alloc_free_tenant(bench_alloc *a, int tenant, void *p, cudaStream_t s);
/* streampool's stats summed over its pools (zeroed for the raw allocators). */
void bench_alloc_stats(bench_alloc *a, sp_stats *st);
void bench_alloc_stream_done(bench_alloc *a, cudaStream_t s); /* before cudaStreamDestroy */
void bench_alloc_close(bench_alloc *a);
const char *bench_alloc_name(alloc_kind kind);

/* Waits, without synchronizing, until the stream has run everything enqueued on it (polling
 * cudaStreamQuery, which the call counts leave out): the device of a replay, which has no
 * kernels, is idle and runs a free at once. */
void bench_stream_drain(cudaStream_t s);
/* cudaStreamSynchronize for the benchmark's own waits, which the call counts leave out. */
cudaError_t bench_stream_sync(cudaStream_t s);

/* ---- CUDA call counting (cudasim only; -1 on a real runtime) ---- */

void calls_reset(void);
/* Calls the allocator made since calls_reset: every CUDA call except the benchmark's own work
 * (memsets, copies, host functions, and the synchronizations and queries it makes through
 * bench_stream_sync, bench_stream_drain and device_used_bytes; the allocator's own count). */
long long calls_by_allocator(void);
/* Of those, the ones that ask the driver for memory (cudaMalloc, cudaMallocAsync,
 * cudaMallocFromPoolAsync): what a warm cache should bring near zero. */
long long calls_allocating(void);
bool calls_available(void);

/* The allocator's calls by API, as serve breaks them down; the groups add up to
 * calls_by_allocator(). */
typedef enum {
    API_DRIVER_ALLOC,       /* cudaMalloc, cudaMallocAsync, cudaMallocFromPoolAsync */
    API_DRIVER_FREE,        /* cudaFree, cudaFreeAsync */
    API_EVENT_RECORD,       /* cudaEventRecord */
    API_EVENT_QUERY,        /* cudaEventQuery: streampool's fence queries */
    API_STREAM_WAIT_EVENT,  /* cudaStreamWaitEvent */
    API_EVENT_SYNCHRONIZE,  /* cudaEventSynchronize */
    API_STREAM_QUERY,       /* cudaStreamQuery, less the benchmark's own (bench_stream_drain) */
    API_STREAM_SYNCHRONIZE, /* cudaStreamSynchronize, less the benchmark's (bench_stream_sync) */
    API_OTHER,              /* the rest: memory and pool queries, event creation, ... */
    API_COUNT
} call_api;

/* Its key in the JSON's calls_per_request_by_api ("driver_alloc", "cudaEventQuery", ...). */
const char *call_api_name(call_api api);
/* The allocator's calls of that group since calls_reset; -1 on a real runtime. */
long long calls_by_api(call_api api);

/* Device memory in use (total - free), for the peak-reserved figure. */
size_t device_used_bytes(void);
size_t device_total_bytes(void);

/* A fresh device of `capacity` bytes (0: the emulator's default) with nothing on it: cudasim's
 * reset, so an allocator finds no memory, pool or stream left by the one before. Returns false
 * where that is not possible (a real GPU); the caller then relies on bench_alloc_close. */
bool device_fresh(size_t capacity);
bool device_can_resize(void);  /* device_fresh can set a capacity: cudasim */

/* ---- results ---- */

typedef struct {
    double median, min, max;     /* over the repeats */
} spread;

typedef struct {
    const char *allocator;
    int streams;
    long requests;               /* measured, all streams, one repeat */
    long warmup;                 /* unmeasured, all streams, one repeat */
    int repeats;
    spread requests_per_s, p99_us;
    double p50_us;               /* median of the repeats */
    size_t peak_reserved_bytes;  /* largest of the repeats */
    /* CUDA calls per request, of the repeat with the median total (the mean of the two middle
     * ones for an even count), so the groups add up to the total; < 0: not available. */
    double cuda_calls_per_request;
    /* calls per request of each repeat: median, min, max (min < 0: not available) */
    spread calls_per_request_spread;
    double driver_allocs_per_request; /* calls_per_api[API_DRIVER_ALLOC] */
    double calls_per_api[API_COUNT];
    /* streampool rows, of the same repeats; < 0: not available (another allocator, no call
     * counters, or no miss to divide by) */
    double misses_per_request;   /* allocations not served by a cache hit */
    double fence_queries_per_miss; /* cudaEventQuery calls per miss */
    long failures;               /* failed calls, all repeats */
} serve_row;

typedef struct {
    size_t size;
    int threads;
    int repeats;                 /* rounds, streampool and malloc alternating in each */
    double ns_per_pair, malloc_ns_per_pair; /* medians of the rounds */
    double ratio_median, ratio_min, ratio_max; /* streampool / malloc, round by round */
    double driver_calls_per_1000_pairs; /* streampool's driver allocs + frees while measured */
} hotpath_row;

typedef struct {
    const char *allocator;
    double calls_per_1000_pairs;  /* CUDA calls per 1,000 alloc+free pairs, steady state */
} calls_row;

typedef struct {
    const char *dimension;        /* "live_allocations", "streams", "pools" */
    long value;
    double ns_per_pair;
    size_t held_bytes;            /* streampool's held bytes (all pools) while measured */
} scaling_row;

typedef struct {
    const char *allocator;
    char workload[64];           /* the shape, or the log's file name */
    long events;
    size_t device_bytes;         /* device capacity of the unconstrained run */
    long failures;               /* failed allocations in those runs: reported, never dropped */
    int repeats;                 /* runs per figure, and trials per capacity tried */
    size_t peak_requested;
    size_t peak_held, peak_held_min, peak_held_max;             /* median, min, max */
    size_t peak_reserved, peak_reserved_min, peak_reserved_max; /* median, min, max */
    long long cuda_calls;        /* < 0: not available */
    long hits;                   /* allocations served without the driver (streampool); < 0: n/a */
    size_t capacity_bytes;       /* smallest capacity at which every trial replayed with no
                                    failure; 0: not found */
    size_t capacity_failed_bytes;/* largest capacity tried that failed (the bisection's floor) */
    long oom_reclaims;           /* at capacity: streampool's oom_retries; < 0: n/a */
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
    replay_row replay[64];
    int n_replay;
} bench_results;

/* ---- the benchmarks ---- */

#define SERVE_MAX_VARIANTS 8

typedef struct {
    int stream_counts[8];
    int n_stream_counts;
    long requests;               /* measured requests per stream */
    long warmup;                 /* unmeasured requests per stream before them; < 0: the
                                    default, bench_serve_warmup */
    int repeats;
    int buffers;                 /* per request */
    int work_us;                 /* host-function delay per request */
    size_t memset_bytes;         /* bytes of each buffer a request writes; 0: all of it */
    uint64_t seed;
    bool rows[SERVE_MAX_VARIANTS]; /* which of serve's rows run, by variant index */
} serve_options;

/* serve's rows (serve.c), in table order: one per allocator, then the ones that use an
 * allocator another way (preallocated buffers; request scopes, when the library has them). */
int serve_variant_count(void);
const char *serve_variant_label(int i);  /* the table's and the JSON's "allocator" */
const char *serve_variant_option(int i); /* its name in --allocators */
/* true if the row is the allocator alone, an allocation and a free per buffer, as replay runs
 * it; *kind is then that allocator */
bool serve_variant_plain(int i, alloc_kind *kind);
/* The row every other's requests/s is divided by (x prealloc): buffers allocated once per
 * stream, no allocator call while measured. */
#define SERVE_PREALLOCATED "preallocated"

int bench_serve(const serve_options *o, bench_results *r);
long bench_serve_warmup(const serve_options *o, int streams); /* per stream */
/* The i-th buffer size of a request (serve.c documents the shape), and the largest it can be. */
size_t bench_request_buffer_size(uint64_t *rng, int i);
size_t bench_request_buffer_max(int i);

typedef struct {
    double seconds_per_cell;     /* per measurement: each round measures both allocators */
    int repeats;                 /* rounds per cell */
    bool quick;                  /* smaller scaling sweeps (for CI) */
} hotpath_options;

int bench_hotpath(const hotpath_options *o, bench_results *r);

typedef struct {
    int max_streams;
    bool allocators[ALLOC_KIND_COUNT];
    size_t capacity;             /* > 0: the runs at this device capacity, no search */
    int repeats;                 /* runs per allocator, and trials per capacity in the search */
    bool find_capacity;          /* bisect for the smallest capacity (cudasim only) */
    const char *workload;        /* row label; NULL: the log's file name */
} replay_options;

/* Replays an RMM-format CSV log; returns 0, 1 if an allocator failed an allocation, or 2 with a
 * message naming the bad line. */
int bench_replay(const char *path, const replay_options *o, bench_results *r);

/* ---- synthetic logs (genlog.c) ---- */

typedef enum {
    SHAPE_SERVING, SHAPE_TRAINING, SHAPE_LLM, SHAPE_TENANTS, SHAPE_FORWARD, SHAPE_COUNT
} log_shape;

typedef struct {
    log_shape shape;
    uint64_t seed;
    /* serving and tenants */
    long requests;               /* serving: requests; tenants: per tenant */
    int streams;                 /* serving: streams; tenants: per tenant */
    /* training and forward */
    int layers, hidden, batch, seq, steps;
    /* llm */
    long llm_requests;
    int max_batch, block_tokens; /* block_tokens 0: whole-sequence buffers that grow by doubling */
    int max_prompt, max_output;
    /* tenants */
    int tenants;
    int noisy_factor;            /* the noisy tenant's sizes and burst length, times the others' */
} genlog_options;

void genlog_defaults(genlog_options *g);
const char *genlog_shape_name(log_shape s);
int genlog_shape_parse(const char *name, log_shape *out);
/* Writes a synthetic log of shape g->shape; 0 or 2 (with a message). */
int bench_generate_log(const char *path, const genlog_options *g);

/* ---- report.c ---- */

typedef struct {
    char device[256];            /* the GPU's name, or cudasim's */
    char runtime[64];            /* "cudasim" or "cuda 13.0" */
    char machine[256];           /* host name, CPU model and cores */
} bench_env;

void report_table(const bench_results *r, const bench_env *env);
/* JSON_SCHEMA_VERSION: bump on any change of a field's name, type or meaning (README). */
#define BENCH_JSON_SCHEMA_VERSION 2
int report_json(const bench_results *r, const bench_env *env, const char *path);
int report_svg(const bench_results *r, const bench_env *env, const char *path);

#endif
