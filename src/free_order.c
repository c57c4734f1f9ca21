/* check_free_order:1, the debug check of the cross-stream free contract (streampool.h, sp_free):
 * a block freed on another stream than its allocation's must be freed in an order that puts the
 * free after the allocating stream's work, as CUDA requires of cudaFreeAsync's callers. Without
 * that order streampool may hand the block to the freeing stream's next allocation, or give it
 * back with cudaFreeAsync on that stream, while the allocating stream has not got to the
 * allocation yet: a device fault (cudaErrorIllegalAddress, sticky) or corrupted data, far from
 * the free that caused it. With the check on, such a free fails at once instead.
 *
 * What it can see: each allocation gets a mark, an event recorded on its stream as sp_alloc
 * returns it. A free on another stream whose mark has not completed while the freeing stream has
 * no work queued cannot be ordered after the allocation (nothing on the freeing stream waits for
 * anything): SP_ERR_UNORDERED_FREE, the block still live. A freeing stream with work queued may
 * be waiting for the allocating stream (cudaStreamWaitEvent), which CUDA gives no way to ask
 * about: that free passes. So does one ordered after the allocation but not after a later use
 * of the block on the allocating stream (the mark is the allocation's). */
#include <sched.h>
#include <stdlib.h>

#include "free_order.h"
#include "config.h"
#include "cuda.h"
#include "fence.h"
#include "status.h"

#define BUCKETS 1024 /* live marks are chained per bucket: a debug mode, not a hot path */

struct sp_free_mark {
    void *ptr;
    sp_stream_key key;         /* the allocating stream */
    sp_fence *fence;           /* recorded there as sp_alloc returned ptr, from the device's
                                * fence pool (fence.c), which keeps its event for reuse */
    struct sp_free_mark *next;
};

/* Where a stream's latest free stands in its order: an event recorded there by each checked
 * free, so that an end with SP_REQUEST_SYNCHRONIZED can tell a free still pending on the
 * request's stream (made after the server's synchronize, by any thread) from frees that are
 * complete, as the hint promises. One per stream the check has seen, kept until the runtime's
 * destroy. */
typedef struct free_point {
    sp_stream_key key;
    cudaEvent_t event;
    struct free_point *next;
} free_point;

struct sp_free_order {
    sp_mutex lock;             /* the buckets and the points; no CUDA call under it */
    int device;
    sp_fence_pool *fences;     /* the device's: the marks' events come from it and go back */
    sp_free_mark *buckets[BUCKETS];
    free_point *points[BUCKETS];
};

sp_free_order *sp__free_order_new(int device, sp_fence_pool *fences)
{
    sp_free_order *fo = calloc(1, sizeof *fo);
    if (fo && sp_mutex_init(&fo->lock, SP_RANK_LEAF, "free_order->lock") != 0) {
        free(fo);
        return NULL;
    }
    if (fo) {
        fo->device = device;
        fo->fences = fences;
    }
    return fo;
}

/* A mark done with: its fence back to the fence pool (no lock of ours held: the pool's spin
 * lock ranks below free_order's), its memory freed. */
static void discard(sp_free_order *fo, sp_free_mark *m)
{
    if (!m)
        return;
    sp__fence_recycle(fo->fences, m->fence);
    free(m);
}

static void marks_free(sp_free_order *fo, sp_free_mark *m)
{
    for (sp_free_mark *next; m; m = next) {
        next = m->next;
        discard(fo, m);
    }
}

void sp__free_order_destroy(sp_free_order *fo)
{
    if (!fo)
        return;
    for (size_t i = 0; i < BUCKETS; i++) {
        marks_free(fo, fo->buckets[i]);
        for (free_point *fp = fo->points[i], *next; fp; fp = next) {
            next = fp->next;
            (void)sp__cuda_event_destroy(fp->event);
            free(fp);
        }
    }
    sp_mutex_destroy(&fo->lock);
    free(fo);
}

static sp_free_mark **bucket_of(sp_free_order *fo, const void *ptr)
{
    uint64_t x = (uint64_t)(uintptr_t)ptr >> 8; /* blocks are 256-byte aligned */
    x *= 0x9E3779B97F4A7C15ull;
    return &fo->buckets[(x >> 32) % BUCKETS];
}

/* Takes ptr's mark out of its bucket (fo->lock held); NULL if it has none. */
static sp_free_mark *take_locked(sp_free_order *fo, const void *ptr)
{
    sp_mutex_assert_owner(&fo->lock);
    for (sp_free_mark **l = bucket_of(fo, ptr); *l; l = &(*l)->next)
        if ((*l)->ptr == ptr) {
            sp_free_mark *m = *l;
            *l = m->next;
            return m;
        }
    return NULL;
}

/* Puts m in its bucket (fo->lock held); returns the mark ptr still had (a block freed some way
 * that did not drop it), for the caller to discard once the lock is dropped, or NULL. */
static sp_free_mark *insert_locked(sp_free_order *fo, sp_free_mark *m)
{
    sp_mutex_assert_owner(&fo->lock);
    sp_free_mark *old = take_locked(fo, m->ptr);
    sp_free_mark **b = bucket_of(fo, m->ptr);
    m->next = *b;
    *b = m;
    return old;
}

/* Hands m back to the marks under the lock; discards what it replaced. */
static void insert(sp_free_order *fo, sp_free_mark *m)
{
    sp_mutex_lock(&fo->lock);
    sp_free_mark *old = insert_locked(fo, m);
    sp_mutex_unlock(&fo->lock);
    discard(fo, old);
}

void sp__free_order_note(sp_device *dev, void *ptr, cudaStream_t stream)
{
    sp_free_order *fo = dev->free_order;
    /* an event recorded on a capturing stream would join the capture (rule 25) */
    if (!ptr || sp__capture_possible(dev))
        return;
    sp_free_mark *m = malloc(sizeof *m);
    if (!m)
        return;
    if (sp__fence_record(fo->fences, stream, 0, &m->fence) != SP_OK) {
        free(m);
        return;
    }
    m->ptr = ptr;
    m->key = sp__cache_key(stream);
    insert(fo, m);
}

static bool is_legacy(cudaStream_t s)
{
    return s == NULL || s == cudaStreamLegacy;
}

/* Is a free of m's block on `stream` (key) certainly not ordered after the allocation? */
static bool unordered(sp_device *dev, const sp_free_mark *m, cudaStream_t stream,
                      sp_stream_key key)
{
    if (m->key.stream == key.stream && m->key.thread == key.thread)
        return false; /* the allocating stream itself: its own order */
    /* the legacy stream orders itself with blocking streams, which streampool cannot tell
     * from non-blocking ones; and no stream is asked about while a capture may be under way */
    if (is_legacy(m->key.stream) || is_legacy(stream) || sp__capture_possible(dev))
        return false;
    bool done = false, idle = false;
    if (sp__fence_query(m->fence, &done) != SP_OK || done)
        return false; /* the common case: the allocation is long done */
    if (sp__cuda_stream_query(stream, &idle) != SP_OK || !idle)
        return false;
    /* asked again after the freeing stream was seen idle: still pending, it was then too */
    return sp__fence_query(m->fence, &done) == SP_OK && !done;
}

/* ---- where each stream's latest free stands ---- */

static free_point **point_bucket(sp_free_order *fo, sp_stream_key key)
{
    uint64_t x = ((uint64_t)(uintptr_t)key.stream >> 4) ^ key.thread;
    x *= 0x9E3779B97F4A7C15ull;
    return &fo->points[(x >> 32) % BUCKETS];
}

static free_point *point_find_locked(sp_free_order *fo, sp_stream_key key)
{
    sp_mutex_assert_owner(&fo->lock);
    for (free_point *fp = *point_bucket(fo, key); fp; fp = fp->next)
        if (fp->key.stream == key.stream && fp->key.thread == key.thread)
            return fp;
    return NULL;
}

/* Records a free's place on `stream` (best effort: without an event, that stream's ends are not
 * checked). */
static void note_free_point(sp_device *dev, cudaStream_t stream)
{
    sp_free_order *fo = dev->free_order;
    sp_stream_key key = sp__cache_key(stream);
    sp_mutex_lock(&fo->lock);
    free_point *fp = point_find_locked(fo, key);
    sp_mutex_unlock(&fo->lock);
    if (!fp) { /* the stream's first checked free: its event, made outside the lock */
        free_point *made = calloc(1, sizeof *made);
        if (!made)
            return;
        if (sp__cuda_event_create(fo->device, &made->event) != SP_OK) {
            free(made);
            return;
        }
        made->key = key;
        sp_mutex_lock(&fo->lock);
        if (!(fp = point_find_locked(fo, key))) { /* another thread may have made one */
            free_point **b = point_bucket(fo, key);
            made->next = *b;
            *b = fp = made;
            made = NULL;
        }
        sp_mutex_unlock(&fo->lock);
        if (made) {
            (void)sp__cuda_event_destroy(made->event);
            free(made);
        }
    }
    (void)sp__cuda_event_record(fp->event, stream);
}

/* How often a pending free point is asked again before the end calls it pending: on a GPU an
 * event just recorded on an idle stream completes a few microseconds later, which is no
 * breach; a free behind the stream's real work stays pending far longer. */
#define POINT_POLLS 256

bool sp__free_order_settled(sp_device *dev, cudaStream_t stream, int *rc)
{
    sp_free_order *fo = dev->free_order;
    if (!fo || sp__capture_possible(dev))
        return true;
    sp_mutex_lock(&fo->lock);
    free_point *fp = point_find_locked(fo, sp__cache_key(stream));
    sp_mutex_unlock(&fo->lock);
    bool done = true, idle = true;
    for (int i = 0; fp && i < POINT_POLLS; i++) {
        if (sp__cuda_event_query(fp->event, false, &done) != SP_OK || done)
            return true;
        if (sp__cuda_stream_query(stream, &idle) != SP_OK || idle)
            return true; /* everything on the stream is complete, its frees with it */
        sched_yield();
    }
    if (!fp)
        return true;
    int status = sp__config_errorf(SP_ERR_UNORDERED_FREE,
                            "sp_request_end(SP_REQUEST_SYNCHRONIZED) on stream %p: a free on "
                            "that stream is still pending (made after its last synchronize, by "
                            "this thread or another); its frees were fenced as without the hint",
                            (void *)stream);
    if (*rc == SP_OK)
        *rc = status;
    return false;
}

int sp__free_order_check(sp_device *dev, void *ptr, cudaStream_t stream, sp_free_mark **taken)
{
    sp_free_order *fo = dev->free_order;
    *taken = NULL;
    sp_mutex_lock(&fo->lock);
    sp_free_mark *m = take_locked(fo, ptr);
    sp_mutex_unlock(&fo->lock);
    if (!m || !unordered(dev, m, stream, sp__cache_key(stream))) {
        /* the free goes ahead: its place on the stream, for an end with the hint (no event is
         * recorded on a capturing stream: it would join the capture) */
        if (!sp__capture_possible(dev))
            note_free_point(dev, stream);
        *taken = m;
        return SP_OK;
    }
    cudaStream_t allocating = m->key.stream;
    sp__free_order_put_back(dev, m);
    /* (sp_config_error's 255 bytes) */
    return sp__config_errorf(SP_ERR_UNORDERED_FREE,
                      "sp_free(%p) on stream %p is not ordered after stream %p, which has not "
                      "reached the allocation: record an event on %p after the last use, "
                      "cudaStreamWaitEvent(%p, event), then sp_free",
                      ptr, (void *)stream, (void *)allocating, (void *)allocating, (void *)stream);
}

void sp__free_order_put_back(sp_device *dev, sp_free_mark *m)
{
    if (m)
        insert(dev->free_order, m);
}

void sp__free_order_drop(sp_device *dev, sp_free_mark *m)
{
    discard(dev->free_order, m);
}
