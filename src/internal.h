/* streampool internals: the types every layer shares and the prototypes of each file, grouped
 * under the name of the file that defines them. Public names are sp_*, cross-file internal
 * names sp__*, file-local ones static. */
#ifndef SP_INTERNAL_H
#define SP_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "streampool.h"

#define sp_likely(x) __builtin_expect(!!(x), 1)
#define sp_unlikely(x) __builtin_expect(!!(x), 0)

/* ---- a spin lock for the short critical sections of the hot path ---- */

typedef struct {
    atomic_int held;
} sp_spin;

static inline void sp_spin_lock(sp_spin *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        while (atomic_load_explicit(&l->held, memory_order_relaxed))
            if (++spins > 64)
                sched_yield(); /* the holder may be descheduled: let it run */
    }
}

static inline void sp_spin_unlock(sp_spin *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- size classes (size_class.c) ----
 * 256-byte steps up to 4 KiB, then 16 classes per power of two: rounding waste is under 256
 * bytes below 4 KiB and under 1/16 (6.25%) of the request above. */
#define SP_CLASS_COUNT (16 + 34 * 16) /* up to SP_MAX_ALLOC = 2^46 */

/* A same-stream miss may take a cached block up to this many classes larger (at most 4/16 =
 * 25% over the request above 4 KiB) rather than ask the driver: with mixed sizes, the block a
 * neighbouring class left is the difference between reuse and new memory. */
#define SP_FIT_CLASSES 4

/* A miss looks for a fenced block in at most this many other streams' caches (newest first),
 * asking the driver (stream query, fence record or query) about at most SP_STEAL_ASKS of them. */
#define SP_STEAL_PROBES 64
#define SP_STEAL_ASKS 8

uint32_t sp__class_of(size_t bytes); /* bytes in 1..SP_MAX_ALLOC */
size_t sp__class_size(uint32_t cls);

/* ---- blocks ---- */

enum { SP_BLOCK_LIVE = 1, SP_BLOCK_CACHED, SP_BLOCK_BYPASS /* live, graph capture: no cache */ };

typedef struct sp_fence sp_fence;
typedef struct sp_stream_cache sp_stream_cache;

/* One driver allocation of a size class, owned by one pool for its whole life. */
typedef struct sp_block {
    void *ptr;
    size_t size;               /* its class size */
    size_t requested;          /* of the live allocation */
    uint32_t cls;
    atomic_int state;
    sp_pool *pool;
    uint64_t epoch;            /* when cached: the cache's free count at its free */
    sp_fence *fence;           /* on the shared list: the released stream's final fence */
    struct sp_block *prev, *next;
} sp_block;

/* ---- fences (fence.c) ----
 * An event recorded on a stream after some of its frees; it covers every block freed there
 * with an epoch <= its own. Shared by all those blocks; never recorded per free. */
struct sp_fence {
    cudaEvent_t event;
    uint64_t epoch;
    bool done;                 /* an event query has seen it complete */
    unsigned refs;             /* shared-list blocks behind it */
    sp_fence *next;
};

typedef struct {
    pthread_mutex_t lock;
    int device;
    sp_fence *free_fences;     /* recycled, events kept for re-recording */
} sp_fence_pool;

int sp__fence_pool_init(sp_fence_pool *fp, int device);
void sp__fence_pool_destroy(sp_fence_pool *fp);
/* Records a new fence on `stream` covering `epoch`. */
int sp__fence_record(sp_fence_pool *fp, cudaStream_t stream, uint64_t epoch, sp_fence **out);
/* Has the fence completed? Asks the driver only until it has. */
int sp__fence_done(sp_fence *f, bool *done);
void sp__fence_recycle(sp_fence_pool *fp, sp_fence *f);

/* ---- stream caches (stream_cache.c) ---- */

typedef struct {
    sp_block *head, *tail;     /* head: most recently freed */
} sp_bin;

/* Streams are keyed by handle, and cudaStreamPerThread also by thread: it is a different
 * stream in every thread. */
typedef struct {
    cudaStream_t stream;
    uint64_t thread;           /* 0 unless stream == cudaStreamPerThread */
} sp_stream_key;

struct sp_stream_cache {
    sp_spin lock;
    sp_stream_key key;
    sp_pool *pool;
    bool released;             /* forgotten: callers holding it must look again */
    bool shared;               /* the pool's list of released streams' blocks */
    uint64_t free_epoch;       /* frees into this cache so far */
    uint64_t done_epoch;       /* frees known complete (a fence covering them completed) */
    sp_fence *fences;          /* outstanding fences, newest first */
    unsigned fence_count;
    sp_bin bins[SP_CLASS_COUNT];
    /* counters of the hot path, under `lock`, merged by stats */
    uint64_t hits, frees, freed_bytes, requested_total, active_total;
    /* byte changes not yet added to the pool's and runtime's shared figures: flushed past the
     * runtime's stats_flush_bytes, on the slow path and on a stats read, so that threads on
     * different streams do not bounce one cache line on every call */
    int64_t requested_delta, active_delta;
    sp_stream_cache *next_in_pool;
    sp_stream_cache *next_in_bucket;
};

sp_stream_key sp__stream_key(cudaStream_t stream);
void sp__bin_push(sp_bin *bin, sp_block *b);
sp_block *sp__bin_pop_newest(sp_bin *bin);
void sp__bin_remove(sp_bin *bin, sp_block *b);
/* The pool's cache for `stream`, created if missing; NULL if host memory ran out. Fast when
 * this thread used the same (pool, stream) recently. */
sp_stream_cache *sp__cache_get(sp_pool *pool, sp_stream_key key);
/* Detaches the pool's cache for key (NULL if none); the caller moves its blocks. */
sp_stream_cache *sp__cache_detach(sp_pool *pool, sp_stream_key key);
void sp__cache_table_free(sp_pool *pool);

/* ---- pointer map (ptrmap.c): pointer -> block for every block a runtime holds ---- */

#define SP_PTRMAP_SHARDS 64

typedef struct {
    sp_spin lock;
    struct sp_ptrmap_slot *slots;
    size_t cap, len;
} sp_ptrmap_shard;

typedef struct {
    sp_ptrmap_shard shards[SP_PTRMAP_SHARDS];
} sp_ptrmap;

int sp__ptrmap_insert(sp_ptrmap *m, sp_block *b);
void sp__ptrmap_remove(sp_ptrmap *m, const void *ptr);
/* Looks ptr up and, if it is a live block of `pool`, marks it cached; all under the shard's
 * lock so that the block cannot go away meanwhile. Returns SP_OK, SP_ERR_BAD_POINTER,
 * SP_ERR_DOUBLE_FREE or SP_ERR_WRONG_POOL; *out gets the block (also a BYPASS one, which is
 * removed from the map). */
int sp__ptrmap_take_for_free(sp_ptrmap *m, const void *ptr, const sp_pool *pool, sp_block **out);
void sp__ptrmap_free(sp_ptrmap *m);

/* ---- pools (pool.c) ---- */

typedef struct {
    atomic_uint_least64_t current, peak, total;
} sp_bytes_counter;

enum {
#define SP_COUNTER_ENUM(name, text) SP_COUNT_##name,
    SP_STATS_COUNTERS(SP_COUNTER_ENUM)
#undef SP_COUNTER_ENUM
    SP_COUNT_N
};

/* Live-memory figures kept for a pool and again for its runtime. */
typedef struct {
    sp_bytes_counter requested, active;
    sp_bytes_counter held;               /* bytes of blocks taken from the driver, not given back */
    atomic_uint_least64_t cached_peak;
} sp_usage;

struct sp_pool {
    sp_runtime *rt;
    char name[SP_POOL_NAME_MAX + 1];
    uint64_t id;                         /* unique for the process: per-thread memos key on it */
    cudaMemPool_t cuda_pool;
    bool owns_cuda_pool, is_default;
    sp_pool_config cfg;                  /* changed at run time under `lock` */
    atomic_uint_least64_t cache_limit;   /* cfg.cache_limit, read on the hot path */
    uint64_t stats_flush;                /* the runtime's stats_flush_bytes */
    pthread_mutex_t lock;                /* the stream table and the cache list */
    sp_stream_cache **buckets;
    size_t bucket_count, cache_count;
    sp_stream_cache *caches;             /* live caches */
    sp_stream_cache *retired;            /* released caches, kept for their counters */
    sp_stream_cache shared;              /* blocks of released streams, each behind a fence */
    atomic_uint_least64_t stream_gen;    /* bumped when a cache is detached */
    atomic_uint_least64_t live;          /* live allocations */
    sp_usage usage;
    atomic_uint_least64_t count[SP_COUNT_N]; /* slow-path counters (hot ones live in caches) */
    atomic_uint_least64_t miss_allocs, miss_requested_total, miss_active_total;
    sp_pool *next;
};

int sp__pool_new(sp_runtime *rt, const char *name, cudaMemPool_t adopt, const sp_pool_config *cfg,
                 sp_pool **out);
/* Frees the pool's memory and structures; the caller has checked it has no live allocation. */
void sp__pool_free(sp_pool *pool);
/* Moves the blocks of a detached cache to the shared list behind one final fence. */
int sp__pool_orphan_cache(sp_pool *pool, sp_stream_cache *c);
/* Gives cached blocks back to the driver until the pool holds at most `keep` bytes, synchronizes
 * those frees and trims the cudaMemPool (never below the reservation); returns the bytes the
 * cudaMemPool released to the device. */
uint64_t sp__pool_give_back(sp_pool *pool, uint64_t keep);
void sp__pool_count(sp_pool *pool, int counter, uint64_t n);
/* Adds a cache's unflushed byte deltas to the pool and runtime figures (c->lock held). */
void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c);
/* The pool's live bytes, every cache flushed first: 0 iff it has no live allocation. */
uint64_t sp__pool_active_bytes(sp_pool *pool);

/* ---- config.c ---- */

/* Checks a merged pool config (reserve within limit, a known policy); SP_ERR_CONFIG with the
 * message otherwise. */
int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen);
/* Notes that a pool called `name` exists, for sp_runtime_check_config (rt->lock held). */
void sp__config_pool_created(sp_runtime *rt, const char *name);
/* Prints a warning on stderr for each conf pool name no pool has had (rt->lock held). */
void sp__config_warn_unused(sp_runtime *rt);
/* The value of the runtime key trace:FILE (SP_ALLOC_CONF wins over alloc_conf), copied into
 * out; false if neither string has it. */
bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len);

/* ---- reclaim.c: out of memory across pools ---- */

/* Asks the other pools of the runtime, lowest priority first, to give their cached memory back
 * (never below their reservation), retrying `retry` after each; then the user's callback. */
typedef int (*sp_retry_fn)(void *arg);
int sp__reclaim(sp_pool *pool, size_t bytes, cudaStream_t stream, sp_retry_fn retry, void *arg);
/* Records the out-of-memory report for sp_runtime_last_oom. */
void sp__oom_record(sp_pool *pool, size_t bytes, cudaStream_t stream);

/* ---- runtime (runtime.c) ---- */

struct sp_runtime {
    int device;
    sp_runtime_config cfg;
    pthread_mutex_t lock;                /* pools list and names, capture list */
    sp_pool *pools;
    sp_pool *default_pool;
    cudaStream_t service;                /* non-blocking: frees of released streams' blocks */
    sp_fence_pool fences;
    sp_ptrmap ptrmap;
    sp_usage usage;
    atomic_uint_least64_t captures;      /* declared captures in progress */
    char *alloc_conf;                    /* sp_runtime_config.alloc_conf, copied */
    char *env_conf;                      /* SP_ALLOC_CONF, copied */
    sp_oom_callback oom_cb;
    void *oom_user;
    sp_oom_report last_oom;              /* under `lock` */
    sp_stream_key *capturing;
    size_t capturing_len, capturing_cap;
    _Atomic(struct sp_trace *) trace;    /* trace.c: NULL until a trace is first started */
    uint64_t conf_pools_seen;            /* config.c, under `lock`: bit i set once a pool named
                                            by the i-th pool-prefixed conf key has existed */
};

/* Is `key` being captured into a graph (declared, or asked of CUDA per the config)? */
int sp__stream_capturing(sp_runtime *rt, sp_stream_key key, bool *capturing);

/* ---- cuda.c: the only file that calls CUDA ---- */

int sp__cuda_check_device(int device);
int sp__cuda_pool_create(int device, uint64_t max_size, cudaMemPool_t *out);
int sp__cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total);
int sp__cuda_pool_destroy(cudaMemPool_t pool);
int sp__cuda_pool_set_threshold(cudaMemPool_t pool, uint64_t bytes);
int sp__cuda_pool_usage(cudaMemPool_t pool, uint64_t *reserved, uint64_t *used);
int sp__cuda_pool_trim(cudaMemPool_t pool, size_t keep);
int sp__cuda_malloc(cudaMemPool_t pool, void **ptr, size_t bytes, cudaStream_t stream);
int sp__cuda_free(void *ptr, cudaStream_t stream);
int sp__cuda_event_create(int device, cudaEvent_t *out);
int sp__cuda_event_destroy(cudaEvent_t event);
int sp__cuda_event_record(cudaEvent_t event, cudaStream_t stream);
int sp__cuda_event_query(cudaEvent_t event, bool *done);
int sp__cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event);
int sp__cuda_stream_create(int device, cudaStream_t *out);
int sp__cuda_stream_destroy(cudaStream_t stream);
int sp__cuda_stream_sync(cudaStream_t stream);
int sp__cuda_stream_query(cudaStream_t stream, bool *idle);
int sp__cuda_stream_is_capturing(cudaStream_t stream, bool *capturing);
int sp__cuda_device_sync(int device);
/* Successful cudaMallocFromPoolAsync and cudaStreamWaitEvent calls made by this thread: how
 * the trace tells a fresh block and a wait on a fence from a cache hit. */
extern _Thread_local uint64_t sp__cuda_thread_mallocs, sp__cuda_thread_waits;

/* ---- stats.c: text rendering shared with reclaim.c ---- */

/* snprintf at buf + *used, advancing *used by what the whole text needs (like snprintf, so a
 * short buffer still yields the full length). */
void sp__appendf(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- names.c: pool names, and how names are escaped in every report ---- */

/* SP_OK for 1..SP_POOL_NAME_MAX bytes of well-formed UTF-8 without control characters (C0,
 * DEL, C1); SP_ERR_INVALID otherwise. */
int sp__pool_name_check(const char *name);
/* A JSON string: quotes around `s`, every control character escaped, a byte that is not UTF-8
 * as U+FFFD. */
void sp__append_json_string(char *buf, size_t len, size_t *used, const char *s);
/* A Prometheus label value: quotes around `s`, with \, " and newline escaped. */
void sp__append_label_value(char *buf, size_t len, size_t *used, const char *s);

/* ---- trace.c: the allocation trace ----
 * Off, it costs sp_alloc and sp_free one load of sp__tracing and a branch that is never taken
 * (the hook line). On, each event goes to the calling thread's own buffer. */

extern atomic_int sp__tracing;          /* runtimes with a trace on, in the whole process */
extern _Thread_local bool sp__trace_inside __attribute__((tls_model("initial-exec")));

static inline bool sp__trace_wanted(void)
{
    if (sp_likely(atomic_load_explicit(&sp__tracing, memory_order_relaxed) == 0))
        return false;
    if (sp__trace_inside) { /* the recording wrapper's own call: consume the mark */
        sp__trace_inside = false;
        return false;
    }
    return true;
}

/* sp_alloc / sp_free with the call recorded: they call the public function again, marked as
 * the wrapper's (the mark is consumed at once, so that calls the OOM callback makes inside are
 * recorded too), and note the outcome. */
int sp__trace_alloc(sp_pool *pool, void **ptr, size_t bytes, cudaStream_t stream);
int sp__trace_free(sp_pool *pool, void *ptr, cudaStream_t stream);
/* An instant event for sp_pool_trim (only when a trace is on). */
void sp__trace_trim(sp_pool *pool);
/* Starts the trace SP_ALLOC_CONF's trace:FILE asks for (a warning on stderr if it cannot). */
void sp__trace_autostart(sp_runtime *rt);
/* Stops a trace still on (writing its files) and frees the trace's memory. */
void sp__trace_destroy(sp_runtime *rt);

/* ---- status.c ---- */

/* Remembers a failed CUDA call's error for sp_last_cuda_error(). */
void sp__set_cuda_error(int cuda_error);

/* This thread's last CUDA error. Every public call clears it on entry (one line, first in the
 * function), so that it only ever describes the call that just returned. initial-exec: the hot
 * path reads it without a __tls_get_addr call. */
extern _Thread_local int sp__cuda_error __attribute__((tls_model("initial-exec")));

static inline void sp__cuda_error_clear(void)
{
    if (sp_unlikely(sp__cuda_error != 0)) /* a read, no store, on the hot path */
        sp__cuda_error = 0;
}

#endif /* SP_INTERNAL_H */
