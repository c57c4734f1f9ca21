/* Fences and the rules of tags. A free block or range carries (cache of the freeing stream,
 * epoch of its free). It is settled once a fence recorded on that stream after the free has
 * completed; fences are recorded lazily, on a miss, and one covers every free before it, so no
 * event is ever recorded per free. A settled tag lets any stream reuse the memory; a pending one
 * only the freeing stream, or a stream made to wait on the fence (rule 18: the wait captures the
 * record at call time, so a fence can be re-recorded once no one needs it). */
#include <stdlib.h>

#include "fence.h"
#include "usage.h"
#include "cuda.h"
#include "pool.h"
#include "device.h"

/* An event recorded on a stream after its frees up to `epoch` (fence.h). */
struct sp_fence {
    cudaEvent_t event;
    uint64_t epoch;
    bool done;                 /* an event query has seen it complete */
    sp_fence *next;
};

int sp__fence_pool_init(sp_fence_pool *fp, int device)
{
    fp->device = device;
    fp->free_fences = NULL;
    sp_spin_init(&fp->lock, SP_RANK_SPIN, "fence_pool->lock");
    return SP_OK;
}

void sp__fence_pool_destroy(sp_fence_pool *fp)
{
    while (fp->free_fences) {
        sp_fence *f = fp->free_fences;
        fp->free_fences = f->next;
        (void)sp__cuda_event_destroy(f->event);
        free(f);
    }
}

int sp__fence_record(sp_fence_pool *fp, cudaStream_t stream, uint64_t epoch, sp_fence **out)
{
    sp_spin_lock(&fp->lock);
    sp_fence *f = fp->free_fences;
    if (f)
        fp->free_fences = f->next;
    sp_spin_unlock(&fp->lock);
    if (!f) {
        f = calloc(1, sizeof *f);
        if (!f)
            return SP_ERR_NO_HOST_MEMORY;
        int rc = sp__cuda_event_create(fp->device, &f->event);
        if (rc != SP_OK) {
            free(f);
            return rc;
        }
    }
    int rc = sp__cuda_event_record(f->event, stream);
    if (rc != SP_OK) {
        sp__fence_recycle(fp, f);
        return rc;
    }
    f->epoch = epoch;
    f->done = false;
    f->next = NULL;
    *out = f;
    return SP_OK;
}

int sp__fence_query(const sp_fence *f, bool *done)
{
    return sp__cuda_event_query(f->event, false, done);
}

void sp__fence_recycle(sp_fence_pool *fp, sp_fence *f)
{
    sp_spin_lock(&fp->lock);
    f->next = fp->free_fences;
    fp->free_fences = f;
    sp_spin_unlock(&fp->lock);
}

/* Queries and synchronizes of events in relaxed capture mode while a capture may be under way
 * (cuda.c). Read under c's fence_lock: sp_stream_capture_begin drains every fence step of the
 * runtime after it counts the capture, so none that read no capture reaches CUDA after it. */
static bool relaxed(const sp_stream_cache *c)
{
    return sp__capture_possible(c->pool->dev);
}

static void skipped(sp_stream_cache *c)
{
    sp__usage_count(&c->pool->fig, SP_COUNT_skipped_steps, 1);
}

/* The stream has passed epoch: done_epoch rises to it, never back (fence_lock held). */
static void raise_done(sp_stream_cache *c, uint64_t epoch)
{
    sp_mutex_assert_owner(&c->fence_lock);
    if (atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < epoch)
        atomic_store_explicit(&c->done_epoch, epoch, memory_order_release);
}

/* Every fence from f on (f and older) is complete: the stream has passed f->epoch. */
static void settle_through(sp_stream_cache *c, sp_fence *f)
{
    sp_fence_pool *fp = &c->pool->dev->fences;
    raise_done(c, f->epoch);
    sp_fence **p = &c->fences;
    while (*p && *p != f)
        p = &(*p)->next;
    *p = NULL;
    while (f) {
        sp_fence *next = f->next;
        sp__fence_recycle(fp, f);
        c->fence_count--;
        f = next;
    }
}

/* Drops fences that a query, synchronize or idle stream already overtook (under fence_lock). */
static void prune_done(sp_stream_cache *c)
{
    uint64_t done = atomic_load_explicit(&c->done_epoch, memory_order_relaxed);
    for (sp_fence *f = c->fences; f; f = f->next)
        if (f->epoch <= done) {
            settle_through(c, f);
            return;
        }
}

/* Can this process name the cache's stream? Another thread's cudaStreamPerThread cannot be
 * named from here, a released stream may be destroyed, and a capturing one must not be touched
 * (rule 25). */
static bool may_touch_stream(sp_stream_cache *c)
{
    return !c->released && sp__cache_may_touch(c);
}

/* The oldest pending fence covering epoch, recording one if `ask` and none exists; under
 * fence_lock. */
static sp_fence *covering_fence(sp_stream_cache *c, uint64_t epoch, bool ask)
{
    sp_fence *f = NULL;
    for (sp_fence *x = c->fences; x && x->epoch >= epoch; x = x->next)
        f = x;
    if (!f && ask && !c->released && !sp__cache_key_is_this_threads(c->key))
        atomic_store_explicit(&c->fence_wanted, true, memory_order_relaxed);
    if (f || !ask || !may_touch_stream(c) || c->fence_count >= SP_FENCE_CAP)
        return f;
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    if (sp__fence_record(&c->pool->dev->fences, c->key.stream, now, &f) != SP_OK) {
        skipped(c);
        return NULL;
    }
    sp__usage_count(&c->pool->fig, SP_COUNT_fences_recorded, 1);
    f->next = c->fences;
    c->fences = f;
    c->fence_count++;
    return f;
}


/* An idle stream has completed every free it holds: no event needed (under fence_lock). */
static bool stream_idle_settles(sp_stream_cache *c)
{
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    bool idle = false;
    if (sp__cuda_stream_query(c->key.stream, &idle) != SP_OK) {
        skipped(c);
        return false;
    }
    if (idle && atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < now) {
        raise_done(c, now);
        prune_done(c);
    }
    return idle;
}

/* The oldest fence covering epoch, queried unless seen complete; settles what it covers once it
 * is. Says whether there was one (under fence_lock). */
static bool read_covering_fence(sp_stream_cache *c, uint64_t epoch)
{
    sp_fence *f = covering_fence(c, epoch, false);
    if (f && !f->done && sp__cuda_event_query(f->event, relaxed(c), &f->done) != SP_OK)
        skipped(c);
    if (f && f->done)
        settle_through(c, f);
    return f != NULL;
}

bool sp__fence_tag_settled(sp_stream_cache *c, uint64_t epoch, bool ask)
{
    if (!c || atomic_load_explicit(&c->done_epoch, memory_order_acquire) >= epoch)
        return true;
    if (!ask)
        return false;
    sp_mutex_lock(&c->fence_lock);
    /* one call: a fence recorded earlier that covers the free (likeliest complete), else the
     * stream itself if this thread may name it. Never a record: a fence recorded now helps only
     * a later asker, and its own thread publishes sooner (sp__fence_early) */
    if (!read_covering_fence(c, epoch) && may_touch_stream(c))
        (void)stream_idle_settles(c);
    bool done = atomic_load_explicit(&c->done_epoch, memory_order_relaxed) >= epoch;
    if (!done && !c->released)
        atomic_store_explicit(&c->fence_wanted, true, memory_order_relaxed);
    sp_mutex_unlock(&c->fence_lock);
    return done;
}

sp_idle sp__fence_early(sp_stream_cache *c)
{
    if (!atomic_load_explicit(&c->fence_wanted, memory_order_relaxed))
        return SP_IDLE_UNKNOWN; /* nobody wanted its memory: the hot path makes no CUDA call */
    sp_idle found = SP_IDLE_UNKNOWN;
    sp_mutex_lock(&c->fence_lock);
    atomic_store_explicit(&c->fence_wanted, false, memory_order_relaxed);
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    if (atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < now && may_touch_stream(c)) {
        found = stream_idle_settles(c) ? SP_IDLE_YES : SP_IDLE_NO;
        if (found == SP_IDLE_NO) /* busy: a fence right behind the frees */
            (void)covering_fence(c, now, true);
    }
    sp_mutex_unlock(&c->fence_lock);
    return found;
}

int sp__fence_tag_wait(sp_stream_cache *c, uint64_t epoch, cudaStream_t stream)
{
    if (sp__fence_tag_settled(c, epoch, false))
        return SP_OK;
    sp_mutex_lock(&c->fence_lock);
    sp_fence *f = covering_fence(c, epoch, true);
    int rc = f ? sp__cuda_stream_wait_event(stream, f->event) : SP_ERR_CUDA;
    sp_mutex_unlock(&c->fence_lock);
    if (f && rc != SP_OK)
        skipped(c);
    return rc;
}

int sp__fence_final(sp_stream_cache *c)
{
    sp_device *dev = c->pool->dev;
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    /* segments given back on the stream: the driver releases their pages only once a host
     * synchronize observed their frees (rule 13), which settled tags do not say, and which no
     * trim can make of the stream once it is released (and maybe destroyed) */
    /* sequentially consistent, after `released` was set: a give-back racing with the release
     * either is seen here or sees `released` (sp__fence_gave_back) */
    bool gave_back = atomic_load(&c->driver_frees);
    if (atomic_load_explicit(&c->done_epoch, memory_order_acquire) >= now && !gave_back)
        return SP_OK;
    sp_mutex_lock(&c->fence_lock);
    int rc = SP_OK;
    bool touch = sp__cache_may_touch(c); /* released just now: named one last time */
    if (atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < now) {
        sp_fence *f = NULL;
        rc = touch ? sp__fence_record(&dev->fences, c->key.stream, now, &f) : SP_ERR_CUDA;
        if (rc == SP_OK) {
            sp__usage_count(&c->pool->fig, SP_COUNT_fences_recorded, 1);
            f->next = c->fences;
            c->fences = f;
            c->fence_count++;
        }
    }
    /* behind the give-backs, for a trim to synchronize (sp__fence_observe_driver_frees); kept
     * out of `fences`, which a settle by query recycles */
    if (rc == SP_OK && gave_back && touch && !c->final_fence &&
        (rc = sp__fence_record(&dev->fences, c->key.stream, now, &c->final_fence)) == SP_OK)
        sp__usage_count(&c->pool->fig, SP_COUNT_fences_recorded, 1);
    if (rc != SP_OK && touch && (rc = sp__cuda_stream_sync(c->key.stream)) == SP_OK) {
        raise_done(c, now);
        atomic_store_explicit(&c->driver_frees, false, memory_order_release);
    }
    sp_mutex_unlock(&c->fence_lock);
    return rc;
}

void sp__fence_gave_back(sp_stream_cache *c, cudaStream_t on)
{
    atomic_store(&c->driver_frees, true);
    if (!atomic_load(&c->released))
        return;
    /* released meanwhile: its final fence may have been recorded before this free, and no trim
     * can synchronize the stream any more. This thread has just freed on it, so may name it:
     * a final fence behind the free (it covers every earlier one too, in stream order). */
    sp_device *dev = c->pool->dev;
    sp_mutex_lock(&c->fence_lock);
    sp_fence *f = NULL;
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    if (sp__fence_record(&dev->fences, on, now, &f) == SP_OK) {
        sp__usage_count(&c->pool->fig, SP_COUNT_fences_recorded, 1);
        if (c->final_fence)
            sp__fence_recycle(&dev->fences, c->final_fence);
        c->final_fence = f;
    } else {
        skipped(c);
    }
    sp_mutex_unlock(&c->fence_lock);
}

static void cache_drop_fences(sp_stream_cache *c)
{
    sp_mutex_lock(&c->fence_lock);
    while (c->fences) {
        sp_fence *f = c->fences;
        c->fences = f->next;
        sp__fence_recycle(&c->pool->dev->fences, f);
    }
    c->fence_count = 0;
    if (c->final_fence)
        sp__fence_recycle(&c->pool->dev->fences, c->final_fence);
    c->final_fence = NULL;
    sp_mutex_unlock(&c->fence_lock);
}

void sp__fence_drop_all(sp_pool *pool)
{
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool)
            cache_drop_fences(c);
}

int sp__fence_tag_sync(sp_stream_cache *c, uint64_t epoch)
{
    if (sp__fence_tag_settled(c, epoch, false))
        return SP_OK;
    int rc = SP_ERR_CUDA;
    sp_mutex_lock(&c->fence_lock);
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    if (may_touch_stream(c)) {
        /* a synchronize, not a query: only what the host has seen complete can be trimmed
         * (rule 13), and this stream may also hold frees of whole segments */
        rc = sp__cuda_stream_sync(c->key.stream);
        if (rc == SP_OK)
            raise_done(c, now);
    } else {
        sp_fence *f = covering_fence(c, epoch, false);
        if (f) {
            rc = sp__cuda_event_sync(f->event, relaxed(c));
            if (rc == SP_OK) {
                f->done = true;
                settle_through(c, f);
            }
        }
    }
    sp_mutex_unlock(&c->fence_lock);
    return rc;
}

int sp__fence_observe_driver_frees(sp_stream_cache *c)
{
    /* cleared first: a give-back racing with this one sets it again, and stays to be observed */
    if (!atomic_exchange_explicit(&c->driver_frees, false, memory_order_acq_rel))
        return SP_OK;
    sp_mutex_lock(&c->fence_lock);
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    int rc = SP_ERR_CUDA;
    if (may_touch_stream(c)) {
        rc = sp__cuda_stream_sync(c->key.stream);
    } else if (c->final_fence) { /* released: the fence recorded behind its give-backs */
        now = c->final_fence->epoch;
        if ((rc = sp__cuda_event_sync(c->final_fence->event, relaxed(c))) == SP_OK) {
            sp__fence_recycle(&c->pool->dev->fences, c->final_fence);
            c->final_fence = NULL;
        }
    }
    if (rc == SP_OK)
        raise_done(c, now);
    sp_mutex_unlock(&c->fence_lock);
    if (rc != SP_OK)
        atomic_store_explicit(&c->driver_frees, true, memory_order_release);
    return rc;
}

/* Settled by the oldest fence covering epoch, queried if need be; no other CUDA call. *fenced
 * (if not NULL) says whether there was one. */
static bool settled_by_fence(sp_stream_cache *c, uint64_t epoch, bool *fenced)
{
    sp_mutex_lock(&c->fence_lock);
    bool had = read_covering_fence(c, epoch);
    if (fenced)
        *fenced = had;
    bool done = atomic_load_explicit(&c->done_epoch, memory_order_relaxed) >= epoch;
    sp_mutex_unlock(&c->fence_lock);
    return done;
}

bool sp__fence_tag_settled_within(sp_ask_budget *ab, sp_stream_cache *c, uint64_t epoch)
{
    if (sp__fence_tag_settled(c, epoch, false))
        return true;
    bool released = atomic_load_explicit(&c->released, memory_order_acquire);
    int n = ab->asks + ab->released_asks;
    for (int i = 0; i < n; i++)
        if (ab->asked[i] == c)
            return false; /* once per stream and miss */
    if (released) {
        /* no owner will publish: its final fence covers every free it made, one event query,
         * within a budget of its own (a live stream's ask must not leave a released neighbour
         * of the range it asked about pending, nor the other way round) */
        if (ab->released_asks >= SP_STEAL_ASKS)
            return false;
        ab->asked[n] = c;
        ab->released_asks++;
        return settled_by_fence(c, epoch, NULL);
    }
    /* one call per miss, about the candidate that would serve it best (the heap and the bins
     * ask about that one alone): a covering fence recorded earlier, else the stream. What is
     * still pending, and every further candidate, is marked: its own thread learns what its
     * stream completed at its next step, once for every miss that wants its memory.
     * sp-bench serve (4-64 streams) and replay, the curve explored: no call below the pool's
     * high-water mark made 4.5-4.7 calls a request but let the serving replay hold 1.26x what
     * it asked for (1.10 with an ask); one ask per miss makes 5.5-6.4 calls at the replays'
     * memory of before; two 6.9-8.0; up to eight with fences behind frees (before) 14-24 */
    if (ab->asks >= SP_STEAL_ASKS) {
        atomic_store_explicit(&c->fence_wanted, true, memory_order_relaxed);
        return false;
    }
    ab->asked[n] = c;
    ab->asks++;
    return sp__fence_tag_settled(c, epoch, true); /* marks c if not */
}

void sp__fence_offer(sp_stream_cache *c)
{
    atomic_store_explicit(&c->fence_wanted, false, memory_order_relaxed);
    sp_mutex_lock(&c->fence_lock);
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    sp_fence *f = c->fences; /* the newest */
    bool covered = atomic_load_explicit(&c->done_epoch, memory_order_relaxed) >= now ||
                   (f && f->epoch >= now);
    /* a new fence for each free, never a move of one already recorded: an asker's fence (or an
     * earlier free's) completes as soon as the stream passes it, and a later record would hide
     * that behind newer work. Only at the cap on fences does the newest move. */
    if (!covered && !covering_fence(c, now, true) && f && !f->done && may_touch_stream(c)) {
        if (sp__cuda_event_record(f->event, c->key.stream) == SP_OK) {
            f->epoch = now;
            sp__usage_count(&c->pool->fig, SP_COUNT_fences_recorded, 1);
        } else {
            skipped(c);
        }
    }
    sp_mutex_unlock(&c->fence_lock);
}

void sp__fence_settle_synchronized(sp_stream_cache *c)
{
    sp_mutex_lock(&c->fence_lock);
    raise_done(c, atomic_load_explicit(&c->free_epoch, memory_order_acquire));
    prune_done(c);
    sp_mutex_unlock(&c->fence_lock);
}

bool sp__fence_frees(sp_stream_cache *c)
{
    sp_mutex_lock(&c->fence_lock);
    uint64_t now = atomic_load_explicit(&c->free_epoch, memory_order_acquire);
    sp_fence *newest = c->fences;
    /* no fence covers `now` (the newest is older): covering_fence records one, if it may */
    bool wanted = atomic_exchange_explicit(&c->fence_wanted, false, memory_order_relaxed);
    bool recorded = wanted && atomic_load_explicit(&c->done_epoch, memory_order_relaxed) < now &&
                    !(newest && newest->epoch >= now) && may_touch_stream(c) &&
                    covering_fence(c, now, true) != NULL;
    sp_mutex_unlock(&c->fence_lock);
    return recorded;
}
