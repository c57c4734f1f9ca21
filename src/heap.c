/* Segments and slabs: driver allocations that a pool carves into ranges. A heap keeps one tier
 * (small blocks from slabs, large ranges from segments): every segment's ranges in address
 * order, and its free ranges in size bins with a bitmap, for best fit. A free range carries the
 * tag of its free (fence.c); taking it splits off what is left over, giving it back merges it
 * with free neighbours whose tags allow (same stream, or both settled). Wholly free, settled
 * segments go back to the driver, largest first. */
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "usage.h"
#include "cuda.h"
#include "pool.h"
#include "ptrmap.h"
#include "device.h"

#define MIN_SPLIT ((size_t)256) /* CUDA's alignment: no range is smaller */

int sp__heap_init(sp_heap *h, sp_pool *pool, bool small)
{
    memset(h, 0, sizeof *h);
    h->pool = pool;
    h->small = small;
    return sp_mutex_init(&h->lock, SP_RANK_HEAP, "heap->lock") == 0 ? SP_OK : SP_ERR_NO_HOST_MEMORY;
}

void sp__heap_destroy(sp_heap *h)
{
    for (sp_segment *s = h->segments, *next; s; s = next) {
        next = s->next;
        for (sp_block *b = s->first, *bn; b; b = bn) {
            bn = b->addr_next;
            sp__ptrmap_remove(&h->pool->dev->ptrmap, b->ptr);
            free(b);
        }
        free(s);
    }
    h->segments = NULL;
    sp_mutex_destroy(&h->lock);
}

/* ---- the free index: bins by size with a bitmap of the non-empty ones ---- */

static void index_add(sp_heap *h, sp_block *b)
{
    uint32_t k = sp__class_floor(b->size);
    b->is_free = true;
    b->prev = NULL;
    b->next = h->bins[k].head;
    if (b->next)
        b->next->prev = b;
    h->bins[k].head = b;
    h->nonempty[k / 64] |= 1ull << (k % 64);
    h->free_bytes += b->size;
}

static void index_remove(sp_heap *h, sp_block *b)
{
    uint32_t k = sp__class_floor(b->size);
    if (b->prev)
        b->prev->next = b->next;
    else
        h->bins[k].head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    if (!h->bins[k].head)
        h->nonempty[k / 64] &= ~(1ull << (k % 64));
    b->prev = b->next = NULL;
    b->is_free = false;
    h->free_bytes -= b->size;
}

/* The first non-empty bin at or above k; SP_CLASS_COUNT if none. */
static uint32_t next_bin(const sp_heap *h, uint32_t k)
{
    for (uint32_t w = k / 64; w < SP_HEAP_WORDS; w++) {
        uint64_t bits = h->nonempty[w];
        if (w == k / 64)
            bits &= ~0ull << (k % 64);
        if (bits)
            return w * 64 + (uint32_t)__builtin_ctzll(bits);
    }
    return SP_CLASS_COUNT;
}

/* ---- tags ---- */

/* Settled by what is known: no tag, or its fence seen complete. Clears a settled tag. */
static bool known_settled(sp_block *b)
{
    if (b->tag && sp__fence_tag_settled(b->tag, b->epoch, false))
        b->tag = NULL;
    return b->tag == NULL;
}

static bool may_merge(sp_block *a, sp_block *b)
{
    if (a->tag == b->tag)
        return true;
    return known_settled(a) && known_settled(b);
}

/* Can `me` use the free range b now, with no wait? Same stream or settled: yes. Otherwise, unless
 * the mode is SP_TAKE_KNOWN, asks the driver (within the miss's budget); *asked then says the yes
 * came from asking: a cross-stream reuse if b is the range taken. */
static bool usable_now(sp_block *b, sp_stream_cache *me, sp_take_mode mode, sp_ask_budget *ab,
                       bool *asked)
{
    *asked = false;
    if (b->tag == me || known_settled(b))
        return true;
    if (mode == SP_TAKE_KNOWN || !sp__fence_tag_settled_within(ab, b->tag, b->epoch))
        return false;
    b->tag = NULL;
    *asked = true;
    return true;
}

/* ---- split and merge ---- */

/* Splits `size` bytes off the front of free range b (not in the index); the rest stays free
 * with b's tag. Without host memory for the rest, b stays whole. */
static void split(sp_heap *h, sp_block *b, size_t size)
{
    if (b->size - size < MIN_SPLIT)
        return;
    sp_block *rest = calloc(1, sizeof *rest);
    if (!rest)
        return;
    rest->ptr = (char *)b->ptr + size;
    rest->size = b->size - size;
    rest->cls = SP_CLASS_COUNT;
    atomic_init(&rest->state, SP_BLOCK_CACHED);
    rest->pool = b->pool;
    rest->tag = b->tag;
    rest->epoch = b->epoch;
    rest->freed_by = b->freed_by; /* freed by the same stream: another's taking it is a steal */
    rest->seg = b->seg;
    if (sp__ptrmap_insert(&h->pool->dev->ptrmap, rest) != SP_OK) {
        free(rest);
        return;
    }
    rest->addr_prev = b;
    rest->addr_next = b->addr_next;
    if (b->addr_next)
        b->addr_next->addr_prev = rest;
    b->addr_next = rest;
    b->size = size;
    index_add(h, rest);
}

/* `low` absorbs its free neighbour `high` (both out of the index). */
static void absorb(sp_heap *h, sp_block *low, sp_block *high)
{
    /* may_merge left both with the same tag (or both settled): the later free covers both */
    if (high->epoch > low->epoch)
        low->epoch = high->epoch;
    if (high->asked_in > low->asked_in) /* the latest coalesce, as the merged range is */
        low->asked_in = high->asked_in;
    low->size += high->size;
    low->addr_next = high->addr_next;
    if (high->addr_next)
        high->addr_next->addr_prev = low;
    sp__ptrmap_remove(&h->pool->dev->ptrmap, high->ptr);
    free(high);
}

static bool fits(const sp_block *b, size_t size, size_t most, bool huge)
{
    return b->size >= size && b->size <= most && b->seg->huge == huge && !b->seg->unmapped;
}

/* Best fit of at least `size` and at most `most` bytes: the smallest range of the first bin
 * that has one `me` may use now. Only under SP_TAKE_WAIT, and only if none may be used without
 * a wait, `stream` waits on a pending fence: that of the range taken alone. A wait on a range
 * that a smaller one then beat would serialize `stream` behind another stream's work for
 * nothing, and count as a wait (and an ask that settled it as a reuse) that never happened. */
static sp_block *take_fit(sp_heap *h, size_t size, size_t most, sp_stream_cache *me,
                          cudaStream_t stream, sp_take_mode mode, sp_ask_budget *ab)
{
    bool huge = size > SP_MEDIUM_MAX;
    uint32_t k = sp__class_floor(size);
    for (k = next_bin(h, k); k < SP_CLASS_COUNT && sp__class_size(k) <= most;
         k = next_bin(h, k + 1)) {
        sp_block *best = NULL, *pending = NULL;
        bool best_asked = false, waited = false;
        for (sp_block *b = h->bins[k].head; b; b = b->next) {
            bool asked;
            if (!fits(b, size, most, huge) || (best && b->size >= best->size))
                continue;
            if (usable_now(b, me, SP_TAKE_KNOWN, ab, &asked))
                best = b;
            else if (!pending || b->size < pending->size)
                pending = b;
        }
        /* the driver is asked (or the owner marked) about the one range that would serve the
         * miss best, never range after range down the bin */
        bool asked;
        if (mode != SP_TAKE_KNOWN && pending && (!best || pending->size < best->size) &&
            usable_now(pending, me, mode, ab, &asked)) {
            best = pending;
            best_asked = asked;
        }
        /* smallest first, by (size, place in the bin): a range whose wait fails (its stream
         * cannot be named, or the driver refused) hands on to the next */
        bool any_tried = false;
        size_t tried = 0, tried_at = 0;
        while (!best && mode == SP_TAKE_WAIT) {
            size_t at = 0, best_at = 0;
            for (sp_block *b = h->bins[k].head; b; b = b->next, at++)
                if (fits(b, size, most, huge) &&
                    (!any_tried || b->size > tried || (b->size == tried && at > tried_at)) &&
                    (!best || b->size < best->size)) {
                    best = b;
                    best_at = at;
                }
            if (!best)
                break;
            waited = sp__fence_tag_wait(best->tag, best->epoch, stream) == SP_OK;
            if (!waited) {
                any_tried = true;
                tried = best->size;
                tried_at = best_at;
                best = NULL;
            }
        }
        if (best) {
            /* another stream's free: settled by this miss's asking (about the range itself,
             * or, merged, about what its coalesce merged into it), or known settled already,
             * by its owner's publication (sp__fence_early, a fence behind its frees) or a
             * query before; counted as the small tier counts a steal from another's bins (a
             * range waited for is a wait, below), and the allocation's outcome says the same.
             * Only a miss's take (ab) counts: a take without one is a hit's or a fresh
             * segment's, which its caller counts as such, and the outcome must equal the
             * counters (test_trace_outcomes) */
            if (ab && (best_asked || (best->asked_in && best->asked_in == ab->coalesce) ||
                       (!waited && best->freed_by && best->freed_by != me))) {
                sp__usage_count(&h->pool->fig, SP_COUNT_cross_stream_reuses, 1);
                if (ab)
                    ab->took = SP_TOOK_REUSE;
            }
            best->asked_in = 0;
            if (waited) {
                sp__usage_count(&h->pool->fig, SP_COUNT_cross_stream_waits, 1);
                if (ab)
                    ab->took = SP_TOOK_WAIT;
            }
            index_remove(h, best);
            if (!huge)
                split(h, best, size);
            best->seg->used += best->size;
            return best;
        }
    }
    return NULL;
}

sp_block *sp__heap_take(sp_heap *h, size_t size, sp_stream_cache *me, cudaStream_t stream,
                        sp_take_mode mode, sp_ask_budget *ab)
{
    /* a huge request takes a whole huge segment at most 1/SP_HUGE_SLACK over its size (or its
     * own size in whole pages, what a new segment for it would be), never a piece: huge
     * segments stay whole, so a free one can always go back to the driver, which remaps its
     * pages for any size (CUDA-SEMANTICS 13a) better than a split could */
    size_t most = SIZE_MAX;
    if (size > SP_MEDIUM_MAX) {
        size_t slack = size + size / SP_HUGE_SLACK;
        size_t paged = sp__round_up(size, SP_DRIVER_GRANULARITY);
        most = slack > paged ? slack : paged;
    }
    /* the best fit among the ranges known usable first, with no CUDA call; only if there is
     * none, a pending range, asking about its stream within the miss's budget (one ask): a miss
     * never walks the index asking stream after stream */
    sp_block *b = take_fit(h, size, most, me, stream, SP_TAKE_KNOWN, ab);
    return b || mode == SP_TAKE_KNOWN ? b : take_fit(h, size, most, me, stream, mode, ab);
}

void sp__heap_coalesce(sp_heap *h, size_t size, sp_stream_cache *me, sp_ask_budget *ab)
{
    if (!++h->coalesces)
        ++h->coalesces;
    ab->coalesce = h->coalesces;
    for (sp_segment *s = h->segments; s; s = s->next) {
        for (sp_block *b = s->first; b;) {
            if (!b->is_free) {
                b = b->addr_next;
                continue;
            }
            /* a run of free neighbours from b to end, and whether tags keep any of it apart */
            size_t run = 0;
            bool apart = false;
            sp_block *end = b;
            for (;; end = end->addr_next) {
                run += end->size;
                sp_block *n = end->addr_next;
                if (!n || !n->is_free)
                    break;
                if (!may_merge(end, n))
                    apart = true;
            }
            /* the driver is asked only about a run that would hold the request once merged:
             * asking about every pending range cost serve 10 event queries a request, and a
             * merge that still leaves the range too small helps no one now. Never about `me`:
             * its own ranges merge with each other anyway. */
            if (apart && run >= size)
                for (sp_block *x = b;; x = x->addr_next) {
                    if (x->tag && x->tag != me && sp__fence_tag_settled_within(ab, x->tag, x->epoch)) {
                        x->tag = NULL;
                        x->asked_in = ab->coalesce;
                    }
                    if (x == end)
                        break;
                }
            sp_block *stop = end->addr_next; /* live or none: no merge reaches it */
            while (b != stop) {
                sp_block *next = b->addr_next;
                if (next != stop && may_merge(b, next)) {
                    index_remove(h, b);
                    index_remove(h, next);
                    absorb(h, b, next);
                    index_add(h, b);
                    continue; /* b may merge with its new neighbour too */
                }
                b = next;
            }
        }
    }
}

void sp__heap_put(sp_heap *h, sp_block *b, sp_stream_cache *tag, uint64_t epoch)
{
    b->tag = tag;
    b->epoch = epoch;
    b->cls = SP_CLASS_COUNT;
    b->seg->used -= b->size;
    sp_block *prev = b->addr_prev, *next = b->addr_next;
    if (prev && prev->is_free && may_merge(prev, b)) {
        index_remove(h, prev);
        absorb(h, prev, b);
        b = prev;
    }
    if (next && next->is_free && may_merge(b, next)) {
        index_remove(h, next);
        absorb(h, b, next);
    }
    index_add(h, b);
}

sp_segment *sp__heap_segment_new(void)
{
    sp_segment *s = calloc(1, sizeof *s);
    sp_block *b = calloc(1, sizeof *b);
    if (!s || !b) {
        free(s);
        free(b);
        return NULL;
    }
    s->first = b;
    return s;
}

void sp__heap_segment_discard(sp_segment *s)
{
    free(s->first);
    free(s);
}

/* Links s, whose one range is s->first, into h as a free range tagged (tag, epoch). */
static void link_segment(sp_heap *h, sp_segment *s, void *ptr, size_t size, bool huge,
                         sp_stream_cache *tag, uint64_t epoch)
{
    sp_block *b = s->first;
    b->ptr = ptr;
    b->size = size;
    b->cls = SP_CLASS_COUNT;
    atomic_init(&b->state, SP_BLOCK_CACHED);
    b->pool = h->pool;
    b->tag = tag;
    b->epoch = epoch;
    b->seg = s;
    s->ptr = ptr;
    s->size = size;
    s->huge = huge;
    SP_LIST_PUSH(h->segments, s, prev, next);
    h->segment_count++;
    h->segment_bytes += size;
    index_add(h, b);
}

int sp__heap_add_segment(sp_heap *h, sp_segment *s, void *ptr, size_t size, bool huge,
                         sp_stream_cache *tag, uint64_t epoch)
{
    s->first->ptr = ptr;
    s->first->pool = h->pool;
    atomic_init(&s->first->state, SP_BLOCK_CACHED);
    int rc = sp__ptrmap_insert(&h->pool->dev->ptrmap, s->first);
    if (rc == SP_OK) {
        s->unmapped = false; /* one refused back before may be found again */
        link_segment(h, s, ptr, size, huge, tag, epoch);
    }
    return rc;
}

void sp__heap_keep_unmapped(sp_heap *h, sp_segment *s, void *ptr, size_t size, bool huge,
                            sp_stream_cache *tag, uint64_t epoch)
{
    s->unmapped = true;
    link_segment(h, s, ptr, size, huge, tag, epoch);
}

/* ---- giving segments back ---- */

/* Is every range of s free, and settled or (`own`: the give-back frees on `me`'s stream) freed
 * on `me`'s stream, whose own order puts the free after every use (rule 3)? Asks the driver if
 * `ask`; about `me` (the allocating stream, which this thread may query) in any case. */
static bool wholly_free(sp_segment *s, bool ask, sp_stream_cache *me, bool own, sp_ask_budget *ab)
{
    if (s->used)
        return false;
    for (sp_block *b = s->first; b; b = b->addr_next) {
        if (!b->is_free)
            return false;
        if (!b->tag || (own && b->tag == me))
            continue; /* an own range keeps its tag: the segment may yet stay */
        bool settled = ask && b->tag != me && ab
                           ? sp__fence_tag_settled_within(ab, b->tag, b->epoch)
                           : sp__fence_tag_settled(b->tag, b->epoch, ask || b->tag == me);
        if (!settled)
            return false;
        b->tag = NULL;
    }
    return true;
}

static void segment_unlink(sp_heap *h, sp_segment *s)
{
    SP_LIST_UNLINK(h->segments, s, prev, next);
    h->segment_count--;
    h->segment_bytes -= s->size;
    for (sp_block *b = s->first, *next; b; b = next) {
        next = b->addr_next;
        index_remove(h, b);
        sp__ptrmap_remove(&h->pool->dev->ptrmap, b->ptr);
        if (b != s->first)
            free(b);
    }
    /* the first range's structure stays with s: a segment the driver refuses back goes into
     * the heap again with no host allocation (give_segment) */
    memset(s->first, 0, sizeof *s->first);
}

static int by_size_desc(const void *a, const void *b)
{
    const sp_segment *x = *(sp_segment *const *)a, *y = *(sp_segment *const *)b;
    return (x->size < y->size) - (x->size > y->size);
}

/* Gives unlinked segment s to the driver with cudaFreeAsync on `on`, counted as a driver free
 * (what the give-back was for, a trim, a reclaim, the cache limit, is counted by its caller),
 * and frees s. A segment the driver refuses stays the pool's, back in the
 * heap as one range, with the structures it had: tagged with everything `tag`'s stream freed so
 * far if it may hold ranges freed there and not yet settled (stricter), else settled; unmapped
 * if the ptrmap cannot take it again. Returns the bytes given; *err (if not NULL and still
 * SP_OK) gets a CUDA error. Caller holds no lock. */
static uint64_t give_segment(sp_heap *h, sp_segment *s, cudaStream_t on, sp_stream_cache *tag,
                             int *err)
{
    sp_pool *pool = h->pool;
    size_t size = s->size;
    int rc = sp__cuda_free(s->ptr, on);
    if (rc == SP_OK) {
        if (tag) /* freed on tag's own stream: a trim must synchronize it first */
            sp__fence_gave_back(tag, on);
        sp__usage_count(&pool->fig, SP_COUNT_driver_frees, 1);
        sp__usage_add(&pool->fig, 0, 0, -(int64_t)size);
    } else {
        if (err && *err == SP_OK)
            *err = rc;
        sp__usage_count(&pool->fig, SP_COUNT_give_back_failures, 1);
        uint64_t epoch = tag ? atomic_load_explicit(&tag->free_epoch, memory_order_acquire) : 0;
        sp_mutex_lock(&h->lock);
        if (sp__heap_add_segment(h, s, s->ptr, size, s->huge, tag, epoch) != SP_OK)
            sp__heap_keep_unmapped(h, s, s->ptr, size, s->huge, tag, epoch);
        sp_mutex_unlock(&h->lock);
        return 0;
    }
    sp__heap_segment_discard(s);
    return size;
}

uint64_t sp__heap_release(sp_heap *h, uint64_t want, bool ask, sp_stream_cache *me,
                          cudaStream_t stream, sp_ask_budget *ab, int *err)
{
    sp_pool *pool = h->pool;
    sp_device *dev = pool->dev;
    uint64_t released = 0;
    /* a give-back for memory (trim, cache limit): it may ask, each stream once */
    sp_ask_budget asks = {0};
    if (!ab)
        ab = &asks;
    sp_mutex_lock(&h->lock);
    size_t n = 0;
    for (sp_segment *s = h->segments; s; s = s->next)
        n += s->used == 0;
    sp_segment **cand = n ? calloc(n, sizeof *cand) : NULL;
    /* a miss frees on its own stream unless it may not touch it (rule 25: a capture elsewhere
     * depends on it); then on the service stream, after a synchronize */
    bool own = me && sp__cache_may_touch(me);
    n = 0;
    if (cand)
        for (sp_segment *s = h->segments; s; s = s->next)
            if (wholly_free(s, ask, me, own, me ? ab : NULL))
                cand[n++] = s;
    if (n)
        qsort(cand, n, sizeof *cand, by_size_desc);
    size_t taken = 0;
    uint64_t planned = 0;
    for (; taken < n && planned < want; taken++) {
        segment_unlink(h, cand[taken]);
        planned += cand[taken]->size;
    }
    sp_mutex_unlock(&h->lock);
    /* A miss frees on its own stream: the driver hands memory freed there to the allocation
     * that follows on that stream at once (rule 9), with no synchronization. The service
     * stream, shared by every thread, made each miss wait for every other thread's frees, and
     * until it caught up the driver could reuse none of them: sp-bench serve at 64 streams
     * reserved 1.6 GB more in one run in three. An idle stream is synchronized after the frees
     * (only they are queued), so that other streams may reuse the pages too (rule 11c); a busy
     * one is not waited for, and they reuse them once its work gets there. */
    cudaStream_t on = own ? stream : dev->service;
    bool sync = me && !own;
    if (own && taken && ab->own_idle != SP_IDLE_UNKNOWN) /* its thread asked in this miss */
        sync = ab->own_idle == SP_IDLE_YES;
    else if (own && taken && sp__cuda_stream_query(stream, &sync) != SP_OK)
        sync = false;
    /* driver calls outside the lock; a segment the driver refuses stays the pool's */
    for (size_t i = 0; i < taken; i++)
        released += give_segment(h, cand[i], on, own ? me : NULL, err);
    free(cand);
    if (sync && released && sp__cuda_stream_sync(on) != SP_OK)
        sp__usage_count(&pool->fig, SP_COUNT_skipped_steps, 1);
    return released;
}


void sp__heap_give_back_huge(sp_heap *h, sp_block *b, sp_stream_cache *c, cudaStream_t stream)
{
    sp_mutex_lock(&h->lock);
    sp__heap_put(h, b, c, b->epoch);
    sp_segment *s = b->seg;
    bool whole = s->huge && s->used == 0 && s->first->is_free && !s->first->addr_next;
    if (whole)
        segment_unlink(h, s); /* b goes with it */
    sp_mutex_unlock(&h->lock);
    if (whole)
        (void)give_segment(h, s, stream, c, NULL);
}

void sp__heap_stats(sp_heap *h, sp_stats *st)
{
    sp_mutex_lock(&h->lock);
    for (sp_segment *s = h->segments; s; s = s->next) {
        if (s->used)
            st->inactive_split += s->size - s->used;
        for (sp_block *b = s->first; b; b = b->addr_next)
            if (b->is_free && !s->unmapped && b->size > st->largest_free)
                st->largest_free = b->size;
    }
    if (h->small) {
        st->slabs += h->segment_count;
        st->slab_bytes += h->segment_bytes;
    } else {
        st->segments += h->segment_count;
        st->segment_bytes += h->segment_bytes;
    }
    sp_mutex_unlock(&h->lock);
}
