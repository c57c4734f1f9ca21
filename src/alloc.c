/* The hot path, sp_alloc and sp_free, and the one function a miss goes through.
 * Small requests (<= SP_SMALL_MAX) hit the stream's own bin of their size class: one spin lock,
 * no shared counter, no driver call. Large requests take a range the stream itself freed lately
 * back from its park under the same spin lock, else a best-fit range from the pool's segments
 * under the heap's mutex, also without a driver call when free memory fits. A miss
 * climbs one ladder, top to bottom: steal -> fresh -> give back -> reclaim -> callback -> fail. */
#include "alloc.h"
#include "park.h"
#include "capture.h"
#include "small.h"
#include "give_back.h"
#include "grow.h"
#include "classes.h"
#include "cuda.h"
#include "ptrmap.h"
#include "reclaim.h"
#include "status.h"
#include "trace.h"
#include "introspect.h"
#include "request_list.h"
#include "free_order.h"
#include "peer.h"
#include "share_guard.h"

static size_t large_size(size_t bytes)
{
    return sp__round_up(bytes, SP_LARGE_ALIGN);
}

static uint64_t magnitude(int64_t d)
{
    return (uint64_t)(d < 0 ? -d : d);
}

/* Records an allocation served by the stream's cache in its counters (c->lock held). */
static void hit_locked(sp_pool *pool, sp_stream_cache *c, sp_block *b, size_t bytes)
{
    sp_spin_assert_owner(&c->lock);
    b->requested = bytes;
    c->hits++;
    c->requested_total += bytes;
    c->active_total += b->size;
    c->requested_delta += (int64_t)bytes;
    c->active_delta += (int64_t)b->size;
    sp__note_alloc_locked(c, b);
    if (sp_unlikely(magnitude(c->requested_delta) > pool->stats_flush ||
                    magnitude(c->active_delta) > pool->stats_flush))
        sp__cache_flush_locked(pool, c);
}

/* A hit handed out: counted under c's spin lock, which it releases, and b live for the caller.
 * Inline: the small and the large hit as written out. */
static inline int hand_out_hit(sp_alloc_call *a, sp_pool *pool, sp_stream_cache *c, sp_block *b,
                               size_t bytes)
{
    hit_locked(pool, c, b, bytes);
    sp_spin_unlock(&c->lock);
    atomic_store_explicit(&b->state, SP_BLOCK_LIVE, memory_order_release);
    a->block = b;
    a->outcome = SP_OUTCOME_HIT;
    return SP_OK;
}

/* alloc_in's result for a request that its stream's bins serve (never a status: those are <= 0) */
#define TO_BINS 1

static int alloc_off_bins(sp_alloc_call *a);

/* peer.c: a stream of another device is handed a block only with a read-write grant; a stream
 * of the pool's own device pays this one branch */
static inline int peer_check(sp_pool *pool, sp_stream_cache *c, cudaStream_t stream)
{
    return sp_unlikely(sp__peer_check_wanted(c)) ? sp__peer_admit(pool, c, stream) : SP_OK;
}

/* The stream's cache in *out (made on its first use) and peer_check's verdict on it: what the
 * bins and the large path start with. Inline, the hot path's branches as written out. */
static inline int stream_cache(sp_pool *pool, sp_stream_key key, cudaStream_t stream,
                               sp_stream_cache **out)
{
    sp_stream_cache *c = sp__cache_get(pool, key);
    *out = c;
    if (sp_unlikely(!c))
        return SP_ERR_NO_HOST_MEMORY;
    return peer_check(pool, c, stream);
}

/* What a free decided under its cache's lock, for the steps after it. */
typedef struct {
    bool capturing;           /* its stream is capturing: the block is kept aside */
    bool touch;               /* a huge segment may go back to the driver on this stream */
    bool to_bin;              /* a small block into the stream's own bin: the hot path */
    bool give_huge;           /* a huge segment straight back to the driver (SP_HUGE_SAME) */
    sp_block *evicted;        /* the park's oldest range, when a large free filled it */
} free_step;

static int alloc_large(sp_alloc_call *a, sp_stream_key key);
static int free_bypass(sp_pool *pool, sp_block *b, cudaStream_t stream);
static sp_stream_cache *cache_locked_for_free(sp_pool *pool, sp_block *b, cudaStream_t stream,
                                              free_step *f);
static void keep_off_bins_locked(sp_stream_cache *c, sp_block *b, free_step *f);
static void fence_after_free(sp_stream_cache *c, const free_step *f);
static int alloc_miss(sp_alloc_call *a, sp_stream_cache *c, sp_idle own_idle);
static int alloc_bypass(sp_alloc_call *a);
static int served_off_cache(sp_alloc_call *a, sp_stream_cache *c, sp_block *b, sp_outcome how);
/* an allocation checked (check_free_order:1) or recorded (a trace): never inlined, so that the
 * hot path keeps the shape it has without them */
enum { CHECKED = 1, TRACED = 2 };
static int alloc_wrapped(sp_alloc_call *a, unsigned wrap) __attribute__((noinline));
static int free_wrapped(sp_pool *pool, void *ptr, cudaStream_t stream, unsigned wrap)
    __attribute__((noinline));

/* The wrappers an allocation goes through: check_free_order:1 and a trace, if on. */
static inline unsigned wrappers(const sp_pool *pool)
{
    unsigned w = sp_unlikely(pool != NULL && sp__free_order_wanted(pool->dev)) ? CHECKED : 0;
    return w | (sp__trace_wanted() ? TRACED : 0);
}

static inline int alloc_in(sp_alloc_call *a);

int sp_alloc(sp_pool *pool, void **ptr, size_t bytes, cudaStream_t stream)
{
    if (sp_unlikely(!ptr)) {
        sp__cuda_error_clear();
        return SP_ERR_INVALID;
    }
    sp_alloc_call a = {.pool = pool, .bytes = bytes, .stream = stream};
    unsigned wrap = wrappers(pool);
    int rc = sp_unlikely(wrap) ? alloc_wrapped(&a, wrap) : alloc_in(&a);
    if (rc == SP_OK)
        *ptr = a.block ? a.block->ptr : NULL;
    return rc;
}

int sp__alloc(sp_alloc_call *a)
{
    unsigned wrap = wrappers(a->pool);
    return sp_unlikely(wrap) ? alloc_wrapped(a, wrap) : alloc_in(a);
}

/* Every allocation, its context explicit: the stream's bins first (the hot path), else
 * alloc_off_bins and the miss. */
static inline int alloc_in(sp_alloc_call *a)
{
    sp_pool *pool = a->pool;
    size_t bytes = a->bytes;
    cudaStream_t stream = a->stream;
    sp__cuda_error_clear();
    if (sp_unlikely(!pool))
        return SP_ERR_INVALID;
    /* zero bytes, a large request, or a capture that may be under way: TO_BINS if the request
     * is a small one for the stream's bins after all */
    if (sp_unlikely(bytes - 1 >= SP_SMALL_MAX || sp__capture_possible(pool->dev))) {
        int rc = alloc_off_bins(a);
        if (rc != TO_BINS)
            return rc;
    }
    sp_stream_key key = sp__cache_key(stream);
    uint32_t cls = sp__class_of(bytes);
    for (;;) {
        sp_stream_cache *c;
        int prc = stream_cache(pool, key, stream, &c);
        if (sp_unlikely(prc != SP_OK))
            return prc;
        sp_spin_lock(&c->lock);
        if (sp_unlikely(c->released)) { /* released meanwhile: look the stream up again */
            sp_spin_unlock(&c->lock);
            continue;
        }
        sp_block *b = sp__small_bin_pop_newest(&c->bins[cls]);
        for (uint32_t up = cls + 1; !b && up <= cls + SP_FIT_CLASSES; up++)
            b = sp__small_bin_pop_newest(&c->bins[up]);
        if (sp_likely(b != NULL)) {
            c->cached_bytes -= b->size;
            return hand_out_hit(a, pool, c, b, bytes);
        }
        sp__cache_flush_locked(pool, c); /* the slow path keeps the shared figures current */
        sp_spin_unlock(&c->lock);
        return alloc_miss(a, c, sp__fence_early(c));
    }
}

static inline int free_in(sp_pool *pool, void *ptr, cudaStream_t stream);

int sp_free(sp_pool *pool, void *ptr, cudaStream_t stream)
{
    unsigned wrap = wrappers(pool);
    return sp_unlikely(wrap) ? free_wrapped(pool, ptr, stream, wrap) : free_in(pool, ptr, stream);
}

/* Every free: the block back to its stream's cache (its bin, its park) or to the driver. */
static inline int free_in(sp_pool *pool, void *ptr, cudaStream_t stream)
{
    sp__cuda_error_clear();
    if (sp_unlikely(!pool))
        return SP_ERR_INVALID;
    if (sp_unlikely(!ptr))
        return SP_OK;
    /* share_guard.c: a block another process imported and still holds stays live until it
     * releases it (sp_pool_share_poll frees it then) */
    if (sp_unlikely(atomic_load_explicit(&pool->share, memory_order_acquire) != NULL)) {
        int held = sp__share_hold(pool, ptr, stream);
        if (held != 0)
            return held > 0 ? SP_OK : held;
    }
    sp_block *b = NULL;
    int rc = sp__ptrmap_take_for_free(&pool->dev->ptrmap, ptr, pool, &b);
    if (sp_unlikely(rc != SP_OK)) {
        sp__usage_count(&pool->fig, SP_COUNT_bad_frees, 1);
        return rc;
    }
    /* an allocation of an open request leaves it, before the block can reach a bin */
    sp_req *req = NULL;
    if (sp_unlikely(atomic_load_explicit(&pool->requests_used, memory_order_relaxed)) && b->req)
        req = sp__req_forget(b);
    if (sp_unlikely(atomic_load_explicit(&b->state, memory_order_relaxed) == SP_BLOCK_BYPASS))
        return free_bypass(pool, b, stream);
    free_step f = {0};
    sp_stream_cache *c = cache_locked_for_free(pool, b, stream, &f);
    if (sp_unlikely(!c)) { /* the block stays live, in its request: the caller may retry */
        if (req)
            sp__req_unforget(req, b);
        atomic_store_explicit(&b->state, SP_BLOCK_LIVE, memory_order_release);
        return SP_ERR_NO_HOST_MEMORY;
    }
    /* one writer at a time (c->lock): no locked instruction; the release store orders the
     * caller's work before any fence that reads this epoch */
    b->epoch = atomic_load_explicit(&c->free_epoch, memory_order_relaxed) + 1;
    atomic_store_explicit(&c->free_epoch, b->epoch, memory_order_release);
    c->frees++;
    c->freed_bytes += b->size;
    c->requested_delta -= (int64_t)b->requested;
    c->active_delta -= (int64_t)b->size;
    sp_free_note note = sp__note_free_locked(c, b);
    f.to_bin = b->cls < SP_CLASS_COUNT && !f.capturing;
    if (sp_likely(f.to_bin)) { /* the same-stream hit: the stream's own bin */
        sp__small_bin_push(&c->bins[b->cls], b);
        c->cached_bytes += b->size;
    } else {
        keep_off_bins_locked(c, b, &f);
    }
    uint64_t cache_limit = atomic_load_explicit(&pool->cache_limit, memory_order_relaxed);
    if (sp_unlikely(cache_limit != UINT64_MAX || !f.to_bin ||
                    magnitude(c->active_delta) > pool->stats_flush))
        sp__cache_flush_locked(pool, c);
    sp_spin_unlock(&c->lock);
    if (sp_unlikely(note.owner != NULL)) /* allocated on another stream */
        sp__introspect_note_foreign_free(note);
    if (f.evicted) /* back into its segment, tagged, merged with free neighbours */
        sp__park_put(pool, f.evicted);
    if (f.give_huge)
        sp__heap_give_back_huge(&pool->segments, b, c, stream);
    if (sp_unlikely(cache_limit != UINT64_MAX))
        sp__give_back_to_cache_limit(pool, cache_limit, f.capturing ? NULL : c, stream);
    fence_after_free(c, &f);
    return SP_OK;
}

/* ---- sp_free's steps ---- */

static int free_bypass(sp_pool *pool, sp_block *b, cudaStream_t stream)
{
    /* a capture's own allocation: straight back to the driver (rule 24) */
    sp__usage_add(&pool->fig, -(int64_t)b->requested, -(int64_t)b->size, 0);
    sp__usage_count(&pool->fig, SP_COUNT_frees, 1);
    sp__grow_bypass_free(pool, b, stream);
    return SP_OK;
}

/* The cache of the free's stream, locked and not released; NULL without host memory. A block
 * that is not a bypass stays cached, tagged with its stream. Freed during a capture of its stream
 * (rule 24), it was allocated before the capture: no cudaFreeAsync, no bin; it is kept aside
 * in the stream's cache and goes back to its slab or segment when the capture ends. */
static sp_stream_cache *cache_locked_for_free(sp_pool *pool, sp_block *b, cudaStream_t stream,
                                              free_step *f)
{
    sp_stream_key key = sp__cache_key(stream);
    bool capturing = false; /* a local, not f's: its address goes to sp__capture_check */
    sp_stream_cache *c;
    for (;;) {
        c = sp__cache_get(pool, key);
        if (sp_unlikely(!c))
            return NULL;
        if (sp_unlikely(sp__capture_possible(pool->dev)) &&
            sp__capture_check(c, &capturing) != SP_OK)
            capturing = true; /* unknown: the careful choice */
        /* asked before the spin lock: under SP_CAPTURE_ALWAYS it is a CUDA call */
        f->touch = b->cls == SP_CLASS_COUNT && !capturing && b->seg->huge &&
                   sp__cache_may_touch(c);
        sp_spin_lock(&c->lock);
        if (sp_likely(!c->released)) {
            f->capturing = capturing;
            return c;
        }
        sp_spin_unlock(&c->lock);
    }
}

/* A large block, or any block of a capturing stream (c->lock held): kept aside, parked, or its
 * huge segment marked to go back to the driver. */
static void keep_off_bins_locked(sp_stream_cache *c, sp_block *b, free_step *f)
{
    sp_spin_assert_owner(&c->lock);
    bool capturing = f->capturing;
    if (!capturing && b->seg->huge) {
        size_t last = c->last_huge_free;
        c->last_huge_free = b->size;
        f->give_huge = last && !(b->size <= last + last / SP_HUGE_SAME &&
                                 last <= b->size + b->size / SP_HUGE_SAME) &&
                       f->touch;
    }
    if (capturing) {
        b->prev = NULL;
        b->next = c->aside;
        c->aside = b;
    } else if (!f->give_huge) { /* large: parked, tagged; its segment gets it at a flush or
                                 * when pushed out */
        f->evicted = sp__park_push_locked(c, b);
    }
}

/* A fence right behind this free, when another stream's miss wanted memory this stream freed
 * (fence_wanted) and this thread's next step is a free: it covers every free so far. Never for a
 * huge segment given back (the driver's now) or a capturing stream (rule 25). */
static void fence_after_free(sp_stream_cache *c, const free_step *f)
{
    if (sp_unlikely(atomic_load_explicit(&c->fence_wanted, memory_order_relaxed)) &&
        !f->capturing && !f->give_huge)
        sp__fence_offer(c);
}

/* ---- sp_alloc's other cases ---- */

/* Zero bytes, too large, a capture's bypass, or a large request; TO_BINS for a small request of
 * a stream that is not capturing, which sp_alloc then serves from the stream's bins. */
static int alloc_off_bins(sp_alloc_call *a)
{
    sp_pool *pool = a->pool;
    size_t bytes = a->bytes;
    cudaStream_t stream = a->stream;
    if (sp_unlikely(bytes == 0)) {
        a->block = NULL;
        return SP_OK;
    }
    if (sp_unlikely(bytes > SP_MAX_ALLOC))
        return SP_ERR_TOO_LARGE;
    sp_stream_key key = sp__cache_key(stream);
    if (sp_unlikely(sp__capture_possible(pool->dev))) {
        /* the stream's own cache says whether it is declared capturing: no lock, so that other
         * streams' hot path stays as it is while a capture is under way */
        sp_stream_cache *c = sp__cache_get(pool, key);
        if (sp_unlikely(!c))
            return SP_ERR_NO_HOST_MEMORY;
        bool capturing = false;
        int rc = sp__capture_check(c, &capturing);
        if (rc == SP_OK)
            rc = peer_check(pool, c, stream);
        if (rc != SP_OK)
            return rc;
        if (capturing)
            return alloc_bypass(a);
    }
    if (bytes <= SP_SMALL_MAX)
        return TO_BINS;
    return alloc_large(a, key);
}

/* A large request: a range the stream freed lately from its park, under its spin lock, else
 * best fit in the segments under the heap's mutex, else the miss ladder. */
static int alloc_large(sp_alloc_call *a, sp_stream_key key)
{
    sp_pool *pool = a->pool;
    size_t bytes = a->bytes;
    cudaStream_t stream = a->stream;
    sp_stream_cache *c;
    int prc = stream_cache(pool, key, stream, &c);
    if (sp_unlikely(prc != SP_OK))
        return prc;
    /* before this request's work: what the stream completed, if another stream wanted it */
    sp_idle own_idle = sp__fence_early(c);
    size_t size = large_size(bytes);
    /* first the stream's own park, under its spin lock: a pair that reuses its own range
     * never touches the heap's mutex, which every stream shares */
    sp_spin_lock(&c->lock);
    sp_block *b = sp_likely(!c->released) ? sp__park_take_locked(c, size) : NULL;
    if (!b) { /* the park goes into the heap under the lock taken anyway: best fit sees it */
        sp_block *parked = sp__park_take_all_locked(c, NULL);
        sp_spin_unlock(&c->lock);
        sp_heap *h = &pool->segments;
        sp_mutex_lock(&h->lock);
        sp__park_put_locked(h, parked);
        /* known usable only (SP_TAKE_KNOWN: no call); a budget so that the take says whether
         * the range was another stream's free, settled by its owner's publication (heap.c
         * counts it a cross-stream reuse): that is no hit of this stream's cache, but a reuse */
        sp_ask_budget known = {0};
        b = sp__heap_take(h, size, c, stream, SP_TAKE_KNOWN, &known);
        sp_mutex_unlock(&h->lock);
        if (!b)
            return alloc_miss(a, c, own_idle);
        if (known.took == SP_TOOK_REUSE)
            return served_off_cache(a, c, b, SP_OUTCOME_STEAL);
        sp_spin_lock(&c->lock);
        if (sp_unlikely(c->released)) {
            /* released meanwhile (its figures went to the pool): counted as a miss's is,
             * in the pool's figures directly */
            sp_spin_unlock(&c->lock);
            return served_off_cache(a, c, b, SP_OUTCOME_REUSE);
        }
    }
    return hand_out_hit(a, pool, c, b, bytes);
}

/* A free without a stream: on the stream that allocated the pointer, as the pointer map says
 * (sp__ptrmap_lookup). */
int sp_free_any(sp_pool *pool, void *ptr)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    if (!ptr)
        return SP_OK;
    sp_ptr_lookup l = sp__ptrmap_lookup(&pool->dev->ptrmap, ptr);
    int rc = SP_OK;
    if (l.info.state == SP_POINTER_UNKNOWN)
        rc = SP_ERR_BAD_POINTER;
    else if (l.info.pool != pool)
        rc = SP_ERR_WRONG_POOL;
    else if (l.info.state == SP_POINTER_CACHED)
        rc = SP_ERR_DOUBLE_FREE;
    else if (l.owner && !sp__cache_key_is_this_threads(l.owner->key))
        return SP_ERR_NOT_SUPPORTED; /* not a bad free: the pointer stays live */
    if (rc != SP_OK) { /* as sp_free would have answered, without a stream to free on */
        sp__usage_count(&pool->fig, SP_COUNT_bad_frees, 1);
        return rc;
    }
    /* through the public call, so that a trace records it on the allocation stream */
    return sp_free(pool, ptr, l.info.stream);
}

/* ---- the trace and check_free_order:1 ----
 * An allocation or a free runs once, its context explicit, and the wrappers note what it did:
 * an allocation's outcome as the allocator decided it and a free's event (the trace), an
 * allocation's mark and a free's check (check_free_order:1). Calls made inside (an OOM
 * callback's) go through sp_alloc and sp_free, and are checked and recorded as their own. */

static int alloc_wrapped(sp_alloc_call *a, unsigned wrap)
{
    sp_trace_mark m = {0};
    if ((wrap & TRACED) && a->pool)
        m = sp__trace_alloc_mark(a->pool);
    int rc = alloc_in(a);
    void *p = rc == SP_OK && a->block ? a->block->ptr : NULL;
    if ((wrap & CHECKED) && p)
        sp__free_order_note(a->pool->dev, p, a->stream);
    if ((wrap & TRACED) && a->pool)
        sp__trace_alloc_done(&m, a->pool, p, a->bytes, a->stream, rc, a->outcome);
    return rc;
}

/* A free checked (check_free_order:1: before anything is freed; a refused one stays live and
 * is not recorded) and recorded (its time taken before the block can reach another thread). */
static int free_wrapped(sp_pool *pool, void *ptr, cudaStream_t stream, unsigned wrap)
{
    sp_trace_mark m = {0};
    if ((wrap & TRACED) && pool)
        m = sp__trace_free_mark(pool);
    sp_free_mark *fm = NULL;
    if ((wrap & CHECKED) && ptr) {
        sp__cuda_error_clear();
        int rc = sp__free_order_check(pool->dev, ptr, stream, &fm);
        if (rc != SP_OK) /* the block stays live: nothing was freed */
            return rc;
    }
    int rc = free_in(pool, ptr, stream);
    if ((wrap & CHECKED) && rc == SP_OK)
        sp__free_order_drop(pool->dev, fm);
    else if (wrap & CHECKED)
        sp__free_order_put_back(pool->dev, fm);
    if ((wrap & TRACED) && pool)
        sp__trace_free_done(&m, pool, ptr, stream, rc);
    return rc;
}

/* ---- the miss ---- */

/* Records an allocation served off the hot path (a miss or a capture's bypass) in the pool's
 * usage and miss figures; a `fresh` block (a new slab's or segment's, or a bypass) is counted
 * live already, with the bytes the driver gave (sp__grow). */
static void count_miss(sp_pool *pool, const sp_block *b, size_t bytes, bool fresh)
{
    if (!fresh)
        sp__usage_add(&pool->fig, (int64_t)bytes, (int64_t)b->size, 0);
    atomic_fetch_add_explicit(&pool->miss_allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->miss_requested_total, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->miss_active_total, b->size, memory_order_relaxed);
}

/* Hands out b, served off the stream's cache (a miss, or a hit whose cache was released
 * meanwhile): counted in the pool's figures and for the stream, with how it was served. */
static int served_off_cache(sp_alloc_call *a, sp_stream_cache *c, sp_block *b, sp_outcome how)
{
    b->requested = a->bytes;
    count_miss(a->pool, b, a->bytes, how == SP_OUTCOME_FRESH);
    sp__introspect_note_miss(c, b, a->bytes);
    atomic_store_explicit(&b->state, SP_BLOCK_LIVE, memory_order_release);
    a->block = b;
    a->outcome = how;
    return SP_OK;
}

static bool held_would_peak(sp_pool *pool, size_t size)
{
    uint64_t held = atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed);
    return held + size > atomic_load_explicit(&pool->fig.usage.held.peak, memory_order_relaxed);
}

static bool larger_than_device(sp_pool *pool, size_t size)
{
    uint64_t free_bytes = 0, total = 0;
    return sp__cuda_mem_info(pool->dev->device, &free_bytes, &total) == SP_OK && size > total;
}

/* ---- the miss ladder ----
 * A miss climbs these rungs in order until one serves it:
 *   settled    memory freed that is known usable (another stream's or its own), or settled by
 *              one call about the candidate that would serve the miss best (fence.c: a covering
 *              fence, else the stream; the other candidates' streams are marked);
 *   wait       under SP_CROSS_STREAM_WAIT, memory behind a pending fence the stream waits on;
 *   fresh      a new slab or segment from the driver; free segments that do not fit go back
 *              first when it would raise the high-water mark (always for a huge request);
 *   limit      refused by the pool's limit: its cache goes back down to what leaves room for
 *              the request, then a fresh one again;
 *   oom wait   refused by the device: memory behind a pending fence (unless NO_WAIT);
 *   give back  refused by either: the pool's whole cache back, synchronized, then a retry;
 *   reclaim    refused by the device: other pools' caches, lowest priority first, then fresh;
 *   callback   the user's OOM callback, then a retry.
 * What still fails is counted and reported. Each rung takes the status the rungs above left
 * (NEXT while none has failed) and returns SP_OK with the block, NEXT, or a failure. Outside the
 * main line: a small request near the limit (at_the_limit) and a driver refusal at the pool's
 * own cap (at_its_cap). */

#define NEXT 1 /* a rung's "not served here": never a status (those are <= 0) */

typedef struct {
    sp_alloc_call *a;
    sp_stream_cache *c;
    sp_heap *h;
    size_t size;          /* as carved: a class size, or the large rounding */
    bool small;
    uint64_t limit;       /* the pool's limit in force as the miss began; 0: none */
    bool hopeless;        /* larger than the whole device: no rung below fresh can help */
    sp_ask_budget asks, waits;
    sp_block *b;          /* with SP_OK: the block, and how it was served */
    sp_outcome how;
} miss;

/* Memory freed earlier: another stream's small blocks first (bins, at most SP_STEAL_PROBES
 * caches), then free ranges of the tier's slabs or segments, as `mode` allows. */
static int take(miss *m, sp_take_mode mode, sp_ask_budget *ab)
{
    sp_pool *pool = m->a->pool;
    cudaStream_t stream = m->a->stream;
    sp_block *b = NULL;
    if (m->small)
        b = sp__small_steal(pool, m->c, sp__class_of(m->size), stream, mode, ab);
    if (!b) {
        sp_mutex_lock(&m->h->lock);
        b = sp__heap_take(m->h, m->size, m->c, stream, mode, ab);
        if (!b) { /* ranges settled since their free may merge now */
            sp__heap_coalesce(m->h, m->size, m->c, ab);
            b = sp__heap_take(m->h, m->size, m->c, stream, mode, ab);
        }
        sp_mutex_unlock(&m->h->lock);
    }
    if (!b)
        return NEXT;
    m->b = b; /* as the take counted it (heap.c, small.c) */
    m->how = ab->took == SP_TOOK_WAIT    ? SP_OUTCOME_WAIT
             : ab->took == SP_TOOK_REUSE ? SP_OUTCOME_STEAL
                                         : SP_OUTCOME_REUSE;
    return SP_OK;
}

/* A fresh slab or segment, the request's claim drawn first. */
static int fresh(miss *m)
{
    sp_alloc_call *a = m->a;
    int rc = sp__grow(a->pool, m->h, m->size, a->bytes, m->c, a->stream, a->req, &m->b);
    if (rc == SP_OK)
        m->how = SP_OUTCOME_FRESH;
    m->hopeless = rc == SP_ERR_OUT_OF_MEMORY && larger_than_device(a->pool, m->size);
    return rc;
}

/* The retry after a give-back that synchronized the pool's streams: the frees it settled may
 * now merge into, or be, a range that holds the request (in a partly used segment, which no
 * give-back frees, and which the rungs above could not use while they were pending), else a
 * fresh slab or segment. Its own budget: memory is short, so it may ask. */
static int retry_settled(miss *m)
{
    sp_ask_budget asks = {0};
    return take(m, SP_TAKE_KNOWN, &asks) == SP_OK ? SP_OK : fresh(m);
}

static int rung_settled(miss *m, int rc)
{
    (void)rc;
    return take(m, SP_TAKE_SETTLED, &m->asks);
}

static int rung_wait(miss *m, int rc)
{
    if (m->a->pool->cfg.cross_stream != SP_CROSS_STREAM_WAIT)
        return rc;
    return take(m, SP_TAKE_WAIT, &m->waits);
}

static int rung_fresh(miss *m, int rc)
{
    (void)rc;
    bool huge = m->size > SP_MEDIUM_MAX;
    if (!m->small && (huge || held_would_peak(m->a->pool, m->size)))
        /* free settled segments that do not fit go back before a new one is taken, so that the
         * driver remaps their pages into it instead of reserving more: always for a huge
         * request (huge segments are never split: any free one is whole), else when a new
         * segment would raise the pool's high-water mark (below it they stay cached) */
        (void)sp__heap_release(m->h, m->size, huge, m->c, m->a->stream, &m->asks, NULL);
    return fresh(m);
}

static int rung_limit(miss *m, int rc)
{
    if (rc != SP_ERR_LIMIT || m->size > m->limit)
        return rc;
    (void)sp__give_back(m->a->pool, m->limit - m->size, false, NULL);
    sp__usage_count(&m->a->pool->fig, SP_COUNT_limit_retries, 1);
    return fresh(m);
}

static int rung_oom_wait(miss *m, int rc)
{
    if (rc != SP_ERR_OUT_OF_MEMORY || m->hopeless ||
        m->a->pool->cfg.cross_stream == SP_CROSS_STREAM_NO_WAIT)
        return rc;
    return take(m, SP_TAKE_WAIT, &m->waits) == SP_OK ? SP_OK : rc;
}

/* Outside the main line: the driver enforces the limit too (maxSize), so a pool at its own cap
 * is at its limit. The give-back before this trimmed the cudaMemPool to its reservation or to
 * the pages in use, whichever is more. Within the reservation, its free pages are no part of
 * that cap: the driver remaps them into the request (rule 13a), so only the bytes in use count;
 * counted, a device out of memory would pass for the limit and the other pools would never be
 * asked. */
static int at_its_cap(miss *m, int rc)
{
    if (rc != SP_ERR_OUT_OF_MEMORY || !m->limit)
        return rc;
    sp_pool *pool = m->a->pool;
    uint64_t reserved = 0, used = 0;
    (void)sp__cuda_pool_usage(pool->cuda_pool, &reserved, &used);
    return (reserved > pool->cfg.reserve ? reserved : used) + m->size > m->limit ? SP_ERR_LIMIT
                                                                                 : rc;
}

static int rung_give_back(miss *m, int rc)
{
    /* over the limit, the pool keeps what leaves room for the request; a driver refusal gives
     * the whole cache back, with or without a limit: the driver counts whole pages, so a pool
     * near its cap (maxSize) may hold fewer bytes than the limit less the request and still
     * have no page left for it */
    bool limited = rc == SP_ERR_LIMIT && m->size <= m->limit;
    if ((rc == SP_ERR_OUT_OF_MEMORY && !m->hopeless) || limited) {
        (void)sp__give_back(m->a->pool, limited && m->limit ? m->limit - m->size : 0, true,
                                 NULL);
        sp__usage_count(&m->a->pool->fig,
                       limited ? SP_COUNT_limit_retries : SP_COUNT_oom_retries, 1);
        rc = retry_settled(m);
    }
    return at_its_cap(m, rc);
}

static int rung_reclaim(miss *m, int rc)
{
    if (rc != SP_ERR_OUT_OF_MEMORY || m->hopeless || !sp__reclaim_others(m->a->pool, m->size))
        return rc;
    sp__usage_count(&m->a->pool->fig, SP_COUNT_oom_retries, 1);
    return fresh(m);
}

static int rung_callback(miss *m, int rc)
{
    sp_pool *pool = m->a->pool;
    if (rc == SP_ERR_OUT_OF_MEMORY && !m->hopeless &&
        sp__reclaim_oom_callback(pool, m->a->bytes, m->a->stream)) {
        /* what the callback freed, into any pool's cache, reaches the device */
        (void)sp__give_back(pool, 0, true, NULL);
        (void)sp__reclaim_others(pool, m->size);
        sp__usage_count(&pool->fig, SP_COUNT_oom_retries, 1);
        return retry_settled(m);
    }
    if (rc == SP_ERR_LIMIT && sp__reclaim_oom_callback(pool, m->a->bytes, m->a->stream)) {
        /* a limit rejection: only what the callback freed in this pool can help; no other
         * pool is touched */
        (void)sp__give_back(pool, m->limit - m->size, true, NULL);
        sp__usage_count(&pool->fig, SP_COUNT_limit_retries, 1);
        return retry_settled(m);
    }
    return rc;
}

static int (*const ladder[])(miss *, int) = {
    rung_settled, rung_wait, rung_fresh, rung_limit, rung_oom_wait, rung_give_back,
    rung_reclaim, rung_callback,
};

/* Outside the main line: near the limit, a small request whose size class would not fit,
 * though the request does, is carved from the segments at 512-byte rounding instead (the limit
 * is whole pages: only a capture's bypass allocations leave such a room). */
static void at_the_limit(miss *m)
{
    size_t rounded = large_size(m->a->bytes);
    uint64_t held = atomic_load_explicit(&m->a->pool->fig.limit_used, memory_order_relaxed);
    uint64_t room = held < m->limit ? m->limit - held : 0;
    if (m->size > room && rounded <= room) {
        m->small = false;
        m->size = rounded;
    }
}

static int alloc_miss(sp_alloc_call *a, sp_stream_cache *c, sp_idle own_idle)
{
    sp_pool *pool = a->pool;
    miss m = {.a = a, .c = c, .limit = pool->limit_bytes, .small = a->bytes <= SP_SMALL_MAX};
    m.size = m.small ? sp__class_size(sp__class_of(a->bytes)) : large_size(a->bytes);
    if (m.small && m.limit && m.size > large_size(a->bytes))
        at_the_limit(&m);
    m.h = m.small ? &pool->slabs : &pool->segments;
    if (!m.small) /* every stream's parked ranges: this miss may reuse, merge or give them back */
        sp__park_flush_all(pool);
    if (m.limit && m.size > m.limit) { /* over the limit on its own: nothing can help, ever */
        sp__usage_count(&pool->fig, SP_COUNT_limit_rejections, 1);
        sp__reclaim_oom_record(pool, a->bytes, m.size, a->stream, SP_ERR_NEVER_FITS);
        return SP_ERR_NEVER_FITS;
    }
    m.asks = (sp_ask_budget){.own_idle = own_idle};
    /* pending frees may have settled since the cache limit last gave up on them */
    if (sp_unlikely(atomic_load_explicit(&pool->limit_stuck, memory_order_relaxed)))
        atomic_store_explicit(&pool->limit_stuck, 0, memory_order_relaxed);
    int rc = NEXT;
    for (size_t i = 0; i < sizeof ladder / sizeof *ladder && rc != SP_OK; i++)
        rc = ladder[i](&m, rc);
    if (rc == SP_ERR_LIMIT || rc == SP_ERR_OUT_OF_MEMORY) {
        sp__usage_count(&pool->fig, rc == SP_ERR_LIMIT ? SP_COUNT_limit_rejections : SP_COUNT_ooms,
                       1);
        sp__reclaim_oom_record(pool, a->bytes, m.size, a->stream, rc);
    }
    if (rc != SP_OK)
        return rc;
    if (m.small)
        m.b->cls = sp__class_of(m.b->size);
    return served_off_cache(a, c, m.b, m.how);
}

/* Rule 24: a capturing stream's allocations become graph nodes; they never touch a cache. */
static int alloc_bypass(sp_alloc_call *a)
{
    sp_pool *pool = a->pool;
    size_t bytes = a->bytes;
    sp_block *b = NULL;
    int rc = sp__grow_bypass(pool, bytes, a->stream, a->req, &b);
    if (rc == SP_ERR_LIMIT && sp__round_up(bytes, SP_BYPASS_ALIGN) > pool->limit_bytes)
        rc = SP_ERR_NEVER_FITS; /* larger than the limit itself */
    if (rc == SP_ERR_LIMIT || rc == SP_ERR_NEVER_FITS)
        sp__usage_count(&pool->fig, SP_COUNT_limit_rejections, 1);
    else if (rc == SP_ERR_OUT_OF_MEMORY)
        sp__usage_count(&pool->fig, SP_COUNT_ooms, 1);
    if (rc == SP_ERR_LIMIT || rc == SP_ERR_NEVER_FITS || rc == SP_ERR_OUT_OF_MEMORY)
        /* reported like the ladder's failures; no driver call a capture forbids */
        sp__reclaim_oom_record(pool, bytes, sp__round_up(bytes, SP_BYPASS_ALIGN), a->stream, rc);
    if (rc != SP_OK)
        return rc;
    b->bypass_stream = a->stream; /* for sp_pointer_info and sp_free_any; no cache owns it */
    count_miss(pool, b, bytes, true);
    sp__usage_count(&pool->fig, SP_COUNT_capture_bypasses, 1);
    a->block = b;
    a->outcome = SP_OUTCOME_BYPASS;
    return SP_OK;
}
