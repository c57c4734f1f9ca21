/* Small requests: the per-stream bins of freed blocks (their size classes are classes.c's),
 * taking another stream's blocks behind a fence, and returning blocks to the slabs they were
 * carved from. */
#include "heap.h"
#include "small.h"
#include "usage.h"
#include "pool.h"

/* ---- bins: doubly linked, newest at the head (same-stream reuse takes the warmest block, a
 * steal from another stream the oldest, whose fence is likeliest complete) ---- */

void sp__small_bin_push(sp_bin *bin, sp_block *b)
{
    SP_LIST_PUSH_TAIL(bin->head, bin->tail, b, prev, next);
}

void sp__small_bin_remove(sp_bin *bin, sp_block *b)
{
    SP_LIST_UNLINK_TAIL(bin->head, bin->tail, b, prev, next);
    b->prev = b->next = NULL;
}

sp_block *sp__small_bin_pop_newest(sp_bin *bin)
{
    sp_block *b = bin->head;
    if (b)
        sp__small_bin_remove(bin, b);
    return b;
}

/* ---- taking another stream's blocks ---- */

/* Takes a block of class `cls` (or up to SP_FIT_CLASSES larger) that another stream cached in
 * its bins, settled by what is known, by asking (mode SETTLED) or by a wait (mode WAIT). The
 * driver is asked with no spin lock held; then any block no newer than the settled epoch
 * qualifies, since settlement only moves forward. */
static sp_block *steal_from(sp_pool *pool, sp_stream_cache *v, uint32_t cls, cudaStream_t stream,
                            sp_take_mode mode, sp_ask_budget *ab)
{
    uint64_t oldest = UINT64_MAX;
    sp_spin_lock(&v->lock);
    for (uint32_t k = cls; k <= cls + SP_FIT_CLASSES; k++)
        if (v->bins[k].tail && v->bins[k].tail->epoch < oldest)
            oldest = v->bins[k].tail->epoch;
    sp_spin_unlock(&v->lock);
    if (oldest == UINT64_MAX)
        return NULL;
    bool ok = mode == SP_TAKE_KNOWN ? sp__fence_tag_settled(v, oldest, false)
                                    : sp__fence_tag_settled_within(ab, v, oldest);
    int counter = SP_COUNT_cross_stream_reuses;
    if (!ok && mode == SP_TAKE_WAIT && sp__fence_tag_wait(v, oldest, stream) == SP_OK) {
        ok = true;
        counter = SP_COUNT_cross_stream_waits;
    }
    if (!ok)
        return NULL;
    sp_block *b = NULL;
    sp_spin_lock(&v->lock);
    for (uint32_t k = cls; !b && k <= cls + SP_FIT_CLASSES; k++)
        if (v->bins[k].tail && v->bins[k].tail->epoch <= oldest) {
            b = v->bins[k].tail;
            sp__small_bin_remove(&v->bins[k], b);
            v->cached_bytes -= b->size;
        }
    sp_spin_unlock(&v->lock);
    if (b) {
        sp__usage_count(&pool->fig, counter, 1);
        ab->took = counter == SP_COUNT_cross_stream_waits ? SP_TOOK_WAIT : SP_TOOK_REUSE;
    }
    return b;
}

/* A block another stream cached, from at most SP_STEAL_PROBES caches: first what is known
 * settled (no CUDA call), then as `mode` allows. */
sp_block *sp__small_steal(sp_pool *pool, sp_stream_cache *me, uint32_t cls, cudaStream_t stream,
                          sp_take_mode mode, sp_ask_budget *ab)
{
    sp_block *b = NULL;
    for (sp_take_mode pass = SP_TAKE_KNOWN; !b && pass <= mode; pass++) {
        int probes = 0;
        sp_mutex_lock(&pool->lock);
        for (sp_stream_cache *v = pool->caches; v && !b && probes < SP_STEAL_PROBES;
             v = v->next_in_pool)
            if (v != me && (probes++, true))
                b = steal_from(pool, v, cls, stream, pass, ab);
        sp_mutex_unlock(&pool->lock);
    }
    return b;
}

/* ---- back to the slabs ---- */

/* Empties a cache's bins into a list (c->lock held). */
sp_block *sp__small_take_all(sp_stream_cache *c)
{
    sp_spin_assert_owner(&c->lock);
    sp_block *list = NULL;
    for (uint32_t cls = 0; cls < SP_CLASS_COUNT; cls++) {
        sp_block *b;
        while ((b = sp__small_bin_pop_newest(&c->bins[cls]))) {
            b->next = list;
            list = b;
        }
    }
    c->cached_bytes = 0;
    return list;
}

/* Returns small blocks to their slabs, each tagged with its free on c's stream. */
void sp__small_to_slabs(sp_pool *pool, sp_stream_cache *c, sp_block *list)
{
    if (!list)
        return;
    sp_mutex_lock(&pool->slabs.lock);
    for (sp_block *b = list, *next; b; b = next) {
        next = b->next;
        sp__heap_put(&pool->slabs, b, c, b->epoch);
    }
    sp_mutex_unlock(&pool->slabs.lock);
}

static void cache_to_slabs(sp_pool *pool, sp_stream_cache *c)
{
    sp_spin_lock(&c->lock);
    sp_block *list = sp__small_take_all(c);
    sp_spin_unlock(&c->lock);
    sp__small_to_slabs(pool, c, list);
}

void sp__small_flush_bins(sp_pool *pool)
{
    sp_mutex_lock(&pool->lock);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        cache_to_slabs(pool, c);
    sp_mutex_unlock(&pool->lock);
}
