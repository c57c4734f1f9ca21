/* A named pool: its cudaMemPool, its stream caches and what moves blocks between them.
 * sp_alloc and sp_free are the hot path: one cache lock and a few atomic counters, no driver
 * call. Everything else (stealing behind a fence, the driver, releasing memory) is the slow
 * path below them. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static atomic_uint_least64_t next_pool_id = 1;

/* ---- usage counters (pool and runtime) ---- */

/* current and peak; totals of the hot path are kept per cache, not here */
static void bytes_add(sp_bytes_counter *c, uint64_t n)
{
    uint64_t now = atomic_fetch_add_explicit(&c->current, n, memory_order_relaxed) + n;
    uint64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&c->peak, &peak, now, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* Applies signed byte changes to one set of figures, keeping peaks: requested and active when
 * they grow, cached (held - active) when active shrinks. */
static void usage_apply(sp_usage *u, int64_t requested, int64_t active)
{
    if (requested > 0)
        bytes_add(&u->requested, (uint64_t)requested);
    else if (requested < 0)
        atomic_fetch_sub_explicit(&u->requested.current, (uint64_t)-requested, memory_order_relaxed);
    if (active > 0) {
        bytes_add(&u->active, (uint64_t)active);
    } else if (active < 0) {
        uint64_t now = atomic_fetch_sub_explicit(&u->active.current, (uint64_t)-active,
                                                 memory_order_relaxed) - (uint64_t)-active;
        uint64_t cached = atomic_load_explicit(&u->held.current, memory_order_relaxed) - now;
        uint64_t peak = atomic_load_explicit(&u->cached_peak, memory_order_relaxed);
        while (cached > peak &&
               !atomic_compare_exchange_weak_explicit(&u->cached_peak, &peak, cached,
                                                      memory_order_relaxed, memory_order_relaxed))
            ;
    }
}

static void account(sp_pool *pool, int64_t requested, int64_t active)
{
    usage_apply(&pool->usage, requested, active);
    usage_apply(&pool->rt->usage, requested, active);
}

void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c)
{
    if (c->requested_delta || c->active_delta) {
        account(pool, c->requested_delta, c->active_delta);
        c->requested_delta = c->active_delta = 0;
    }
}

static bool delta_over(const sp_stream_cache *c, uint64_t limit)
{
    uint64_t r = (uint64_t)(c->requested_delta < 0 ? -c->requested_delta : c->requested_delta);
    uint64_t a = (uint64_t)(c->active_delta < 0 ? -c->active_delta : c->active_delta);
    return r > limit || a > limit;
}

uint64_t sp__pool_active_bytes(sp_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool) {
            sp_spin_lock(&c->lock);
            sp__cache_flush_locked(pool, c);
            sp_spin_unlock(&c->lock);
        }
    pthread_mutex_unlock(&pool->lock);
    return atomic_load(&pool->usage.active.current);
}

static void count(sp_pool *pool, int counter)
{
    sp__pool_count(pool, counter, 1);
}

static void held_change(sp_usage *u, int64_t delta)
{
    if (delta > 0) {
        bytes_add(&u->held, (uint64_t)delta);
        atomic_fetch_add_explicit(&u->held.total, (uint64_t)delta, memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&u->held.current, (uint64_t)-delta, memory_order_relaxed);
    }
}

static void held_add(sp_pool *pool, int64_t delta)
{
    held_change(&pool->usage, delta);
    held_change(&pool->rt->usage, delta);
}

/* Claims `size` bytes of the pool's limit before the driver is asked, so that concurrent
 * allocations can never together pass it. */
static bool held_claim(sp_pool *pool, uint64_t size)
{
    uint64_t limit = pool->cfg.limit;
    uint64_t cur = atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed);
    do {
        if (limit && (size > limit || cur > limit - size))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&pool->usage.held.current, &cur, cur + size,
                                                    memory_order_relaxed, memory_order_relaxed));
    uint64_t now = cur + size, peak = atomic_load_explicit(&pool->usage.held.peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&pool->usage.held.peak, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    atomic_fetch_add_explicit(&pool->usage.held.total, size, memory_order_relaxed);
    held_change(&pool->rt->usage, (int64_t)size);
    return true;
}

void sp__pool_count(sp_pool *pool, int counter, uint64_t n)
{
    atomic_fetch_add_explicit(&pool->count[counter], n, memory_order_relaxed);
}

/* ---- pool lifetime ---- */

/* The threshold the cudaMemPool gets: never below the reservation (the pool keeps it), never
 * above the limit (reserved memory must not stay above it past a synchronize). */
static uint64_t effective_threshold(const sp_pool_config *cfg)
{
    uint64_t t = cfg->release_threshold;
    if (t < cfg->reserve)
        t = cfg->reserve;
    if (cfg->limit && t > cfg->limit)
        t = cfg->limit;
    return t;
}

/* The pool's configuration: the caller's, then the runtime's alloc_conf, then SP_ALLOC_CONF. */
static int merge_config(const sp_runtime *rt, const char *name, const sp_pool_config *cfg,
                        sp_pool_config *out)
{
    sp_pool_config merged = SP_POOL_CONFIG_INIT;
    if (cfg) {
        /* callers built against an older, shorter struct get defaults for the fields they lack */
        if (cfg->size < offsetof(sp_pool_config, cross_stream) + sizeof cfg->cross_stream)
            return SP_ERR_INVALID;
        memcpy(&merged, cfg, cfg->size < sizeof merged ? cfg->size : sizeof merged);
        merged.size = sizeof merged;
    }
    int rc = sp__config_check(&merged, NULL, 0);
    if (rc == SP_OK)
        rc = sp_config_apply(&merged, name, rt->alloc_conf, NULL, 0);
    if (rc == SP_OK)
        rc = sp_config_apply(&merged, name, rt->env_conf, NULL, 0);
    if (rc == SP_OK)
        *out = merged;
    return rc;
}

/* Obtains the reservation from the device once, and frees it at once into the cudaMemPool,
 * which keeps it (threshold >= reserve) for this pool alone. The synchronize makes the free
 * known complete, so any stream of the pool may reuse it (CUDA-SEMANTICS 11c). */
static int take_reservation(sp_pool *pool)
{
    void *p;
    sp_runtime *rt = pool->rt;
    int rc = sp__cuda_malloc(pool->cuda_pool, &p, pool->cfg.reserve, rt->service);
    if (rc == SP_OK)
        rc = sp__cuda_free(p, rt->service);
    if (rc == SP_OK)
        rc = sp__cuda_stream_sync(rt->service);
    return rc;
}

int sp__pool_new(sp_runtime *rt, const char *name, cudaMemPool_t adopt, const sp_pool_config *cfg,
                 sp_pool **out)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > SP_POOL_NAME_MAX)
        return SP_ERR_INVALID;
    sp_pool_config merged;
    int rc = merge_config(rt, name, cfg, &merged);
    if (rc != SP_OK)
        return rc;
    sp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return SP_ERR_NO_HOST_MEMORY;
    memcpy(pool->name, name, len + 1);
    pool->rt = rt;
    pool->cfg = merged;
    atomic_init(&pool->cache_limit, merged.cache_limit);
    pool->stats_flush = rt->cfg.stats_flush_bytes;
    pool->id = atomic_fetch_add(&next_pool_id, 1);
    pool->shared.shared = true;
    pool->shared.pool = pool;
    if (adopt) {
        uint64_t reserved, used;
        pool->cuda_pool = adopt;
        rc = sp__cuda_pool_usage(adopt, &reserved, &used); /* a valid pool handle? */
        if (rc == SP_OK && (cfg || merged.reserve || merged.limit))
            rc = sp__cuda_pool_set_threshold(adopt, effective_threshold(&merged));
    } else {
        rc = sp__cuda_pool_create(rt->device, merged.limit, &pool->cuda_pool);
        pool->owns_cuda_pool = rc == SP_OK;
        if (rc == SP_OK)
            rc = sp__cuda_pool_set_threshold(pool->cuda_pool, effective_threshold(&merged));
    }
    if (rc == SP_OK && merged.reserve)
        rc = take_reservation(pool);
    if (rc == SP_OK && pthread_mutex_init(&pool->lock, NULL) != 0)
        rc = SP_ERR_NO_HOST_MEMORY;
    if (rc != SP_OK) {
        if (pool->owns_cuda_pool)
            (void)sp__cuda_pool_destroy(pool->cuda_pool);
        free(pool);
        return rc;
    }
    *out = pool;
    return SP_OK;
}

/* ---- giving cached blocks back to the driver ---- */

typedef struct {
    cudaStream_t *streams;
    size_t len, cap;
} stream_set;

static void stream_set_add(stream_set *set, cudaStream_t s)
{
    for (size_t i = 0; i < set->len; i++)
        if (set->streams[i] == s)
            return;
    if (set->len == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 8;
        cudaStream_t *grown = realloc(set->streams, cap * sizeof *grown);
        if (!grown)
            return; /* that stream is then not synchronized: memory is released later */
        set->streams = grown;
        set->cap = cap;
    }
    set->streams[set->len++] = s;
}

/* Gives one cached block back to the driver in stream order on `stream`. */
static void block_release(sp_pool *pool, sp_block *b, cudaStream_t stream)
{
    sp__ptrmap_remove(&pool->rt->ptrmap, b->ptr);
    if (sp__cuda_free(b->ptr, stream) == SP_OK)
        count(pool, SP_COUNT_driver_frees);
    held_add(pool, -(int64_t)b->size);
    free(b);
}

static bool this_threads_stream(sp_stream_key key)
{
    return key.thread == 0 || key.thread == sp__stream_key(cudaStreamPerThread).thread;
}

/* Releases cached blocks of one cache until the pool holds at most `keep` bytes. A block of a
 * released stream is freed on the runtime's service stream after waiting for its fence. Another
 * thread's cudaStreamPerThread cannot be named from here: its blocks are skipped unless
 * `device_synced` says the whole device is idle, when the service stream may free them. */
static void cache_release(sp_pool *pool, sp_stream_cache *c, uint64_t keep, stream_set *synced,
                          bool device_synced)
{
    sp_runtime *rt = pool->rt;
    bool foreign = !c->shared && !this_threads_stream(c->key);
    if (foreign && !device_synced)
        return;
    sp_spin_lock(&c->lock);
    for (uint32_t cls = SP_CLASS_COUNT; cls-- > 0;) {
        sp_block *b;
        while (atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed) > keep &&
               (b = sp__bin_pop_newest(&c->bins[cls]))) {
            cudaStream_t stream = foreign ? rt->service : c->key.stream;
            if (c->shared) {
                stream = rt->service;
                if (b->fence)
                    (void)sp__cuda_stream_wait_event(rt->service, b->fence->event);
                if (b->fence && --b->fence->refs == 0)
                    sp__fence_recycle(&rt->fences, b->fence);
            }
            block_release(pool, b, stream);
            if (synced)
                stream_set_add(synced, stream);
        }
    }
    sp_spin_unlock(&c->lock);
}

/* Releases cached blocks, largest first, until the pool holds at most `keep` bytes from the
 * driver; with `sync`, synchronizes the streams of those frees so the driver can reuse or
 * release the memory at once (CUDA-SEMANTICS rules 11c and 13). */
static void pool_release_cached(sp_pool *pool, uint64_t keep, bool sync)
{
    stream_set synced = {0};
    stream_set *set = sync ? &synced : NULL;
    pthread_mutex_lock(&pool->lock);
    cache_release(pool, &pool->shared, keep, set, false);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        cache_release(pool, c, keep, set, false);
    pthread_mutex_unlock(&pool->lock);
    for (size_t i = 0; i < synced.len; i++)
        (void)sp__cuda_stream_sync(synced.streams[i]);
    free(synced.streams);
}

/* Cached blocks go back to the driver until the pool holds at most `keep` bytes, their frees
 * are synchronized, and the cudaMemPool is trimmed to what is still held (never below the
 * reservation), so that the memory reaches the device: a pool that keeps its memory (threshold
 * UINT64_MAX) would otherwise hold it in chunks that a larger request cannot use. */
uint64_t sp__pool_give_back(sp_pool *pool, uint64_t keep)
{
    uint64_t held_before = atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed);
    pool_release_cached(pool, keep, true);
    (void)sp__cuda_stream_sync(pool->rt->service);
    uint64_t held = atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed);
    uint64_t floor = held > keep ? held : keep;
    if (floor < pool->cfg.reserve)
        floor = pool->cfg.reserve;
    uint64_t reserved_before = 0, reserved_after = 0, used;
    (void)sp__cuda_pool_usage(pool->cuda_pool, &reserved_before, &used);
    (void)sp__cuda_pool_trim(pool->cuda_pool, floor);
    (void)sp__cuda_pool_usage(pool->cuda_pool, &reserved_after, &used);
    if (held_before > held)
        sp__pool_count(pool, SP_COUNT_reclaimed_bytes, held_before - held);
    return reserved_before > reserved_after ? reserved_before - reserved_after : 0;
}

static void cache_drop_fences(sp_runtime *rt, sp_stream_cache *c)
{
    while (c->fences) {
        sp_fence *f = c->fences;
        c->fences = f->next;
        sp__fence_recycle(&rt->fences, f);
    }
    c->fence_count = 0;
}

static bool cache_empty(const sp_stream_cache *c)
{
    for (uint32_t cls = 0; cls < SP_CLASS_COUNT; cls++)
        if (c->bins[cls].head)
            return false;
    return true;
}

void sp__pool_free(sp_pool *pool)
{
    pool_release_cached(pool, 0, false);
    bool foreign_left = false;
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        foreign_left |= !cache_empty(c);
    if (foreign_left && sp__cuda_device_sync(pool->rt->device) == SP_OK)
        for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
            cache_release(pool, c, 0, NULL, true);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        cache_drop_fences(pool->rt, c);
    sp__cache_table_free(pool);
    if (pool->owns_cuda_pool)
        (void)sp__cuda_pool_destroy(pool->cuda_pool); /* rule 7: returns at once */
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

int sp__pool_orphan_cache(sp_pool *pool, sp_stream_cache *c)
{
    sp_runtime *rt = pool->rt;
    sp_spin_lock(&c->lock);
    c->released = true;
    sp__cache_flush_locked(pool, c);
    bool any = !cache_empty(c);
    sp_fence *final = NULL;
    int rc = SP_OK;
    if (any) {
        rc = sp__fence_record(&rt->fences, c->key.stream, c->free_epoch, &final);
        if (rc != SP_OK) {
            /* no fence on this stream (already destroyed?): hand its blocks back to the driver
             * on the stream itself, which is the best ordering left */
            sp_spin_unlock(&c->lock);
            cache_release(pool, c, 0, NULL, false);
            sp_spin_lock(&c->lock);
        } else {
            count(pool, SP_COUNT_fences_recorded);
        }
    }
    cache_drop_fences(rt, c);
    sp_spin_unlock(&c->lock);
    if (!final)
        return rc;
    sp_spin_lock(&pool->shared.lock);
    sp_spin_lock(&c->lock);
    for (uint32_t cls = 0; cls < SP_CLASS_COUNT; cls++) {
        sp_block *b;
        while ((b = sp__bin_pop_newest(&c->bins[cls]))) {
            b->fence = final;
            final->refs++;
            sp__bin_push(&pool->shared.bins[cls], b);
        }
    }
    sp_spin_unlock(&c->lock);
    sp_spin_unlock(&pool->shared.lock);
    return SP_OK;
}

/* ---- the slow path of sp_alloc ---- */

typedef enum { STEAL_COMPLETED, STEAL_WAIT } steal_mode;

/* Is `b`, cached in `c`, covered by a completed fence? Without `may_ask` only what is already
 * known is used (no CUDA call); with it, the stream is queried and a fence found or recorded (one
 * per epoch range, never one per free), and *asked says so. *cover gets a pending fence. */
static int block_fenced(sp_runtime *rt, sp_pool *pool, sp_stream_cache *c, sp_block *b,
                        bool may_ask, bool *asked, bool *done, sp_fence **cover)
{
    *cover = NULL;
    *done = false;
    if (c->shared) {
        *cover = b->fence;
        *done = !b->fence || b->fence->done;
        if (*done || !may_ask)
            return SP_OK;
        *asked = true;
        return sp__fence_done(b->fence, done);
    }
    if (c->done_epoch >= b->epoch) {
        *done = true;
        return SP_OK;
    }
    sp_fence *f = NULL;
    for (sp_fence *x = c->fences; x && x->epoch >= b->epoch; x = x->next)
        f = x; /* the oldest fence that still covers b: likeliest complete */
    *cover = f;
    if (!may_ask)
        return SP_OK;
    *asked = true;
    if (!f && this_threads_stream(c->key)) {
        /* an idle stream has completed every free it holds: no event needed */
        bool idle = false;
        int rc = sp__cuda_stream_query(c->key.stream, &idle);
        if (rc != SP_OK)
            return rc;
        if (idle) {
            c->done_epoch = c->free_epoch;
            cache_drop_fences(rt, c);
            *done = true;
            return SP_OK;
        }
    }
    if (!f) {
        if (c->fence_count >= 8 || !this_threads_stream(c->key))
            return SP_OK; /* bounded: no new fence; the block stays for later */
        int rc = sp__fence_record(&rt->fences, c->key.stream, c->free_epoch, &f);
        if (rc != SP_OK)
            return rc;
        count(pool, SP_COUNT_fences_recorded);
        f->next = c->fences;
        c->fences = f;
        c->fence_count++;
    }
    *cover = f;
    int rc = sp__fence_done(f, done);
    if (rc == SP_OK && *done) {
        /* f and every older fence of this stream are complete: stream order */
        c->done_epoch = f->epoch;
        sp_fence **p = &c->fences;
        while (*p && *p != f)
            p = &(*p)->next;
        *p = NULL;
        while (f) {
            sp_fence *next = f->next;
            sp__fence_recycle(&rt->fences, f);
            c->fence_count--;
            f = next;
        }
    }
    return rc;
}

/* Takes a block of class `cls` that another stream cached, behind a completed fence or (mode
 * STEAL_WAIT) by making `stream` wait on a pending one. */
static int steal_from(sp_pool *pool, sp_stream_cache *c, sp_stream_key me, uint32_t cls,
                      steal_mode mode, bool may_ask, bool *asked, sp_block **out)
{
    sp_runtime *rt = pool->rt;
    int rc = SP_OK;
    sp_spin_lock(&c->lock);
    /* the class asked for, else a block up to SP_FIT_CLASSES larger (as on the stream itself) */
    uint32_t from = cls;
    sp_block *b = c->bins[cls].tail;
    for (uint32_t up = cls + 1; !b && up <= cls + SP_FIT_CLASSES && up < SP_CLASS_COUNT; up++)
        if ((b = c->bins[up].tail))
            from = up;
    if (b && !c->released) {
        bool done;
        sp_fence *cover;
        rc = block_fenced(rt, pool, c, b, may_ask, asked, &done, &cover);
        if (rc == SP_OK && !done && mode == STEAL_WAIT && cover) {
            rc = sp__cuda_stream_wait_event(me.stream, cover->event);
            if (rc == SP_OK)
                count(pool, SP_COUNT_cross_stream_waits);
            done = rc == SP_OK;
        } else if (rc == SP_OK && done) {
            count(pool, SP_COUNT_cross_stream_reuses);
        }
        if (rc == SP_OK && done) {
            sp__bin_remove(&c->bins[from], b);
            if (c->shared && b->fence && --b->fence->refs == 0)
                sp__fence_recycle(&rt->fences, b->fence);
            b->fence = NULL;
            *out = b;
        }
    }
    sp_spin_unlock(&c->lock);
    return rc;
}

/* Looks for another stream's block in two passes over at most SP_STEAL_PROBES caches: first
 * only blocks already known complete (no CUDA call at all), then asking the driver about at most
 * SP_STEAL_ASKS caches, so that a miss among many busy streams stays cheap. */
static int steal(sp_pool *pool, sp_stream_key me, uint32_t cls, steal_mode mode, sp_block **out)
{
    int rc = SP_OK, asks = 0;
    for (int pass = 0; pass < 2 && rc == SP_OK && !*out; pass++) {
        bool may_ask = pass == 1;
        bool asked = false;
        rc = steal_from(pool, &pool->shared, me, cls, mode, may_ask, &asked, out);
        asks += asked;
        int probes = 0;
        pthread_mutex_lock(&pool->lock);
        for (sp_stream_cache *c = pool->caches;
             c && !*out && rc == SP_OK && probes < SP_STEAL_PROBES && asks < SP_STEAL_ASKS;
             c = c->next_in_pool) {
            if (c->key.stream == me.stream && c->key.thread == me.thread)
                continue;
            asked = false;
            rc = steal_from(pool, c, me, cls, mode, may_ask, &asked, out);
            asks += asked;
            probes++;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    return rc;
}

/* A new block from the driver; SP_ERR_LIMIT (without asking it) if it would pass the limit. */
static int driver_alloc(sp_pool *pool, cudaStream_t stream, uint32_t cls, int state,
                        sp_block **out)
{
    size_t size = sp__class_size(cls);
    if (!held_claim(pool, size))
        return SP_ERR_LIMIT;
    sp_block *b = calloc(1, sizeof *b);
    int rc = b ? sp__cuda_malloc(pool->cuda_pool, &b->ptr, size, stream) : SP_ERR_NO_HOST_MEMORY;
    if (rc == SP_OK) {
        b->size = size;
        b->cls = cls;
        b->pool = pool;
        atomic_init(&b->state, state);
        if ((rc = sp__ptrmap_insert(&pool->rt->ptrmap, b)) != SP_OK)
            (void)sp__cuda_free(b->ptr, stream);
    }
    if (rc != SP_OK) {
        free(b);
        held_add(pool, -(int64_t)size);
        return rc;
    }
    count(pool, SP_COUNT_driver_allocs);
    *out = b;
    return SP_OK;
}

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    uint32_t cls;
    int state;
    sp_block **out;
} retry_ctx;

static int retry_driver(void *arg)
{
    retry_ctx *r = arg;
    count(r->pool, SP_COUNT_oom_retries);
    return driver_alloc(r->pool, r->stream, r->cls, r->state, r->out);
}

/* New memory from the driver, and what to do when there is none:
 *  - over the pool's limit: the pool gives back its own cached blocks; still over: SP_ERR_LIMIT;
 *  - device out of memory: a fenced wait on another stream's block (unless the policy forbids
 *    it or the block is for a graph capture), then the pool's own cache goes back to the device,
 *    then other pools' caches and the user's callback (reclaim.c); then SP_ERR_OUT_OF_MEMORY,
 *    with a report. Every step is counted. */
static int alloc_fresh(sp_pool *pool, sp_stream_key key, uint32_t cls, int state, sp_block **out)
{
    size_t size = sp__class_size(cls);
    int rc = driver_alloc(pool, key.stream, cls, state, out);
    if (rc == SP_ERR_LIMIT && size <= pool->cfg.limit) {
        (void)sp__pool_give_back(pool, pool->cfg.limit - size);
        rc = driver_alloc(pool, key.stream, cls, state, out);
    }
    if (rc == SP_ERR_LIMIT) {
        count(pool, SP_COUNT_limit_rejections);
        return rc;
    }
    if (rc != SP_ERR_OUT_OF_MEMORY)
        return rc;
    if (state == SP_BLOCK_LIVE && pool->cfg.cross_stream != SP_CROSS_STREAM_NO_WAIT) {
        int steal_rc = steal(pool, key, cls, STEAL_WAIT, out);
        if (steal_rc != SP_OK || *out)
            return steal_rc;
    }
    retry_ctx ctx = {pool, key.stream, cls, state, out};
    (void)sp__pool_give_back(pool, 0);
    rc = retry_driver(&ctx);
    if (rc == SP_ERR_OUT_OF_MEMORY && pool->cfg.limit) {
        /* the driver enforces the limit too (maxSize): a pool at its own cap is at its limit */
        uint64_t reserved = 0, used = 0;
        (void)sp__cuda_pool_usage(pool->cuda_pool, &reserved, &used);
        if (reserved + size > pool->cfg.limit)
            rc = SP_ERR_LIMIT;
    }
    if (rc == SP_ERR_OUT_OF_MEMORY)
        rc = sp__reclaim(pool, size, key.stream, retry_driver, &ctx);
    if (rc == SP_ERR_LIMIT)
        count(pool, SP_COUNT_limit_rejections);
    if (rc == SP_ERR_OUT_OF_MEMORY) {
        count(pool, SP_COUNT_ooms);
        sp__oom_record(pool, size, key.stream);
    }
    return rc;
}

static void account_alloc(sp_pool *pool, sp_block *b, size_t bytes)
{
    b->requested = bytes;
    account(pool, (int64_t)bytes, (int64_t)b->size);
    atomic_fetch_add_explicit(&pool->miss_allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->miss_requested_total, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->miss_active_total, b->size, memory_order_relaxed);
}

static int alloc_slow(sp_pool *pool, sp_stream_key key, uint32_t cls, size_t bytes, void **ptr)
{
    sp_block *b = NULL;
    int rc = steal(pool, key, cls, STEAL_COMPLETED, &b);
    if (rc == SP_OK && !b && pool->cfg.cross_stream == SP_CROSS_STREAM_WAIT)
        rc = steal(pool, key, cls, STEAL_WAIT, &b);
    if (rc == SP_OK && !b)
        rc = alloc_fresh(pool, key, cls, SP_BLOCK_LIVE, &b);
    if (rc != SP_OK)
        return rc;
    atomic_store_explicit(&b->state, SP_BLOCK_LIVE, memory_order_release);
    account_alloc(pool, b, bytes);
    *ptr = b->ptr;
    return SP_OK;
}

/* Rule 24: a capturing stream's allocations become graph nodes; they never touch a cache. */
static int alloc_bypass(sp_pool *pool, sp_stream_key key, size_t bytes, void **ptr)
{
    sp_block *b = NULL;
    int rc = alloc_fresh(pool, key, sp__class_of(bytes), SP_BLOCK_BYPASS, &b);
    if (rc != SP_OK)
        return rc;
    account_alloc(pool, b, bytes);
    count(pool, SP_COUNT_capture_bypasses);
    *ptr = b->ptr;
    return SP_OK;
}

static bool capture_possible(const sp_runtime *rt)
{
    return rt->cfg.capture_check == SP_CAPTURE_ALWAYS ||
           atomic_load_explicit(&rt->captures, memory_order_relaxed) != 0;
}

/* ---- the hot path ---- */

int sp_alloc(sp_pool *pool, void **ptr, size_t bytes, cudaStream_t stream)
{
    if (sp__trace_wanted()) /* hook: observe */
        return sp__trace_alloc(pool, ptr, bytes, stream);
    sp__cuda_error_clear(); /* hook: observe */
    if (sp_unlikely(!pool || !ptr))
        return SP_ERR_INVALID;
    if (sp_unlikely(bytes == 0)) {
        *ptr = NULL;
        return SP_OK;
    }
    if (sp_unlikely(bytes > SP_MAX_ALLOC))
        return SP_ERR_TOO_LARGE;
    uint32_t cls = sp__class_of(bytes);
    sp_stream_key key = sp__stream_key(stream);
    if (sp_unlikely(capture_possible(pool->rt))) {
        bool capturing = false;
        int rc = sp__stream_capturing(pool->rt, key, &capturing);
        if (rc != SP_OK)
            return rc;
        if (capturing)
            return alloc_bypass(pool, key, bytes, ptr);
    }
    for (;;) {
        sp_stream_cache *c = sp__cache_get(pool, key);
        if (sp_unlikely(!c))
            return SP_ERR_NO_HOST_MEMORY;
        sp_spin_lock(&c->lock);
        if (sp_unlikely(c->released)) { /* released meanwhile: look the stream up again */
            sp_spin_unlock(&c->lock);
            continue;
        }
        sp_block *b = sp__bin_pop_newest(&c->bins[cls]);
        for (uint32_t up = cls + 1; !b && up <= cls + SP_FIT_CLASSES && up < SP_CLASS_COUNT; up++)
            b = sp__bin_pop_newest(&c->bins[up]);
        if (sp_likely(b != NULL)) {
            b->requested = bytes;
            c->hits++;
            c->requested_total += bytes;
            c->active_total += b->size;
            c->requested_delta += (int64_t)bytes;
            c->active_delta += (int64_t)b->size;
            if (sp_unlikely(delta_over(c, pool->stats_flush)))
                sp__cache_flush_locked(pool, c);
            sp_spin_unlock(&c->lock);
            atomic_store_explicit(&b->state, SP_BLOCK_LIVE, memory_order_release);
            *ptr = b->ptr;
            return SP_OK;
        }
        sp__cache_flush_locked(pool, c); /* the slow path keeps the shared figures current */
        sp_spin_unlock(&c->lock);
        return alloc_slow(pool, key, cls, bytes, ptr);
    }
}

/* A block that goes straight back to the driver: a bypassed one, or any freed during capture. */
static int free_to_driver(sp_pool *pool, sp_block *b, cudaStream_t stream)
{
    account(pool, -(int64_t)b->requested, -(int64_t)b->size);
    count(pool, SP_COUNT_frees);
    block_release(pool, b, stream);
    return SP_OK;
}

/* Over its cache limit, the pool gives cached blocks back to the driver (largest first). The
 * frees are stream-ordered: the driver reuses or releases the memory as its rules allow. */
static void enforce_cache_limit(sp_pool *pool, uint64_t cache_limit)
{
    uint64_t held = atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed);
    uint64_t active = atomic_load_explicit(&pool->usage.active.current, memory_order_relaxed);
    if (held <= active || held - active <= cache_limit)
        return;
    pool_release_cached(pool, active + cache_limit, false);
    uint64_t after = atomic_load_explicit(&pool->usage.held.current, memory_order_relaxed);
    count(pool, SP_COUNT_trims);
    if (held > after)
        sp__pool_count(pool, SP_COUNT_reclaimed_bytes, held - after);
}

int sp_free(sp_pool *pool, void *ptr, cudaStream_t stream)
{
    if (sp__trace_wanted()) /* hook: observe */
        return sp__trace_free(pool, ptr, stream);
    sp__cuda_error_clear(); /* hook: observe */
    if (sp_unlikely(!pool))
        return SP_ERR_INVALID;
    if (sp_unlikely(!ptr))
        return SP_OK;
    sp_block *b = NULL;
    int rc = sp__ptrmap_take_for_free(&pool->rt->ptrmap, ptr, pool, &b);
    if (sp_unlikely(rc != SP_OK)) {
        count(pool, SP_COUNT_bad_frees);
        return rc;
    }
    if (sp_unlikely(atomic_load_explicit(&b->state, memory_order_relaxed) == SP_BLOCK_BYPASS))
        return free_to_driver(pool, b, stream);
    sp_stream_key key = sp__stream_key(stream);
    if (sp_unlikely(capture_possible(pool->rt))) {
        bool capturing = false;
        if (sp__stream_capturing(pool->rt, key, &capturing) != SP_OK || capturing)
            return free_to_driver(pool, b, stream); /* rule 24: never into a cache */
    }
    for (;;) {
        sp_stream_cache *c = sp__cache_get(pool, key);
        if (sp_unlikely(!c))
            return free_to_driver(pool, b, stream); /* no host memory for a cache */
        sp_spin_lock(&c->lock);
        if (sp_unlikely(c->released)) {
            sp_spin_unlock(&c->lock);
            continue;
        }
        b->epoch = ++c->free_epoch;
        c->frees++;
        c->freed_bytes += b->size;
        c->requested_delta -= (int64_t)b->requested;
        c->active_delta -= (int64_t)b->size;
        sp__bin_push(&c->bins[b->cls], b);
        uint64_t cache_limit = atomic_load_explicit(&pool->cache_limit, memory_order_relaxed);
        if (sp_unlikely(cache_limit != UINT64_MAX || delta_over(c, pool->stats_flush)))
            sp__cache_flush_locked(pool, c);
        sp_spin_unlock(&c->lock);
        if (sp_unlikely(cache_limit != UINT64_MAX))
            enforce_cache_limit(pool, cache_limit);
        return SP_OK;
    }
}

/* ---- settings and trim ---- */

int sp_pool_set_release_threshold(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear(); /* hook: observe */
    if (!pool)
        return SP_ERR_INVALID;
    pthread_mutex_lock(&pool->lock);
    sp_pool_config cfg = pool->cfg;
    cfg.release_threshold = bytes;
    int rc = sp__cuda_pool_set_threshold(pool->cuda_pool, effective_threshold(&cfg));
    if (rc == SP_OK)
        pool->cfg.release_threshold = bytes;
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

int sp_pool_set_cache_limit(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear(); /* hook: observe */
    if (!pool)
        return SP_ERR_INVALID;
    pthread_mutex_lock(&pool->lock);
    pool->cfg.cache_limit = bytes;
    atomic_store_explicit(&pool->cache_limit, bytes, memory_order_relaxed);
    pthread_mutex_unlock(&pool->lock);
    if (bytes != UINT64_MAX) {
        (void)sp__pool_active_bytes(pool); /* flush every cache: the figures must be current */
        enforce_cache_limit(pool, bytes);
    }
    return SP_OK;
}

int sp_pool_get_config(const sp_pool *pool, sp_pool_config *out)
{
    if (!pool || !out || out->size < offsetof(sp_pool_config, cross_stream) + sizeof out->cross_stream)
        return SP_ERR_INVALID;
    size_t size = out->size;
    pthread_mutex_lock((pthread_mutex_t *)&pool->lock);
    memcpy(out, &pool->cfg, size < sizeof pool->cfg ? size : sizeof pool->cfg);
    pthread_mutex_unlock((pthread_mutex_t *)&pool->lock);
    out->size = size < sizeof pool->cfg ? size : sizeof pool->cfg;
    return SP_OK;
}

int sp_pool_trim(sp_pool *pool, size_t keep_bytes)
{
    sp__cuda_error_clear(); /* hook: observe */
    if (!pool)
        return SP_ERR_INVALID;
    count(pool, SP_COUNT_trims);
    (void)sp__pool_give_back(pool, keep_bytes);
    sp__trace_trim(pool); /* hook: observe */
    return SP_OK;
}
