/* Giving cached memory back to the driver: settling what was freed, the give-back to a number
 * of bytes (limit, trim, out of memory), the cache limit, everything at the destroy, and the
 * cudaMemPools' own figures and trims. */
#include <stdlib.h>

#include "give_back.h"
#include "park.h"
#include "capture.h"
#include "small.h"
#include "cache.h"
#include "cuda.h"
#include "device.h"
#include "status.h"

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
        sp__usage_count(&pool->fig, SP_COUNT_skipped_steps, 1);
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
                sp__usage_count(&pool->fig, SP_COUNT_skipped_steps, 1);
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

int sp__give_back_cuda_usage(sp_pool *pool, uint64_t *reserved, uint64_t *used)
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

/* sp__give_back, also giving back on `stream`, whose cache is `me` (not NULL), what it
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
    if (sync && sp__give_back_cuda_usage(pool, &reserved_before, &used) != SP_OK)
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
    if (reserved_before && sp__give_back_cuda_usage(pool, &reserved, &used) == SP_OK &&
        reserved_before > reserved && reserved_before - reserved > released)
        released = reserved_before - reserved;
    return released;
}

uint64_t sp__give_back(sp_pool *pool, uint64_t keep, bool sync, int *err)
{
    return give_back_on(pool, keep, sync, NULL, NULL, err);
}

uint64_t sp__give_back_cached(sp_pool *pool)
{
    uint64_t held = sp__usage_current(&pool->fig.usage.held.current);
    uint64_t active = sp__usage_current(&pool->fig.usage.active.current);
    return held > active ? held - active : 0;
}

void sp__give_back_to_cache_limit(sp_pool *pool, uint64_t cache_limit, sp_stream_cache *me,
                                  cudaStream_t stream)
{
    uint64_t cached = sp__give_back_cached(pool);
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
    (void)sp__cache_active_bytes(pool);
    if (sp__give_back_cached(pool) <= cache_limit) {
        atomic_store_explicit(&pool->limit_stuck, 0, memory_order_relaxed);
        atomic_flag_clear_explicit(&pool->limit_busy, memory_order_release);
        return;
    }
    uint64_t active = sp__usage_current(&pool->fig.usage.active.current);
    /* what the freeing stream freed goes back on it even with its work still queued */
    uint64_t released = give_back_on(pool, active + cache_limit, false, me, stream, NULL);
    if (released) {
        sp__usage_count(&pool->fig, SP_COUNT_cache_limit_releases, 1);
        sp__usage_count(&pool->fig, SP_COUNT_cache_released_bytes, released);
        /* rule 13: the cudaMemPool releases only frees the host has seen complete */
        if (sp__cuda_stream_sync(pool->dev->service) == SP_OK) {
            uint64_t held =
                atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed);
            (void)sp__cuda_pool_trim(pool->cuda_pool, held > pool->cfg.reserve ? held
                                                                               : pool->cfg.reserve);
            trim_retired(pool);
        } else {
            sp__usage_count(&pool->fig, SP_COUNT_skipped_steps, 1);
        }
    }
    cached = sp__give_back_cached(pool);
    atomic_store_explicit(&pool->limit_stuck, cached > cache_limit ? cached : 0,
                          memory_order_relaxed);
    atomic_flag_clear_explicit(&pool->limit_busy, memory_order_release);
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
            sp__usage_count(&pool->fig, rc == SP_OK ? SP_COUNT_driver_frees : SP_COUNT_give_back_failures, 1);
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

/* Gives back every byte the pool holds, first settling what was freed on every stream: a trim
 * to nothing. Returns SP_OK once no slab or segment is left, else the first error (a segment
 * the driver refused back, or one whose frees could not be settled, stays the pool's). */
int sp__give_back_everything(sp_pool *pool)
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
