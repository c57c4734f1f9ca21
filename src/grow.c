/* Taking memory from the driver: a fresh slab or segment for a miss, under the pool's limit,
 * and a graph capture's bypass allocations, which never enter the cache (rule 24). */
#include <stdlib.h>

#include "grow.h"
#include "cache.h"
#include "cuda.h"
#include "fence.h"
#include "limit.h"
#include "ptrmap.h"
#include "runtime.h"
#include "status.h"

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

int sp__grow(sp_pool *pool, sp_heap *h, size_t size, size_t requested, sp_stream_cache *me,
                  cudaStream_t stream, struct sp_req *req, sp_block **out)
{
    size_t bytes = grow_size(pool, h, size);
    sp_limit_claim k = {.req = req};
    if (!sp__limit_claim(pool, bytes, &k))
        return SP_ERR_LIMIT;
    sp_segment *s = sp__heap_segment_new(); /* before the driver is asked: see below */
    if (!s) {
        sp__limit_unclaim(pool, bytes, &k);
        return SP_ERR_NO_HOST_MEMORY;
    }
    void *ptr;
    int rc = sp__cuda_malloc(pool->cuda_pool, &ptr, bytes, stream);
    if (rc != SP_OK) {
        sp__heap_segment_discard(s);
        sp__limit_unclaim(pool, bytes, &k);
        return rc == SP_ERR_OUT_OF_MEMORY ? cap_or_device(pool, bytes) : rc;
    }
    sp__usage_count(&pool->fig, SP_COUNT_driver_allocs, 1);
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
            sp__usage_count(&pool->fig, SP_COUNT_driver_frees, 1); /* as its driver_allocs was */
            sp__heap_segment_discard(s);
            sp__limit_unclaim(pool, bytes, &k);
        } else {
            sp__usage_count(&pool->fig, SP_COUNT_give_back_failures, 1);
            sp_mutex_lock(&h->lock);
            sp__heap_keep_unmapped(h, s, ptr, bytes, huge, me, epoch);
            sp__usage_commit(&pool->fig, 0, 0, (int64_t)bytes);
            sp_mutex_unlock(&h->lock);
        }
        return rc;
    }
    return *out ? SP_OK : SP_ERR_NO_HOST_MEMORY;
}

int sp__grow_bypass(sp_pool *pool, size_t bytes, cudaStream_t stream, struct sp_req *req,
                          sp_block **out)
{
    size_t size = sp__round_up(bytes, SP_BYPASS_ALIGN);
    sp_limit_claim k = {.req = req};
    if (!sp__limit_claim(pool, size, &k))
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
        sp__limit_unclaim(pool, size, &k);
        return rc;
    }
    b->requested = bytes;
    sp__usage_commit(&pool->fig, (int64_t)bytes, (int64_t)size, (int64_t)size);
    sp__usage_count(&pool->fig, SP_COUNT_driver_allocs, 1);
    *out = b;
    return SP_OK;
}

void sp__grow_bypass_free(sp_pool *pool, sp_block *b, cudaStream_t stream)
{
    /* asked again at once: inside a capture the free is the graph's free node, and only then
     * does each launch of the graph give the memory back itself */
    for (int tries = 0; tries < SP_CLEANUP_TRIES; tries++) {
        if (sp__cuda_free(b->ptr, stream) == SP_OK) {
            sp__usage_count(&pool->fig, SP_COUNT_driver_frees, 1);
            sp__usage_add(&pool->fig, 0, 0, -(int64_t)b->size);
            free(b);
            return;
        }
        sp__usage_count(&pool->fig, SP_COUNT_give_back_failures, 1);
    }
    /* refused for good: still counted as held, and kept (forgotten, it would stay reserved for
     * the life of the process: a launched graph's allocation lives until it is freed) */
    sp_mutex_lock(&pool->lock);
    b->next = pool->refused_frees;
    pool->refused_frees = b;
    sp_mutex_unlock(&pool->lock);
}
