/* Per-stream caches: a pool keeps, for every stream it has seen, bins of freed small blocks by
 * size class (small.c) and the tags of its frees (fence.c). Finding the cache is the first step of every sp_alloc and sp_free, so a per-thread
 * memo of the last few (pool, stream) pairs answers it with a compare; the pool's table, under
 * its mutex, is consulted only on a memo miss. */
#include <stdlib.h>

#include "cache.h"
#include "cuda.h"
#include "pool.h"
#include "runtime.h"
#include "stream_figures.h"

/* ---- stream keys ---- */

static atomic_uint_least64_t next_thread_id = 1;
static _Thread_local uint64_t this_thread_id;

sp_stream_key sp__cache_key(cudaStream_t stream)
{
    sp_stream_key key = {stream, 0};
    if (stream == cudaStreamPerThread) {
        if (!this_thread_id)
            this_thread_id = atomic_fetch_add(&next_thread_id, 1);
        key.thread = this_thread_id;
    }
    return key;
}

bool sp__cache_key_is_this_threads(sp_stream_key key)
{
    return key.thread == 0 || key.thread == sp__cache_key(cudaStreamPerThread).thread;
}

static bool key_equal(sp_stream_key a, sp_stream_key b)
{
    return a.stream == b.stream && a.thread == b.thread;
}

static size_t key_hash(uint64_t pool_id, sp_stream_key key)
{
    uint64_t x = (uint64_t)(uintptr_t)key.stream ^ (key.thread << 32) ^ (pool_id * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(x ^ (x >> 32));
}

/* ---- the per-thread memo ---- */

#define MEMO_SIZE 8

typedef struct {
    uint64_t pool_id;         /* 0: empty (pool ids start at 1) */
    uint64_t gen;             /* the pool's stream_gen when memoised */
    sp_stream_key key;
    sp_stream_cache *cache;
} memo_entry;

static _Thread_local memo_entry memo[MEMO_SIZE];

/* ---- the pool's table ---- */

static sp_stream_cache *table_find(const sp_pool *pool, sp_stream_key key, size_t h)
{
    if (!pool->bucket_count)
        return NULL;
    for (sp_stream_cache *c = pool->buckets[h & (pool->bucket_count - 1)]; c; c = c->next_in_bucket)
        if (key_equal(c->key, key))
            return c;
    return NULL;
}

static bool table_grow(sp_pool *pool)
{
    size_t count = pool->bucket_count ? pool->bucket_count * 2 : 16;
    sp_stream_cache **buckets = calloc(count, sizeof *buckets);
    if (!buckets)
        return false;
    for (size_t i = 0; i < pool->bucket_count; i++) {
        for (sp_stream_cache *c = pool->buckets[i], *next; c; c = next) {
            next = c->next_in_bucket;
            size_t j = key_hash(pool->id, c->key) & (count - 1);
            c->next_in_bucket = buckets[j];
            buckets[j] = c;
        }
    }
    free(pool->buckets);
    pool->buckets = buckets;
    pool->bucket_count = count;
    return true;
}

static sp_stream_cache *table_insert(sp_pool *pool, sp_stream_key key)
{
    if (pool->cache_count >= pool->bucket_count && !table_grow(pool))
        return NULL;
    sp_stream_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (!(c->bins = calloc(SP_CLASS_COUNT, sizeof *c->bins)) ||
        sp_mutex_init(&c->fence_lock, SP_RANK_FENCE, "cache->fence_lock") != 0) {
        free(c->bins);
        free(c);
        return NULL;
    }
    sp_spin_init(&c->lock, SP_RANK_SPIN, "cache->lock");
    c->key = key;
    c->pool = pool;
    if (key.thread)
        sp__cache_thread_watch();
    size_t i = key_hash(pool->id, key) & (pool->bucket_count - 1);
    c->next_in_bucket = pool->buckets[i];
    pool->buckets[i] = c;
    c->next_in_pool = pool->caches;
    pool->caches = c;
    pool->cache_count++;
    return c;
}

sp_stream_cache *sp__cache_get(sp_pool *pool, sp_stream_key key)
{
    size_t h = key_hash(pool->id, key);
    memo_entry *m = &memo[h & (MEMO_SIZE - 1)];
    uint64_t gen = atomic_load_explicit(&pool->stream_gen, memory_order_acquire);
    if (sp_likely(m->pool_id == pool->id && m->gen == gen && key_equal(m->key, key)))
        return m->cache;
    sp_mutex_lock(&pool->lock);
    sp_stream_cache *c = table_find(pool, key, h);
    bool created = false;
    if (!c)
        created = (c = table_insert(pool, key)) != NULL;
    gen = atomic_load_explicit(&pool->stream_gen, memory_order_relaxed);
    sp_mutex_unlock(&pool->lock);
    /* a stream declared capturing before its cache existed (or before it was released and
     * seen again) */
    if (created && atomic_load_explicit(&pool->dev->captures, memory_order_acquire) != 0)
        sp__cache_capture_adopt(c);
    if (c)
        *m = (memo_entry){pool->id, gen, key, c};
    return c;
}

sp_stream_cache *sp__cache_find(sp_pool *pool, sp_stream_key key, bool create)
{
    size_t h = key_hash(pool->id, key);
    sp_mutex_lock(&pool->lock);
    sp_stream_cache *c = table_find(pool, key, h);
    if (!c && create)
        c = table_insert(pool, key);
    sp_mutex_unlock(&pool->lock);
    return c;
}

sp_stream_cache *sp__cache_detach_locked(sp_pool *pool, sp_stream_key key)
{
    sp_mutex_assert_owner(&pool->lock);
    size_t h = key_hash(pool->id, key);
    sp_stream_cache *c = table_find(pool, key, h);
    if (c) {
        sp_stream_cache **p = &pool->buckets[h & (pool->bucket_count - 1)];
        while (*p != c)
            p = &(*p)->next_in_bucket;
        *p = c->next_in_bucket;
        for (p = &pool->caches; *p != c; p = &(*p)->next_in_pool)
            ;
        *p = c->next_in_pool;
        pool->cache_count--;
        /* kept, not freed: another thread may still hold it from its memo; it will see
         * `released` under the cache's lock and look again */
        c->next_in_pool = pool->retired;
        pool->retired = c;
        atomic_fetch_add_explicit(&pool->stream_gen, 1, memory_order_release);
    }
    return c;
}

void sp__cache_drain_fence_steps(sp_pool *pool)
{
    sp_mutex_lock(&pool->lock);
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++) {
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool) {
            sp_mutex_lock(&c->fence_lock);
            sp_mutex_unlock(&c->fence_lock);
        }
    }
    sp_mutex_unlock(&pool->lock);
}

void sp__cache_table_free(sp_pool *pool)
{
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++) {
        for (sp_stream_cache *c = *l, *next; c; c = next) {
            next = c->next_in_pool;
            sp_mutex_destroy(&c->fence_lock);
            free(c->bins);
            free(c);
        }
    }
    free(pool->buckets);
    pool->buckets = NULL;
    pool->caches = pool->retired = NULL;
    pool->bucket_count = pool->cache_count = 0;
}

/* ---- per-stream figures (introspect.h): the hot path's slow cases ---- */

/* ---- threads that exit ---- */

/* runtime.c's key (sp__cache_thread_exit_key_set): its destructor releases the exiting thread's
 * cudaStreamPerThread caches in every runtime. */
static pthread_key_t exit_key;
static atomic_bool exit_key_set;
static _Thread_local bool watched;

void sp__cache_thread_exit_key_set(pthread_key_t key)
{
    exit_key = key;
    atomic_store_explicit(&exit_key_set, true, memory_order_release);
}

void sp__cache_thread_watch(void)
{
    if (watched)
        return;
    /* best effort: without the key the caches stay until stream release or pool destroy */
    watched = atomic_load_explicit(&exit_key_set, memory_order_acquire) &&
              pthread_setspecific(exit_key, &watched) == 0;
}

/* ---- the capture state of a stream (capture.c has the blocks kept aside) ---- */

size_t sp__cache_capture_find(const sp_runtime *rt, sp_stream_key key)
{
    for (size_t i = 0; i < rt->capturing_len; i++)
        if (rt->capturing[i].stream == key.stream && rt->capturing[i].thread == key.thread)
            return i;
    return SIZE_MAX;
}

void sp__cache_capture_adopt(sp_stream_cache *c)
{
    sp_runtime *rt = c->pool->rt;
    sp_mutex_lock(&rt->lock);
    if (sp__cache_capture_find(rt, c->key) != SIZE_MAX) {
        atomic_store_explicit(&c->declared, true, memory_order_release);
        atomic_store_explicit(&c->capturing, true, memory_order_release);
    }
    sp_mutex_unlock(&rt->lock);
}

bool sp__cache_may_touch(sp_stream_cache *c)
{
    if (!sp__cache_key_is_this_threads(c->key) ||
        atomic_load_explicit(&c->capturing, memory_order_acquire))
        return false;
    sp_device *dev = c->pool->dev;
    /* the legacy stream depends on every blocking stream, a capturing one too (rule 25); under
     * SP_CAPTURE_ALWAYS as well, where cudaStreamIsCapturing says "no" until a declared capture
     * has begun */
    if (atomic_load_explicit(&dev->captures, memory_order_acquire) != 0 &&
        (c->key.stream == NULL || c->key.stream == cudaStreamLegacy))
        return false;
    if (dev->cfg.capture_check == SP_CAPTURE_ALWAYS) {
        bool capturing = true;
        return sp__cuda_stream_is_capturing(c->key.stream, &capturing) == SP_OK && !capturing;
    }
    return true;
}
/* ---- a cache's byte deltas in the pool's figures, and the pool's live bytes ---- */

void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c)
{
    sp_spin_assert_owner(&c->lock);
    sp__note_flush_locked(c); /* the stream's own figures move with the shared ones */
    if (c->requested_delta || c->active_delta) {
        sp__usage_add(&pool->fig, c->requested_delta, c->active_delta, 0);
        c->requested_delta = c->active_delta = 0;
    }
}

uint64_t sp__cache_active_bytes(sp_pool *pool)
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
