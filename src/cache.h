/* Stream caches (cache.c): per-(pool, stream) state found through a per-thread memo:
 * bins, park, tags of frees, fence state, hot counters and the stream's capture state. Above
 * the leaves, below the timelines. */
#ifndef SP_CACHE_H
#define SP_CACHE_H

#include "block.h"

/* ---- stream caches (cache.c) ---- */

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
    atomic_bool released;      /* forgotten: callers holding it must look again (set under
                                * `lock`, read by fence checks without it) */
    /* capture in progress on this stream: declared, or under SP_CAPTURE_ALWAYS last seen by
     * cudaStreamIsCapturing (read without a lock by the hot path) */
    atomic_bool capturing;
    /* declared capture in progress (sp_stream_capture_begin; set and cleared under
     * runtime->lock): under SP_CAPTURE_ALWAYS, cudaStreamIsCapturing's "not yet" before the
     * capture begins must not clear `capturing`, which other threads' fence steps rely on */
    atomic_bool declared;
    /* blocks allocated before a capture and freed during it, under `lock`: kept aside until the
     * capture ends (rule 24) */
    sp_block *aside;
    atomic_uint_least64_t free_epoch;  /* frees on this stream so far; written under `lock` */
    /* fence state, under fence_lock (a mutex: fences mean driver calls) */
    sp_mutex fence_lock;
    atomic_uint_least64_t done_epoch;  /* frees known complete */
    /* another stream's miss wanted memory this stream freed and not known settled: the owner
     * thread publishes what its stream completed at its next free (sp__fence_offer) or
     * large allocation or miss (sp__fence_early), whichever comes first */
    atomic_bool fence_wanted;
    /* segments went back to the driver on this stream (cudaFreeAsync) since the host last
     * synchronized it for a trim: the driver releases their pages only once the host has
     * observed those frees (rule 13), which the tags, settled by a query or fence, do not say */
    atomic_bool driver_frees;
    sp_fence *fences;          /* outstanding fences, newest first */
    /* released after giving segments back: a fence recorded at release behind those frees,
     * which a trim synchronizes so that the driver may release their pages (under fence_lock) */
    sp_fence *final_fence;
    unsigned fence_count;
    /* SP_CLASS_COUNT bins, under `lock`; freed when the stream is released (NULL after), so
     * that a released stream's cache is a small tombstone kept only for its tags */
    sp_bin *bins;
    uint64_t cached_bytes;     /* in bins, under `lock` */
    /* the park (heap.c), newest first, under `lock`; park_count is also read without it, to
     * skip an empty park when flushing */
    sp_block *park[SP_PARK_SLOTS];
    atomic_uint park_count;
    size_t last_huge_free;     /* the size of the stream's last huge free, under `lock` */
    /* counters of the hot path, under `lock`, merged by stats */
    uint64_t hits, frees, freed_bytes, requested_total, active_total;
    /* byte changes not yet added to the pool's and device's shared figures: flushed past the
     * runtime's stats_flush_bytes, on the slow path and on a stats read, so that threads on
     * different streams do not bounce one cache line on every call */
    int64_t requested_delta, active_delta;
    /* per-stream figures (introspect.h), under `lock` like the counters above */
    uint64_t allocs, live_requested, live_active, peak_requested, peak_active;
    uint64_t steals_taken, steals_given;
    /* peer.c: the stream's device as it matters to the pool: SP_PEER_UNKNOWN until its first
     * allocation asks, SP_PEER_OWN for the pool's device, else that device + 1 (read without a
     * lock by every allocation: one predictable branch) */
    atomic_int peer;
    sp_stream_cache *next_in_pool;
    sp_stream_cache *next_in_bucket;
};

#define SP_PEER_UNKNOWN 0
#define SP_PEER_OWN (-1)

sp_stream_key sp__cache_key(cudaStream_t stream);
bool sp__cache_key_is_this_threads(sp_stream_key key);
/* The thread-specific key whose destructor releases an exiting thread's cudaStreamPerThread
 * caches (runtime.c creates it before any pool exists). */
void sp__cache_thread_exit_key_set(pthread_key_t key);

/* The pool's cache for `stream`, created if missing; NULL if host memory ran out. Fast when
 * this thread used the same (pool, stream) recently. */
sp_stream_cache *sp__cache_get(sp_pool *pool, sp_stream_key key);
/* The pool's cache for key if it exists, else (if `create`) a new one, else NULL; without the
 * per-thread memo or the capture check of sp__cache_get: creating, for sp_stream_capture_begin,
 * under runtime->lock. */
sp_stream_cache *sp__cache_find(sp_pool *pool, sp_stream_key key, bool create);
/* Detaches the pool's cache for key (NULL if none), pool->lock held; the caller empties it. */
sp_stream_cache *sp__cache_detach_locked(sp_pool *pool, sp_stream_key key);
/* Waits for every fence step under way on the pool's caches, live and released (each takes and
 * drops its fence_lock, under pool->lock). */
void sp__cache_drain_fence_steps(sp_pool *pool);
void sp__cache_table_free(sp_pool *pool);

/* ---- threads and captures ---- */

/* A thread that made a cudaStreamPerThread cache: at its exit, its caches in every runtime are
 * released from that thread, behind a final fence it can still record. */
void sp__cache_thread_watch(void);
/* The index of key in rt->capturing (declared captures), SIZE_MAX if none (rt->lock held). */
size_t sp__cache_capture_find(const sp_runtime *rt, sp_stream_key key);

/* A cache just created while captures are declared: flagged if its stream is one of them. */
void sp__cache_capture_adopt(sp_stream_cache *c);
/* May the library name c's stream to the driver now (query, fence, wait, synchronize)? Not if it
 * is another thread's per-thread stream, capturing (rule 25), or the legacy stream while a
 * capture is declared. (Whether it was released is the caller's question.) */
bool sp__cache_may_touch(sp_stream_cache *c);

/* Adds a cache's unflushed byte deltas to the pool and device figures (c->lock held). */
void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c);
/* The pool's live bytes, every cache flushed first: 0 iff it has no live allocation. */
uint64_t sp__cache_active_bytes(sp_pool *pool);

#endif /* SP_CACHE_H */
