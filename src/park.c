/* A stream's park: its most recently freed large ranges, kept in its own cache outside the
 * segment heap (under the cache's spin lock), so that the stream's next large pair of the
 * same size skips the shared heap; flushed into the heap on a miss, a stats read, a release
 * and a destroy. */
#include "park.h"
#include "pool.h"

/* A parked range stays as sp_free left it: not free in the heap (its segment's `used` still
 * counts it, so the segment cannot go back), tagged with the freeing stream and its epoch, so
 * that putting it into the heap later is exactly the put its free would have made. */

sp_block *sp__park_take_locked(sp_stream_cache *c, size_t size)
{
    sp_spin_assert_owner(&c->lock);
    unsigned n = atomic_load_explicit(&c->park_count, memory_order_relaxed);
    /* whole ranges, no split, and only as tight as best fit could be: a medium piece of the
     * exact size, a huge segment no larger than a fresh one would be (whole driver pages). The
     * heap's looser SP_HUGE_SLACK fit chooses among every usable segment; the park sees only a
     * few, and could hand a request one that a later, larger request needs. */
    bool huge = size > SP_MEDIUM_MAX;
    size_t most = huge ? sp__round_up(size, SP_DRIVER_GRANULARITY) : size;
    unsigned best = n;
    for (unsigned i = 0; i < n; i++) {
        sp_block *b = c->park[i];
        if (b->size >= size && b->size <= most && b->seg->huge == huge &&
            (best == n || b->size < c->park[best]->size))
            best = i;
    }
    if (best == n)
        return NULL;
    sp_block *b = c->park[best];
    for (unsigned i = best + 1; i < n; i++)
        c->park[i - 1] = c->park[i];
    c->park[n - 1] = NULL;
    atomic_store_explicit(&c->park_count, n - 1, memory_order_relaxed);
    return b;
}

sp_block *sp__park_push_locked(sp_stream_cache *c, sp_block *b)
{
    sp_spin_assert_owner(&c->lock);
    unsigned n = atomic_load_explicit(&c->park_count, memory_order_relaxed);
    sp_block *out = NULL;
    if (n == SP_PARK_SLOTS)
        out = c->park[--n];
    for (unsigned i = n; i > 0; i--)
        c->park[i] = c->park[i - 1];
    b->tag = c;
    b->cls = SP_CLASS_COUNT;
    b->next = NULL;
    c->park[0] = b;
    atomic_store_explicit(&c->park_count, n + 1, memory_order_relaxed);
    return out;
}

sp_block *sp__park_take_all_locked(sp_stream_cache *c, sp_block *list)
{
    sp_spin_assert_owner(&c->lock);
    unsigned n = atomic_load_explicit(&c->park_count, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++) { /* the oldest ends up first, to go in as the frees came */
        sp_block *b = c->park[i];
        c->park[i] = NULL;
        b->next = list;
        list = b;
    }
    atomic_store_explicit(&c->park_count, 0, memory_order_relaxed);
    return list;
}

void sp__park_put_locked(sp_heap *h, sp_block *list)
{
    sp_mutex_assert_owner(&h->lock);
    for (sp_block *b = list, *next; b; b = next) {
        next = b->next;
        sp__heap_put(h, b, b->tag, b->epoch);
    }
}

void sp__park_put(sp_pool *pool, sp_block *list)
{
    if (!list)
        return;
    sp_mutex_lock(&pool->segments.lock);
    sp__park_put_locked(&pool->segments, list);
    sp_mutex_unlock(&pool->segments.lock);
}

void sp__park_flush(sp_pool *pool, sp_stream_cache *c)
{
    if (!atomic_load_explicit(&c->park_count, memory_order_relaxed))
        return;
    sp_spin_lock(&c->lock);
    sp_block *list = sp__park_take_all_locked(c, NULL);
    sp_spin_unlock(&c->lock);
    sp__park_put(pool, list);
}

void sp__park_flush_all(sp_pool *pool)
{
    sp_block *list = NULL;
    sp_mutex_lock(&pool->lock);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool) {
        /* an empty park is skipped without its lock: a range parked by a free that this thread
         * has not seen yet is one that raced with this flush anyway */
        if (!atomic_load_explicit(&c->park_count, memory_order_relaxed))
            continue;
        sp_spin_lock(&c->lock);
        list = sp__park_take_all_locked(c, list);
        sp_spin_unlock(&c->lock);
    }
    /* into the heap before pool->lock goes (POOL ranks before HEAP): a miss on the parking
     * stream flushes here first, so it waits for these ranges instead of finding them in
     * neither the park nor the heap, growing on a full device and failing (a reservation
     * refused under a flood, issue 27 item 2) */
    sp__park_put(pool, list);
    sp_mutex_unlock(&pool->lock);
}
