/* A named pool: its cudaMemPool, its configuration and tenant settings, its usage figures, and
 * the memory it takes from and gives back to the driver: fresh slabs and segments, the cache it
 * gives back (limit, cache limit, trim, out of memory, destroy) and released streams. */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "config.h"
#include "cuda.h"
#include "ptrmap.h"
#include "runtime.h"
#include "status.h"
#include "trace.h"
#include "introspect.h"
#include "share_guard.h"
#include "versioned.h"

static atomic_uint_least64_t next_pool_id = 1;

/* ---- the caches' byte deltas and the pool's live bytes ---- */

void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c)
{
    sp_spin_assert_owner(&c->lock);
    sp__note_flush_locked(c); /* the stream's own figures move with the shared ones */
    if (c->requested_delta || c->active_delta) {
        sp__usage_add(&pool->fig, c->requested_delta, c->active_delta, 0);
        c->requested_delta = c->active_delta = 0;
    }
}

uint64_t sp__pool_active_bytes(sp_pool *pool)
{
    sp_mutex_lock(&pool->lock); /* released caches were flushed at their release */
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool) {
        sp_spin_lock(&c->lock);
        sp__cache_flush_locked(pool, c);
        sp_spin_unlock(&c->lock);
    }
    sp_mutex_unlock(&pool->lock);
    return sp__usage_current(&pool->fig.usage.active.current);
}

static void count(sp_pool *pool, int counter)
{
    sp__usage_count(&pool->fig, counter, 1);
}

/* Claims `size` bytes of the pool's limit before the driver is asked, so that concurrent
 * allocations can never together pass it. The claim moves limit_used only: held bytes and
 * their peaks and totals follow when the driver said yes, with the block carved from them
 * (sp__usage_commit), so that a refused request changes nothing, not even for a stats read made
 * while the driver is asked. */
/* A claim under the limit, and how much of it came from an admitted request's own claim. */
typedef struct {
    sp_req *req;    /* the request the allocation is for, or NULL */
    uint64_t drawn; /* bytes of the claim taken from req->claim (in limit_used already) */
} claim;

/* Takes up to `size` bytes of the claim of the request the allocation is for, if it is the
 * pool's: they are in limit_used already. */
static uint64_t draw_request_claim(sp_pool *pool, sp_req *r, uint64_t size)
{
    if (!r || r->pool != pool)
        return 0;
    uint64_t left = atomic_load_explicit(&r->claim, memory_order_relaxed), take;
    do
        take = left < size ? left : size;
    while (take && !atomic_compare_exchange_weak_explicit(&r->claim, &left, left - take,
                                                          memory_order_relaxed,
                                                          memory_order_relaxed));
    return take;
}

/* Returns bytes drawn from a request's claim to it. */
static void return_request_claim(const claim *k)
{
    if (k->drawn)
        atomic_fetch_add_explicit(&k->req->claim, k->drawn, memory_order_relaxed);
}

static bool held_claim(sp_pool *pool, uint64_t size, claim *k)
{
    /* an admitted request's allocation draws on its claim first: what it was admitted for
     * never meets the limit again */
    k->drawn = sp_unlikely(k->req != NULL) ? draw_request_claim(pool, k->req, size) : 0;
    if (k->drawn == size)
        return true;
    size -= k->drawn;
    uint64_t limit = pool->limit_bytes;
    uint64_t cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    do {
        if (limit && (size > limit || cur > limit - size)) {
            return_request_claim(k);
            k->drawn = 0;
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&pool->fig.limit_used, &cur, cur + size,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* Undoes a claim the driver refused. */
static void held_unclaim(sp_pool *pool, uint64_t size, claim *k)
{
    return_request_claim(k); /* a request's bytes go back to its claim */
    (void)sp__usage_current_add(&pool->fig.limit_used, -(int64_t)(size - k->drawn));
    k->drawn = 0;
}

/* ---- pool lifetime ---- */

/* The limit in force: cfg.limit rounded down to whole driver pages, what the device gives (a
 * request of one byte takes a page of the cudaMemPool), so that neither the pool's figures nor
 * its cudaMemPool ever pass what was configured. 0: none. */
static uint64_t limit_in_pages(const sp_pool_config *cfg)
{
    return cfg->limit / SP_DRIVER_GRANULARITY * SP_DRIVER_GRANULARITY;
}

/* The threshold the cudaMemPool gets: never below the reservation (the pool keeps it), never
 * above the limit (reserved memory must not stay above it past a synchronize). */
static uint64_t effective_threshold(const sp_pool_config *cfg)
{
    uint64_t t = cfg->release_threshold;
    if (t < cfg->reserve)
        t = cfg->reserve;
    if (cfg->limit && t > limit_in_pages(cfg))
        t = limit_in_pages(cfg);
    return t;
}

/* A limit below one driver page could hold nothing the device gives, and a reservation above
 * the limit in pages would pass it from the start: both refused, with words. */
static int check_limit(const char *name, const sp_pool_config *cfg)
{
    if (cfg->limit && cfg->limit < SP_DRIVER_GRANULARITY)
        return sp__config_errorf(SP_ERR_CONFIG,
                          "pool '%s': its limit of %llu bytes is below the driver's granularity "
                          "of %llu bytes (the device gives whole pages: the smallest limit is "
                          "one page)",
                          name, (unsigned long long)cfg->limit,
                          (unsigned long long)SP_DRIVER_GRANULARITY);
    if (cfg->limit && cfg->reserve > limit_in_pages(cfg))
        return sp__config_errorf(SP_ERR_CONFIG,
                          "pool '%s': its reserve of %llu bytes exceeds its limit in whole driver "
                          "pages (%llu bytes of the %llu configured)",
                          name, (unsigned long long)cfg->reserve,
                          (unsigned long long)limit_in_pages(cfg),
                          (unsigned long long)cfg->limit);
    return SP_OK;
}

/* Obtains the reservation from the device once, and frees it at once into the cudaMemPool,
 * which keeps it (threshold >= reserve) for this pool alone. The synchronize makes the free
 * known complete, so any stream of the pool may reuse it (CUDA-SEMANTICS 11c). *held is the
 * allocation if the driver refused its free. */
static int take_reservation_in(sp_pool *pool, cudaMemPool_t cuda_pool, void **held)
{
    void *p;
    sp_device *dev = pool->dev;
    *held = NULL;
    int rc = sp__cuda_malloc(cuda_pool, &p, pool->cfg.reserve, dev->service);
    if (rc != SP_OK)
        return rc;
    if ((rc = sp__cuda_free(p, dev->service)) != SP_OK) {
        *held = p;
        return rc;
    }
    return sp__cuda_stream_sync(dev->service);
}

static int take_reservation(sp_pool *pool, void **held)
{
    return take_reservation_in(pool, pool->cuda_pool, held);
}

/* How often the cleanup of a failed creation asks the driver again: it has no handle to return
 * a refusal with, and what it cannot give back (a reservation, a cudaMemPool keeping its release
 * threshold) would stay reserved for the life of the process. */
#define CLEANUP_TRIES 4

/* A failed creation's cudaMemPool: the reservation still `held` goes back, and the cudaMemPool
 * is destroyed if the pool made it. */
static void discard_cuda_pool_of(sp_pool *pool, cudaMemPool_t cuda_pool, bool owned, void *held)
{
    for (int tries = 0; tries < CLEANUP_TRIES; tries++) {
        if (held && sp__cuda_free(held, pool->dev->service) == SP_OK)
            held = NULL;
        if (!held && (!owned || sp__cuda_pool_destroy(cuda_pool) == SP_OK))
            return;
    }
}

static void discard_cuda_pool(sp_pool *pool, void *held)
{
    discard_cuda_pool_of(pool, pool->cuda_pool, pool->owns_cuda_pool, held);
}

int sp__pool_new(sp_runtime *rt, const char *name, cudaMemPool_t adopt, const sp_pool_config *cfg,
                 sp_pool **out)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > SP_POOL_NAME_MAX)
        return SP_ERR_INVALID;
    sp_pool_config merged;
    int rc = sp__config_for_pool(&rt->dev, name, cfg, &merged); /* the limit in force, in pages */
    if (rc == SP_OK)
        rc = check_limit(name, &merged);
    if (rc != SP_OK)
        return rc;
    sp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return SP_ERR_NO_HOST_MEMORY;
    memcpy(pool->name, name, len + 1);
    pool->rt = rt;
    pool->dev = &rt->dev;
    pool->fig.device = &rt->dev.usage;
    sp__usage_init(&pool->fig.usage);
    pool->cfg = merged;
    atomic_init(&pool->cache_limit, merged.cache_limit);
    pool->limit_bytes = limit_in_pages(&merged);
    atomic_flag_clear(&pool->limit_busy);
    pool->stats_flush = rt->dev.cfg.stats_flush_bytes;
    pool->id = atomic_fetch_add(&next_pool_id, 1);
    if (sp__heap_init(&pool->slabs, pool, true) != SP_OK ||
        sp__heap_init(&pool->segments, pool, false) != SP_OK) {
        free(pool);
        return SP_ERR_NO_HOST_MEMORY;
    }
    if (adopt) {
        uint64_t reserved, used;
        pool->cuda_pool = adopt;
        rc = sp__cuda_pool_usage(adopt, &reserved, &used); /* a valid pool handle? */
        if (rc == SP_OK && (cfg || merged.reserve || merged.limit))
            rc = sp__cuda_pool_set_threshold(adopt, effective_threshold(&merged));
    } else {
        /* the driver holds the pool to the limit in pages as well (raised past it, the pool
         * moves to a new cudaMemPool: sp_pool_set_limit) */
        cudaMemPool_t made = NULL;
        rc = merged.share == SP_SHARE_POSIX_FD /* exportable: share.c */
                 ? sp__cuda_pool_create_shareable(rt->dev.device, pool->limit_bytes, &made)
                 : sp__cuda_pool_create(rt->dev.device, pool->limit_bytes, &made);
        pool->cuda_pool = made;
        pool->cuda_cap = pool->limit_bytes;
        pool->owns_cuda_pool = rc == SP_OK;
        if (rc == SP_OK)
            rc = sp__cuda_pool_set_threshold(pool->cuda_pool, effective_threshold(&merged));
    }
    void *held = NULL;
    if (rc == SP_OK && merged.reserve && (rc = take_reservation(pool, &held)) != SP_OK)
        (void)sp__config_errorf(rc,
                         "pool '%s': its reserve of %llu bytes could not be taken from the "
                         "device: %s",
                         name, (unsigned long long)merged.reserve, sp_strerror(rc));
    if (rc == SP_OK && sp_mutex_init(&pool->lock, SP_RANK_POOL, "pool->lock") != 0)
        rc = SP_ERR_NO_HOST_MEMORY;
    if (rc != SP_OK) {
        if (pool->cuda_pool)
            discard_cuda_pool(pool, held);
        sp__heap_destroy(&pool->slabs);
        sp__heap_destroy(&pool->segments);
        free(pool);
        return rc;
    }
    *out = pool;
    return SP_OK;
}

/* ---- taking memory from the driver ---- */


/* The driver allocation for a request of `size`: a slab for a small block; for a large one a
 * segment of whole driver pages (medium requests share it). The limit is whole pages too, so
 * that room for the request is room for its pages; only a capture's bypass allocations
 * (256-byte rounded) leave a part of a page: near the limit then, only what the request
 * needs. */
static size_t grow_size(sp_pool *pool, const sp_heap *h, size_t size)
{
    size_t want = sp__fresh_size(h->small, size);
    uint64_t limit = pool->limit_bytes;
    uint64_t held = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    if (limit && held < limit && want > limit - held && size <= limit - held) {
        size_t rounded = sp__round_up(size, SP_SEGMENT_ROUND);
        want = limit - held >= rounded ? rounded : size;
    }
    return want;
}

/* The driver refused `bytes` for lack of memory: the device's, or the cap (maxSize) of the
 * pool's cudaMemPool, which is its limit. The cap counts the cudaMemPool's reserved pages, and
 * those include the pages of frees still pending on other threads' streams, which no trim can
 * release yet while the ledger has room: read afterwards (alloc.c, after a give-back and a
 * retry), the cudaMemPool's figures may no longer show it, and the refusal was reported as the
 * device out of memory (issue 27 item 9). Told now from the device instead: a device with the
 * pages free did not refuse, the cap did. */
static int cap_or_device(sp_pool *pool, uint64_t bytes)
{
    uint64_t free_b = 0, total = 0;
    if (pool->cuda_cap && sp__cuda_mem_info(pool->dev->device, &free_b, &total) == SP_OK &&
        free_b >= sp__round_up(bytes, SP_DRIVER_GRANULARITY))
        return SP_ERR_LIMIT;
    return SP_ERR_OUT_OF_MEMORY;
}

int sp__pool_grow(sp_pool *pool, sp_heap *h, size_t size, size_t requested, sp_stream_cache *me,
                  cudaStream_t stream, struct sp_req *req, sp_block **out)
{
    size_t bytes = grow_size(pool, h, size);
    claim k = {.req = req};
    if (!held_claim(pool, bytes, &k))
        return SP_ERR_LIMIT;
    sp_segment *s = sp__heap_segment_new(); /* before the driver is asked: see below */
    if (!s) {
        held_unclaim(pool, bytes, &k);
        return SP_ERR_NO_HOST_MEMORY;
    }
    void *ptr;
    int rc = sp__cuda_malloc(pool->cuda_pool, &ptr, bytes, stream);
    if (rc != SP_OK) {
        sp__heap_segment_discard(s);
        held_unclaim(pool, bytes, &k);
        return rc == SP_ERR_OUT_OF_MEMORY ? cap_or_device(pool, bytes) : rc;
    }
    count(pool, SP_COUNT_driver_allocs);
    /* the allocation is ordered on `stream` only: tag it like a free there, so another stream
     * uses what is left of the segment only behind a fence recorded after it */
    sp_spin_lock(&me->lock); /* free_epoch's writers hold the cache's lock */
    uint64_t epoch = atomic_load_explicit(&me->free_epoch, memory_order_relaxed) + 1;
    atomic_store_explicit(&me->free_epoch, epoch, memory_order_release);
    bool released = atomic_load_explicit(&me->released, memory_order_relaxed);
    sp_spin_unlock(&me->lock);
    /* released meanwhile by another thread: its final fence may precede this allocation, and
     * no fence is recorded on a released cache again, so the tag would never settle and the
     * rest of the segment would be lost to every other stream. The final fence is extended
     * over it (or, failing that, the stream synchronized), while the stream is still in use. */
    if (sp_unlikely(released))
        (void)sp__fence_final(me);
    bool huge = !h->small && size > SP_MEDIUM_MAX;
    sp_mutex_lock(&h->lock);
    rc = sp__heap_add_segment(h, s, ptr, bytes, huge, me, epoch);
    sp_block *b = rc == SP_OK ? sp__heap_take(h, size, me, stream, SP_TAKE_KNOWN, NULL) : NULL;
    if (b) /* held and live together, before another thread can carve the rest */
        b->requested = requested;
    if (rc == SP_OK)
        sp__usage_commit(&pool->fig, b ? (int64_t)requested : 0, b ? (int64_t)b->size : 0,
                     (int64_t)bytes);
    sp_mutex_unlock(&h->lock);
    *out = b;
    if (rc != SP_OK) {
        /* the ptrmap could not take it: back to the driver, or, refused, kept in the heap
         * where a give-back finds it, never handed out */
        if (sp__cuda_free(ptr, stream) == SP_OK) {
            count(pool, SP_COUNT_driver_frees); /* as its driver_allocs was */
            sp__heap_segment_discard(s);
            held_unclaim(pool, bytes, &k);
        } else {
            count(pool, SP_COUNT_give_back_failures);
            sp_mutex_lock(&h->lock);
            sp__heap_keep_unmapped(h, s, ptr, bytes, huge, me, epoch);
            sp__usage_commit(&pool->fig, 0, 0, (int64_t)bytes);
            sp_mutex_unlock(&h->lock);
        }
        return rc;
    }
    return *out ? SP_OK : SP_ERR_NO_HOST_MEMORY;
}

int sp__pool_bypass_alloc(sp_pool *pool, size_t bytes, cudaStream_t stream, struct sp_req *req,
                          sp_block **out)
{
    size_t size = sp__round_up(bytes, SP_BYPASS_ALIGN);
    claim k = {.req = req};
    if (!held_claim(pool, size, &k))
        return SP_ERR_LIMIT;
    sp_block *b = calloc(1, sizeof *b);
    int rc = b ? sp__cuda_malloc(pool->cuda_pool, &b->ptr, size, stream) : SP_ERR_NO_HOST_MEMORY;
    if (rc == SP_OK) {
        b->size = size;
        b->cls = SP_CLASS_COUNT;
        b->pool = pool;
        atomic_init(&b->state, SP_BLOCK_BYPASS);
        if ((rc = sp__ptrmap_insert(&pool->dev->ptrmap, b)) != SP_OK)
            (void)sp__cuda_free(b->ptr, stream);
    }
    if (rc != SP_OK) {
        free(b);
        held_unclaim(pool, size, &k);
        return rc;
    }
    b->requested = bytes;
    sp__usage_commit(&pool->fig, (int64_t)bytes, (int64_t)size, (int64_t)size);
    count(pool, SP_COUNT_driver_allocs);
    *out = b;
    return SP_OK;
}

void sp__pool_bypass_free(sp_pool *pool, sp_block *b, cudaStream_t stream)
{
    /* asked again at once: inside a capture the free is the graph's free node, and only then
     * does each launch of the graph give the memory back itself */
    for (int tries = 0; tries < CLEANUP_TRIES; tries++) {
        if (sp__cuda_free(b->ptr, stream) == SP_OK) {
            count(pool, SP_COUNT_driver_frees);
            sp__usage_add(&pool->fig, 0, 0, -(int64_t)b->size);
            free(b);
            return;
        }
        count(pool, SP_COUNT_give_back_failures);
    }
    /* refused for good: still counted as held, and kept (forgotten, it would stay reserved for
     * the life of the process: a launched graph's allocation lives until it is freed) */
    sp_mutex_lock(&pool->lock);
    b->next = pool->refused_frees;
    pool->refused_frees = b;
    sp_mutex_unlock(&pool->lock);
}

/* Gives back the bypass blocks whose free the driver refused, on the service stream, outside
 * any capture; the driver's "invalid value" means it holds nothing there (a graph never
 * launched, or one whose launch freed it with a later node), and the block goes. Returns
 * SP_OK once none is left, else the first error. */
static int give_back_refused_frees(sp_pool *pool)
{
    int err = SP_OK;
    sp_mutex_lock(&pool->lock);
    sp_block *list = pool->refused_frees, *kept = NULL;
    pool->refused_frees = NULL;
    sp_mutex_unlock(&pool->lock);
    for (sp_block *b = list, *next; b; b = next) {
        next = b->next;
        int rc = sp__cuda_free(b->ptr, pool->dev->service);
        if (rc == SP_OK || sp_last_cuda_error() == cudaErrorInvalidValue) {
            count(pool, rc == SP_OK ? SP_COUNT_driver_frees : SP_COUNT_give_back_failures);
            sp__usage_add(&pool->fig, 0, 0, -(int64_t)b->size);
            free(b);
            continue;
        }
        if (err == SP_OK)
            err = rc;
        b->next = kept;
        kept = b;
    }
    if (kept) {
        sp_mutex_lock(&pool->lock);
        sp_block *tail = kept;
        while (tail->next)
            tail = tail->next;
        tail->next = pool->refused_frees;
        pool->refused_frees = kept;
        sp_mutex_unlock(&pool->lock);
    }
    return err;
}

/* ---- giving cached memory back ---- */

/* Every stream's frees made before now are complete once the device is synchronized, and the
 * segments given back on every stream observed: a released stream's (driver_frees), which no
 * later trim could synchronize, are cleared so that they do not bring back this synchronize. */
static void settle_by_device_sync(sp_pool *pool, int *err)
{
    sp_mutex_lock(&pool->lock);
    /* asked again under the lock, held through the synchronize: sp_stream_capture_begin counts
     * its capture before it takes every pool's lock, so a capture declared since the caller
     * asked is seen here, and one declared later is begun only after the synchronize (rule 25) */
    if (atomic_load_explicit(&pool->dev->captures, memory_order_acquire) != 0) {
        sp_mutex_unlock(&pool->lock);
        return;
    }
    size_t n = 0;
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool)
            n++;
    struct {
        uint64_t epoch;
        bool driver_frees;
    } *snap = calloc(n ? n : 1, sizeof *snap);
    size_t i = 0;
    /* cleared before the synchronize: a give-back racing with it sets the flag again */
    if (snap)
        for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
            for (sp_stream_cache *c = *l; c; c = c->next_in_pool, i++) {
                snap[i].epoch = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
                snap[i].driver_frees = atomic_exchange_explicit(&c->driver_frees, false,
                                                                memory_order_acq_rel);
            }
    int rc = snap ? sp__cuda_device_sync(pool->dev->device) : SP_ERR_NO_HOST_MEMORY;
    i = 0;
    if (snap)
        for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
            for (sp_stream_cache *c = *l; c; c = c->next_in_pool, i++) {
                if (rc != SP_OK) {
                    if (snap[i].driver_frees)
                        atomic_store_explicit(&c->driver_frees, true, memory_order_release);
                    continue;
                }
                sp_mutex_lock(&c->fence_lock);
                if (atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < snap[i].epoch)
                    atomic_store_explicit(&c->done_epoch, snap[i].epoch, memory_order_release);
                sp_mutex_unlock(&c->fence_lock);
            }
    if (rc != SP_OK) {
        count(pool, SP_COUNT_skipped_steps);
        if (err && *err == SP_OK)
            *err = rc;
    }
    sp_mutex_unlock(&pool->lock);
    free(snap);
}

/* Settles, by host waits, every stream's frees (trim and out of memory only): a covering fence
 * or a stream synchronize (rule 13: a free not yet observed complete cannot be released). */
static void settle_all(sp_pool *pool, int *err)
{
    bool unsettled = false;
    sp_mutex_lock(&pool->lock);
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool) {
            uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
            int rc = sp__fence_tag_sync(c, now);
            /* and the segments given back on the stream, which its tags do not cover: settled
             * by a query, they are still outstanding for the driver's trim */
            if (rc == SP_OK)
                rc = sp__fence_observe_driver_frees(c);
            if (rc != SP_OK) {
                unsettled = true;
                count(pool, SP_COUNT_skipped_steps);
                if (err && *err == SP_OK && rc != SP_ERR_CUDA)
                    *err = rc;
            }
        }
    sp_mutex_unlock(&pool->lock);
    /* Frees this thread cannot order one by one (another live thread's cudaStreamPerThread, a
     * released stream whose final fence failed): a device synchronize settles them all, unless
     * a capture may be under way (rule 25: it would fail and invalidate the capture). */
    if (unsettled && pool->dev->cfg.capture_check == SP_CAPTURE_DECLARED &&
        atomic_load_explicit(&pool->dev->captures, memory_order_acquire) == 0)
        settle_by_device_sync(pool, err);
}

/* The cudaMemPools a raised limit replaced keep nothing but the pool's segments still from them
 * (threshold 0): what the pool gave back of those goes to the device at once. */
static void trim_retired(sp_pool *pool)
{
    for (struct sp_retired_cuda_pool *r =
             atomic_load_explicit(&pool->retired_cuda_pools, memory_order_acquire);
         r; r = r->next)
        (void)sp__cuda_pool_trim(r->pool, 0);
}

int sp__pool_cuda_usage(sp_pool *pool, uint64_t *reserved, uint64_t *used)
{
    int rc = sp__cuda_pool_usage(pool->cuda_pool, reserved, used);
    for (struct sp_retired_cuda_pool *r =
             atomic_load_explicit(&pool->retired_cuda_pools, memory_order_acquire);
         r && rc == SP_OK; r = r->next) {
        uint64_t rr = 0, ru = 0;
        rc = sp__cuda_pool_usage(r->pool, &rr, &ru);
        *reserved += rr;
        *used += ru;
    }
    return rc;
}

/* sp__pool_give_back, also giving back on `stream`, whose cache is `me` (not NULL), what it
 * freed and what is settled: cudaFreeAsync there is ordered after the frees' work (rule 3),
 * so pending work does not keep that memory held. */
static uint64_t give_back_on(sp_pool *pool, uint64_t keep, bool sync, sp_stream_cache *me,
                             cudaStream_t stream, int *err)
{
    uint64_t held_before =
        atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed);
    if (held_before <= keep && !sync)
        return 0;
    uint64_t reserved_before = 0, used = 0;
    if (sync && sp__pool_cuda_usage(pool, &reserved_before, &used) != SP_OK)
        reserved_before = 0;
    sp__small_flush_bins(pool);
    sp__park_flush_all(pool);
    if (sync) /* a capturing stream is skipped (sp__cache_may_touch), the others settle */
        settle_all(pool, err);
    uint64_t held = held_before;
    for (sp_heap *h = &pool->segments;; h = &pool->slabs) {
        if (held > keep)
            held -= sp__heap_release(h, held - keep, true, me, stream, NULL, err);
        if (h == &pool->slabs)
            break;
    }
    if (sync) {
        int rc = sp__cuda_stream_sync(pool->dev->service);
        if (err && *err == SP_OK)
            *err = rc;
        uint64_t floor = held > keep ? held : keep;
        if (floor < pool->cfg.reserve)
            floor = pool->cfg.reserve;
        rc = sp__cuda_pool_trim(pool->cuda_pool, floor);
        if (err && *err == SP_OK)
            *err = rc;
        trim_retired(pool);
    }
    held = atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed);
    uint64_t released = held_before > held ? held_before - held : 0;
    /* the trim also releases pages the cudaMemPool kept from segments given back before */
    uint64_t reserved = 0;
    if (reserved_before && sp__pool_cuda_usage(pool, &reserved, &used) == SP_OK &&
        reserved_before > reserved && reserved_before - reserved > released)
        released = reserved_before - reserved;
    return released;
}

uint64_t sp__pool_give_back(sp_pool *pool, uint64_t keep, bool sync, int *err)
{
    return give_back_on(pool, keep, sync, NULL, NULL, err);
}

static uint64_t cached_now(sp_pool *pool)
{
    uint64_t held = sp__usage_current(&pool->fig.usage.held.current);
    uint64_t active = sp__usage_current(&pool->fig.usage.active.current);
    return held > active ? held - active : 0;
}

void sp__pool_enforce_cache_limit(sp_pool *pool, uint64_t cache_limit, sp_stream_cache *me,
                                  cudaStream_t stream)
{
    uint64_t cached = cached_now(pool);
    if (cached <= cache_limit)
        return;
    /* not on every free: a pass that could not get under the limit (frees still pending) is
     * retried once the cache grew by a slab, or after a miss */
    uint64_t stuck = atomic_load_explicit(&pool->limit_stuck, memory_order_relaxed);
    if (stuck && cached < stuck + SP_SLAB_BYTES)
        return;
    if (atomic_flag_test_and_set_explicit(&pool->limit_busy, memory_order_acquire))
        return; /* another thread is at it */
    /* the streams' unflushed hits are live bytes the figures above do not show yet (up to
     * stats_flush_bytes a stream): judged without them, a cache at its limit looks over it and
     * settled memory goes back for nothing. Flushed here, past the cheap checks only. */
    (void)sp__pool_active_bytes(pool);
    if (cached_now(pool) <= cache_limit) {
        atomic_store_explicit(&pool->limit_stuck, 0, memory_order_relaxed);
        atomic_flag_clear_explicit(&pool->limit_busy, memory_order_release);
        return;
    }
    uint64_t active = sp__usage_current(&pool->fig.usage.active.current);
    /* what the freeing stream freed goes back on it even with its work still queued */
    uint64_t released = give_back_on(pool, active + cache_limit, false, me, stream, NULL);
    if (released) {
        count(pool, SP_COUNT_cache_limit_releases);
        sp__usage_count(&pool->fig, SP_COUNT_cache_released_bytes, released);
        /* rule 13: the cudaMemPool releases only frees the host has seen complete */
        if (sp__cuda_stream_sync(pool->dev->service) == SP_OK) {
            uint64_t held =
                atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed);
            (void)sp__cuda_pool_trim(pool->cuda_pool, held > pool->cfg.reserve ? held
                                                                               : pool->cfg.reserve);
            trim_retired(pool);
        } else {
            count(pool, SP_COUNT_skipped_steps);
        }
    }
    cached = cached_now(pool);
    atomic_store_explicit(&pool->limit_stuck, cached > cache_limit ? cached : 0,
                          memory_order_relaxed);
    atomic_flag_clear_explicit(&pool->limit_busy, memory_order_release);
}

/* Gives back every byte the pool holds, first settling what was freed on every stream: a trim
 * to nothing. Returns SP_OK once no slab or segment is left, else the first error (a segment
 * the driver refused back, or one whose frees could not be settled, stays the pool's). */
static int give_back_everything(sp_pool *pool)
{
    int err = SP_OK;
    /* blocks kept aside by a capture that was never declared over */
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool)
            sp__capture_release_aside(c);
    sp__small_flush_bins(pool);
    sp__park_flush_all(pool);
    settle_all(pool, &err);
    bool unsettled = false;
    for (sp_heap *h = &pool->segments;; h = &pool->slabs) {
        (void)sp__heap_release(h, UINT64_MAX, true, NULL, NULL, NULL, &err);
        unsettled |= h->segments != NULL;
        if (h == &pool->slabs)
            break;
    }
    if (unsettled) {
        /* frees we could not order one by one (another thread's per-thread stream, a failed
         * fence): the whole device is idle after a synchronize */
        settle_by_device_sync(pool, &err);
        for (sp_heap *h = &pool->segments;; h = &pool->slabs) {
            (void)sp__heap_release(h, UINT64_MAX, true, NULL, NULL, NULL, &err);
            if (h == &pool->slabs)
                break;
        }
    }
    int rrc = give_back_refused_frees(pool);
    if (err == SP_OK)
        err = rrc;
    /* what went back on the service stream: a failed synchronize loses nothing (a destroyed
     * cudaMemPool releases its memory once its frees are done, rule 7) */
    int rc = sp__cuda_stream_sync(pool->dev->service);
    if (err == SP_OK)
        err = rc;
    if (!pool->segments.segments && !pool->slabs.segments && !pool->refused_frees)
        return SP_OK;
    return err != SP_OK ? err : SP_ERR_CUDA;
}

int sp__pool_free(sp_pool *pool)
{
    /* Nothing is forgotten before the driver has taken everything back: a segment left, or a
     * cudaMemPoolDestroy the driver refuses, leaves the pool as it was, less what went back
     * (its cache), for the caller to destroy again. Forgotten, a segment or a cudaMemPool that
     * keeps its release threshold would stay reserved for the life of the process. */
    int rc = give_back_everything(pool);
    /* the cudaMemPools a raised limit replaced, first: a refusal leaves the current one as it
     * was, and those already destroyed leave the list */
    while (rc == SP_OK && atomic_load_explicit(&pool->retired_cuda_pools, memory_order_relaxed)) {
        struct sp_retired_cuda_pool *r = pool->retired_cuda_pools;
        (void)sp__cuda_pool_trim(r->pool, 0);
        if ((rc = sp__cuda_pool_destroy(r->pool)) == SP_OK) {
            pool->retired_cuda_pools = r->next;
            free(r);
        }
    }
    if (rc == SP_OK && pool->owns_cuda_pool) {
        /* the pages the cudaMemPool keeps under its release threshold go back first, so that
         * a refused destroy leaves it its reservation only (a trim failing loses nothing: the
         * destroy releases them too) */
        (void)sp__cuda_pool_trim(pool->cuda_pool, pool->cfg.reserve);
        rc = sp__cuda_pool_destroy(pool->cuda_pool); /* rule 7: returns at once */
    }
    /* a context lost to a device fault took the memory with it: nothing a later destroy could
     * give back, and every call would fail alike, so the pool goes (sp_last_cuda_error tells) */
    if (rc != SP_OK && !sp__cuda_context_lost())
        return rc;
    for (sp_block *b = pool->refused_frees, *next; b; b = next) {
        next = b->next; /* a lost context took their memory */
        free(b);
    }
    for (struct sp_retired_cuda_pool *r = pool->retired_cuda_pools, *next; r; r = next) {
        next = r->next; /* a lost context: nothing left to destroy them with */
        free(r);
    }
    sp__req_free_all(pool->requests); /* open ones without live allocations (live ones make it busy) */
    sp__share_free(pool); /* its exports' tables (a held block is live: it made the pool busy) */
    sp__heap_destroy(&pool->slabs);
    sp__heap_destroy(&pool->segments);
    sp__fence_drop_all(pool);
    sp__cache_table_free(pool);
    sp_mutex_destroy(&pool->lock);
    free(pool);
    return SP_OK;
}

int sp__pool_release_stream(sp_pool *pool, sp_stream_key key)
{
    /* The cache leaves the pool's list and its figures move to the pool's in one step under
     * pool->lock, which a stats read holds while it walks the list and reads the moved
     * figures: a read finds them in one place or the other, never in neither. */
    sp_mutex_lock(&pool->lock);
    sp_stream_cache *c = sp__cache_detach_locked(pool, key);
    if (!c) {
        sp_mutex_unlock(&pool->lock);
        return SP_OK;
    }
    sp_spin_lock(&c->lock);
    c->released = true;
    sp__cache_flush_locked(pool, c);
    sp_block *list = sp__small_take_all(c);
    sp_block *parked = sp__park_take_all_locked(c, NULL);
    /* what is left is a tombstone: its counters move to the pool, its bins go (a thread
     * still holding it sees `released` under the lock before touching either) */
    atomic_fetch_add_explicit(&pool->retired_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_hits, c->hits, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_frees, c->frees, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_freed_bytes, c->freed_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_requested_total, c->requested_total,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_active_total, c->active_total, memory_order_relaxed);
    c->hits = c->frees = c->freed_bytes = c->requested_total = c->active_total = 0;
    sp_bin *bins = c->bins;
    c->bins = NULL;
    sp_spin_unlock(&c->lock);
    sp_mutex_unlock(&pool->lock);
    free(bins);
    sp__capture_release_aside(c);
    /* the released stream is named one last time: a fence covering all its frees (or, failing
     * that, a synchronize); its blocks and ranges keep their tags behind it */
    int rc = sp__fence_final(c);
    sp__small_to_slabs(pool, c, list);
    sp__park_put(pool, parked);
    return rc;
}

/* ---- settings and trim ---- */

int sp_pool_set_release_threshold(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    sp_mutex_lock(&pool->lock);
    sp_pool_config cfg = pool->cfg;
    cfg.release_threshold = bytes;
    int rc = sp__cuda_pool_set_threshold(pool->cuda_pool, effective_threshold(&cfg));
    if (rc == SP_OK)
        pool->cfg.release_threshold = bytes;
    sp_mutex_unlock(&pool->lock);
    return rc;
}

/* A cudaMemPool's maxSize is fixed at its creation. A limit raised past the cap of the pool's
 * cudaMemPool moves the pool to a new one, capped at the new limit (0: none), its reservation
 * taken there first (the device gives it twice for a moment, so that no other pool can take it
 * meanwhile); the old one keeps only the segments the pool still has from it (threshold 0,
 * trimmed) and goes at the pool's destroy. Their frees need no handle: cudaFreeAsync returns a
 * block to the cudaMemPool it came from. pool->lock held. */
static int move_cuda_pool(sp_pool *pool, uint64_t cap, const sp_pool_config *cfg)
{
    sp_mutex_assert_owner(&pool->lock);
    struct sp_retired_cuda_pool *r = malloc(sizeof *r);
    if (!r)
        return SP_ERR_NO_HOST_MEMORY;
    cudaMemPool_t fresh = NULL;
    void *held = NULL;
    int rc = sp__cuda_pool_create(pool->dev->device, cap, &fresh);
    if (rc == SP_OK)
        rc = sp__cuda_pool_set_threshold(fresh, effective_threshold(cfg));
    if (rc == SP_OK && cfg->reserve && (rc = take_reservation_in(pool, fresh, &held)) != SP_OK)
        (void)sp__config_errorf(rc,
                         "pool '%s': its limit cannot be raised past %llu bytes: its reserve of "
                         "%llu bytes could not be taken again in a cudaMemPool with the new cap: %s",
                         pool->name, (unsigned long long)pool->cuda_cap,
                         (unsigned long long)cfg->reserve, sp_strerror(rc));
    if (rc != SP_OK) {
        if (fresh)
            discard_cuda_pool_of(pool, fresh, true, held);
        free(r);
        return rc;
    }
    cudaMemPool_t old = pool->cuda_pool;
    r->pool = old;
    r->next = pool->retired_cuda_pools;
    atomic_store_explicit(&pool->retired_cuda_pools, r, memory_order_release);
    pool->cuda_pool = fresh; /* new driver allocations go there from now on */
    pool->cuda_cap = cap;
    /* its reservation is the new one's now: the old one releases every page not in use */
    (void)sp__cuda_pool_set_threshold(old, 0);
    (void)sp__cuda_pool_trim(old, 0);
    return SP_OK;
}

int sp_pool_set_limit(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    /* the limit in force, as a pool created with it would have: clamped to the device (with a
     * warning), in whole pages (config.c, under rt->lock, which ranks before pool->lock) */
    sp_mutex_lock(&pool->rt->lock);
    int rc = bytes ? sp__config_limit_in_force(pool->dev, pool->name, &bytes) : SP_OK;
    sp_mutex_unlock(&pool->rt->lock);
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock(&pool->lock);
    sp_pool_config cfg = pool->cfg;
    cfg.limit = bytes;
    uint64_t limit = limit_in_pages(&cfg);
    rc = check_limit(pool->name, &cfg);
    bool past_cap = pool->owns_cuda_pool && pool->cuda_cap && (!limit || limit > pool->cuda_cap);
    if (rc == SP_OK && past_cap && cfg.share == SP_SHARE_POSIX_FD)
        /* another process imported this cudaMemPool by its handle: a new one would not be it */
        rc = sp__config_errorf(SP_ERR_NOT_SUPPORTED,
                        "pool '%s': a shareable pool's limit cannot be raised past %llu bytes, "
                        "the cap its exported cudaMemPool was created with",
                        pool->name, (unsigned long long)pool->cuda_cap);
    /* past the cap of its cudaMemPool (a pool made with a limit), a new one */
    else if (rc == SP_OK && past_cap)
        rc = move_cuda_pool(pool, limit, &cfg);
    if (rc == SP_OK)
        rc = sp__cuda_pool_set_threshold(pool->cuda_pool, effective_threshold(&cfg));
    if (rc != SP_OK) {
        sp_mutex_unlock(&pool->lock);
        return rc;
    }
    uint64_t old_limit = pool->limit_bytes;
    pool->cfg.limit = limit; /* what every report shows: the limit in force */
    /* from here every claim is judged by the new limit; one that read the old limit may still
     * complete, so held stays within the highest limit in force */
    pool->limit_bytes = limit;
    sp_mutex_unlock(&pool->lock);
    if (limit && (!old_limit || limit < old_limit)) {
        /* lowered: the cache above the new limit goes back now, its frees settled as a trim
         * settles them; live blocks stay, and what they hold over the limit only refuses new
         * driver allocations (held_claim) until frees bring the pool under it */
        int err = SP_OK;
        (void)sp__pool_give_back(pool, limit, true, &err);
        rc = err;
    }
    return rc;
}

int sp_pool_set_cache_limit(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    sp_mutex_lock(&pool->lock);
    pool->cfg.cache_limit = bytes;
    atomic_store_explicit(&pool->cache_limit, bytes, memory_order_relaxed);
    sp_mutex_unlock(&pool->lock);
    atomic_store_explicit(&pool->limit_stuck, 0, memory_order_relaxed);
    if (bytes != UINT64_MAX) {
        (void)sp__pool_active_bytes(pool); /* flush every cache: the figures must be current */
        sp__pool_enforce_cache_limit(pool, bytes, NULL, NULL);
    }
    return SP_OK;
}

int sp_pool_get_config(const sp_pool *pool, sp_pool_config *out)
{
    if (!pool)
        return SP_ERR_INVALID;
    int rc = sp__struct_check(out, SP__MIN_POOL_CONFIG, "sp_pool_get_config", "sp_pool_config");
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock((sp_mutex *)&pool->lock);
    sp__struct_write(out, &pool->cfg, sizeof pool->cfg);
    sp_mutex_unlock((sp_mutex *)&pool->lock);
    return SP_OK;
}

int sp_pool_trim(sp_pool *pool, size_t keep_bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    count(pool, SP_COUNT_trims);
    int err = SP_OK;
    sp__usage_count(&pool->fig, SP_COUNT_trimmed_bytes, sp__pool_give_back(pool, keep_bytes, true, &err));
    sp__trace_trim(pool);
    return err;
}

/* ---- admission ---- */

int sp__pool_admit(sp_pool *pool, uint64_t expected, uint64_t *claim)
{
    uint64_t limit = pool->limit_bytes;
    /* as sp_alloc judges a request that the limit can never hold: at 512-byte rounding */
    if (limit && sp__round_up(expected, SP_LARGE_ALIGN) > limit) {
        count(pool, SP_COUNT_admission_refusals);
        return SP_ERR_NEVER_FITS;
    }
    uint64_t fresh =
        sp__fresh_size(expected <= SP_SMALL_MAX, sp__round_up(expected, SP_LARGE_ALIGN));
    if (limit && fresh > limit)
        fresh = limit; /* near the limit a fresh allocation takes only what it needs */
    uint64_t cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    /* Judged from exact figures: the streams' caches keep their live-byte deltas back (up to
     * stats_flush_bytes each) for speed, and a free still unflushed there makes its bytes look
     * live, not cached: a request that only the pool's cache keeps out would be refused
     * forever. Flushed here, only when the limit has no room without the cache. */
    if (limit && cur > limit - fresh)
        (void)sp__pool_active_bytes(pool);
    if (limit && cur > limit - fresh && cur + fresh - limit <= cached_now(pool)) {
        /* the pool's own cache makes the room: it goes back first, its streams' frees settled
         * as a trim settles them (the pool's driver calls, none of the request's). Where even
         * all of it would not, the refusal below comes from the figures alone, with no CUDA
         * call */
        uint64_t held = sp__usage_current(&pool->fig.usage.held.current);
        uint64_t need = cur + fresh - limit;
        (void)sp__pool_give_back(pool, held > need ? held - need : 0, true, NULL);
        cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    }
    do {
        if (limit && cur > limit - fresh) {
            count(pool, SP_COUNT_admission_refusals);
            return SP_ERR_LIMIT;
        }
    } while (!atomic_compare_exchange_weak_explicit(&pool->fig.limit_used, &cur, cur + fresh,
                                                    memory_order_relaxed, memory_order_relaxed));
    count(pool, SP_COUNT_admissions);
    sp__usage_count(&pool->fig, SP_COUNT_admitted_bytes, fresh);
    *claim = fresh;
    return SP_OK;
}

void sp__pool_admit_release(sp_pool *pool, uint64_t claim)
{
    if (claim)
        (void)sp__usage_current_add(&pool->fig.limit_used, -(int64_t)claim);
}

bool sp__pool_tag_given(uint64_t tag)
{
    /* pool ids are given in order from 1: a tag past the last one given names no pool (tags
     * keep the low bits of the id, so after 2^24 pools every tag has been given) */
    uint64_t next = atomic_load_explicit(&next_pool_id, memory_order_relaxed);
    uint64_t mask = (1ull << (64 - SP_REQ_SEQ_BITS)) - 1;
    return tag >= 1 && (next > mask || tag < next);
}

bool sp__pool_reported(sp_pool *pool)
{
    /* The default pool exists from sp_runtime_create on, whether or not the program ever uses
     * it: until it has held memory or counted a call, showing it would only say "one more pool"
     * than the program made. */
    if (!pool->is_default || atomic_load(&pool->fig.usage.held.total) != 0 ||
        atomic_load(&pool->miss_allocs) != 0)
        return true;
    for (int i = 0; i < SP_COUNT_N; i++)
        if (atomic_load(&pool->fig.count[i]) != 0)
            return true;
    return false;
}
