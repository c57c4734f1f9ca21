/* The pool ledger (pool.c): what a pool holds from the device (limit, reservation, cache limit,
 * give back), its stream table, its two heaps and its figures (usage.h). Above the tiers,
 * below the allocator. What the layers below the runtime need of the device they reach through
 * `dev` (device.h), handed down at the pool's creation; `rt` is for the API's top only (its pools
 * list, names and lock). The stream caches, fences and tiers still read the struct for the
 * stream table, the heaps and the figures (the next split: those into a type of their own). */
#ifndef SP_POOL_H
#define SP_POOL_H

#include "usage.h"
#include "device.h"
#include "heap.h"
#include "request_list.h"

/* ---- pools (pool.c) ---- */

/* How often the cleanup of a failed creation asks the driver again: it has no handle to return
 * a refusal with, and what it cannot give back (a reservation, a cudaMemPool keeping its release
 * threshold) would stay reserved for the life of the process. */
#define SP_CLEANUP_TRIES 4

struct sp_retired_cuda_pool {
    cudaMemPool_t pool;
    struct sp_retired_cuda_pool *next;
};

struct sp_pool {
    sp_runtime *rt;                      /* for the API's top only (runtime.c, reports) */
    sp_device *dev;                      /* &rt->dev: what the layers below reach of the device */
    char name[SP_POOL_NAME_MAX + 1];
    uint64_t id;                         /* unique for the process: per-thread memos key on it */
    /* where new driver allocations go. Atomic: sp_pool_set_limit replaces it (a plain read of
     * an _Atomic is an atomic load) */
    _Atomic(cudaMemPool_t) cuda_pool;
    /* the cudaMemPool's maxSize (pools made here; 0: none): the highest limit set so far */
    uint64_t cuda_cap;
    /* cudaMemPools replaced by a raised limit (sp_pool_set_limit): their segments still in
     * the pool go back to them; kept, threshold 0, until the pool's destroy. Pushed under
     * `lock`, read without it (never removed before the destroy) */
    _Atomic(struct sp_retired_cuda_pool *) retired_cuda_pools;
    bool owns_cuda_pool, is_default;
    sp_pool_config cfg;                  /* changed at run time under `lock` */
    /* cfg.limit rounded down to the driver's granularity (SP_DRIVER_GRANULARITY: what the
     * device gives), what held bytes are held to. 0: none. The cudaMemPool of a pool made
     * here is capped (maxSize) at the highest limit in force: the driver holds the pool to it
     * too */
    /* atomic: sp_pool_set_limit changes it while other threads read it (plain reads of an
     * _Atomic are atomic loads) */
    _Atomic uint64_t limit_bytes;
    atomic_uint_least64_t cache_limit;   /* cfg.cache_limit, read on the hot path */
    uint64_t stats_flush;                /* the runtime's stats_flush_bytes */
    /* set at the pool's first sp_request_begin, never cleared: until then sp_free need not
     * look at a block's request (read on the hot path, next to the figures above) */
    atomic_bool requests_used;
    sp_mutex lock;                       /* the stream table and the cache list */
    sp_stream_cache **buckets;
    size_t bucket_count, cache_count;
    sp_stream_cache *caches;             /* live caches */
    sp_stream_cache *retired;            /* released caches: tombstones, their tags may still be
                                          * in use; their counters are in retired_* */
    atomic_uint_least64_t retired_count, retired_hits, retired_frees, retired_freed_bytes,
        retired_requested_total, retired_active_total;
    atomic_uint_least64_t stream_gen;    /* bumped when a cache is detached */
    sp_heap slabs;                       /* small blocks */
    sp_heap segments;                    /* large ranges */
    sp_pool_figures fig;                 /* usage.c: counters, usage and limit_used */
    atomic_uint_least64_t miss_allocs, miss_requested_total, miss_active_total;
    /* the cache limit: one thread gives back at a time, and a pass that left the cache over the
     * limit (pending frees) is not repeated until the cache grew by a slab or a miss came */
    atomic_flag limit_busy;
    /* open requests (request.c), under `lock`: a small table by id (SP_REQ_BUCKETS), and the
     * next id's sequence number */
    struct sp_req *requests[SP_REQ_BUCKETS];
    uint64_t request_seq;
    atomic_uint_least64_t limit_stuck;
    /* capture bypass blocks whose cudaFreeAsync the driver refused (a captured free among
     * them), under `lock`: still held, given back at a synchronized give-back or the destroy */
    sp_block *refused_frees;
    /* peer.c: the devices that may write the pool's memory (cfg.peers_read_write), read without
     * a lock by allocations on other devices' streams */
    atomic_uint_least64_t peer_writers;
    /* share_guard.c: the pool's exports and the blocks held for importers; NULL until the
     * first sp_pool_export */
    _Atomic(struct sp_share *) share;
    sp_pool *next;
};

/* A new pool of the runtime `rt` (kept as pool->rt, for the layers above; not read here) on
 * device context `dev`. */
int sp__pool_new(sp_runtime *rt, sp_device *dev, const char *name, cudaMemPool_t adopt,
                 const sp_pool_config *cfg, sp_pool **out);
/* Gives all the pool's memory back, destroys its cudaMemPool (if its own) and frees its
 * structures; the caller has checked it has no live allocation. On an error (a segment the
 * driver refused back or whose frees could not be settled, a refused cudaMemPoolDestroy) the
 * pool stays whole and usable, less the memory that did go back, and may be freed again;
 * unless the context is lost (sp__cuda_context_lost), which took the memory: then it goes. */
int sp__pool_free(sp_pool *pool);
/* sp_stream_release for one pool: detaches key's cache, if any, and returns its blocks to their
 * slabs and segments behind its final fence. */
int sp__pool_release_stream(sp_pool *pool, sp_stream_key key);
/* Whether `tag` (a request id's high bits, SP_REQ_SEQ_BITS) is that of a pool ever made in the
 * process: an id with another pool's tag is SP_ERR_WRONG_POOL, one with no pool's is
 * SP_ERR_NO_REQUEST. */
bool sp__pool_tag_given(uint64_t tag);
/* Whether reports (stats, summaries, metrics, the OOM report) show the pool: every pool but a
 * default pool that has not been used. */
bool sp__pool_reported(sp_pool *pool);

/* The limit in force: cfg->limit rounded down to whole driver pages (0: none). */
uint64_t sp__pool_limit_in_pages(const sp_pool_config *cfg);
/* The release threshold the pool's cudaMemPool gets for `cfg`: never below the reservation. */
uint64_t sp__pool_threshold(const sp_pool_config *cfg);
/* SP_OK if the pool `name` may have cfg's limit and reservation, else the error, reported. */
int sp__pool_check_limit(const char *name, const sp_pool_config *cfg);
/* Moves the pool to a new cudaMemPool capped at `cap` (0: none) with cfg's reservation taken
 * there first; the old one is retired (pool->lock held). */
int sp__pool_move_cuda_pool(sp_pool *pool, uint64_t cap, const sp_pool_config *cfg);

#endif /* SP_POOL_H */
