/* A named pool: its cudaMemPool, its configuration and tenant settings, its usage figures, and
 * the memory it takes from and gives back to the driver: fresh slabs and segments, the cache it
 * gives back (limit, cache limit, trim, out of memory, destroy) and released streams. */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "park.h"
#include "capture.h"
#include "small.h"
#include "give_back.h"
#include "config.h"
#include "cuda.h"
#include "ptrmap.h"
#include "device.h"
#include "status.h"
#include "trace.h"
#include "introspect.h"
#include "share_guard.h"
#include "versioned.h"

static atomic_uint_least64_t next_pool_id = 1;



/* ---- pool lifetime ---- */

/* The limit in force: cfg.limit rounded down to whole driver pages, what the device gives (a
 * request of one byte takes a page of the cudaMemPool), so that neither the pool's figures nor
 * its cudaMemPool ever pass what was configured. 0: none. */
uint64_t sp__pool_limit_in_pages(const sp_pool_config *cfg)
{
    return cfg->limit / SP_DRIVER_GRANULARITY * SP_DRIVER_GRANULARITY;
}

/* The threshold the cudaMemPool gets: never below the reservation (the pool keeps it), never
 * above the limit (reserved memory must not stay above it past a synchronize). */
uint64_t sp__pool_threshold(const sp_pool_config *cfg)
{
    uint64_t t = cfg->release_threshold;
    if (t < cfg->reserve)
        t = cfg->reserve;
    if (cfg->limit && t > sp__pool_limit_in_pages(cfg))
        t = sp__pool_limit_in_pages(cfg);
    return t;
}

/* A limit below one driver page could hold nothing the device gives, and a reservation above
 * the limit in pages would pass it from the start: both refused, with words. */
int sp__pool_check_limit(const char *name, const sp_pool_config *cfg)
{
    if (cfg->limit && cfg->limit < SP_DRIVER_GRANULARITY)
        return sp__config_errorf(SP_ERR_CONFIG,
                          "pool '%s': its limit of %llu bytes is below the driver's granularity "
                          "of %llu bytes (the device gives whole pages: the smallest limit is "
                          "one page)",
                          name, (unsigned long long)cfg->limit,
                          (unsigned long long)SP_DRIVER_GRANULARITY);
    if (cfg->limit && cfg->reserve > sp__pool_limit_in_pages(cfg))
        return sp__config_errorf(SP_ERR_CONFIG,
                          "pool '%s': its reserve of %llu bytes exceeds its limit in whole driver "
                          "pages (%llu bytes of the %llu configured)",
                          name, (unsigned long long)cfg->reserve,
                          (unsigned long long)sp__pool_limit_in_pages(cfg),
                          (unsigned long long)cfg->limit);
    return SP_OK;
}

/* Obtains the reservation from the device once, and frees it at once into the cudaMemPool,
 * which keeps it (threshold >= reserve) for this pool alone. The synchronize makes the free
 * known complete, so any stream of the pool may reuse it (CUDA-SEMANTICS 11c). *held is the
 * allocation if the driver refused its free. */
static int take_reservation_in(sp_pool *pool, cudaMemPool_t cuda_pool, void **held)
{
    void *p;
    sp_device *dev = pool->dev;
    *held = NULL;
    int rc = sp__cuda_malloc(cuda_pool, &p, pool->cfg.reserve, dev->service);
    if (rc != SP_OK)
        return rc;
    if ((rc = sp__cuda_free(p, dev->service)) != SP_OK) {
        *held = p;
        return rc;
    }
    return sp__cuda_stream_sync(dev->service);
}

static int take_reservation(sp_pool *pool, void **held)
{
    return take_reservation_in(pool, pool->cuda_pool, held);
}


/* A failed creation's cudaMemPool: the reservation still `held` goes back, and the cudaMemPool
 * is destroyed if the pool made it. */
static void discard_cuda_pool_of(sp_pool *pool, cudaMemPool_t cuda_pool, bool owned, void *held)
{
    for (int tries = 0; tries < SP_CLEANUP_TRIES; tries++) {
        if (held && sp__cuda_free(held, pool->dev->service) == SP_OK)
            held = NULL;
        if (!held && (!owned || sp__cuda_pool_destroy(cuda_pool) == SP_OK))
            return;
    }
}

static void discard_cuda_pool(sp_pool *pool, void *held)
{
    discard_cuda_pool_of(pool, pool->cuda_pool, pool->owns_cuda_pool, held);
}

int sp__pool_new(sp_runtime *rt, sp_device *dev, const char *name, cudaMemPool_t adopt,
                 const sp_pool_config *cfg, sp_pool **out)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > SP_POOL_NAME_MAX)
        return SP_ERR_INVALID;
    sp_pool_config merged;
    int rc = sp__config_for_pool(dev, name, cfg, &merged); /* the limit in force, in pages */
    if (rc == SP_OK)
        rc = sp__pool_check_limit(name, &merged);
    if (rc != SP_OK)
        return rc;
    sp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return SP_ERR_NO_HOST_MEMORY;
    memcpy(pool->name, name, len + 1);
    pool->rt = rt;
    pool->dev = dev;
    pool->fig.device = &dev->usage;
    sp__usage_init(&pool->fig.usage);
    pool->cfg = merged;
    atomic_init(&pool->cache_limit, merged.cache_limit);
    pool->limit_bytes = sp__pool_limit_in_pages(&merged);
    atomic_flag_clear(&pool->limit_busy);
    pool->stats_flush = dev->cfg.stats_flush_bytes;
    pool->id = atomic_fetch_add(&next_pool_id, 1);
    if (sp__heap_init(&pool->slabs, pool, true) != SP_OK ||
        sp__heap_init(&pool->segments, pool, false) != SP_OK) {
        free(pool);
        return SP_ERR_NO_HOST_MEMORY;
    }
    if (adopt) {
        uint64_t reserved, used;
        pool->cuda_pool = adopt;
        rc = sp__cuda_pool_usage(adopt, &reserved, &used); /* a valid pool handle? */
        if (rc == SP_OK && (cfg || merged.reserve || merged.limit))
            rc = sp__cuda_pool_set_threshold(adopt, sp__pool_threshold(&merged));
    } else {
        /* the driver holds the pool to the limit in pages as well (raised past it, the pool
         * moves to a new cudaMemPool: sp_pool_set_limit) */
        cudaMemPool_t made = NULL;
        rc = merged.share == SP_SHARE_POSIX_FD /* exportable: share.c */
                 ? sp__cuda_pool_create_shareable(dev->device, pool->limit_bytes, &made)
                 : sp__cuda_pool_create(dev->device, pool->limit_bytes, &made);
        pool->cuda_pool = made;
        pool->cuda_cap = pool->limit_bytes;
        pool->owns_cuda_pool = rc == SP_OK;
        if (rc == SP_OK)
            rc = sp__cuda_pool_set_threshold(pool->cuda_pool, sp__pool_threshold(&merged));
    }
    void *held = NULL;
    if (rc == SP_OK && merged.reserve && (rc = take_reservation(pool, &held)) != SP_OK)
        (void)sp__config_errorf(rc,
                         "pool '%s': its reserve of %llu bytes could not be taken from the "
                         "device: %s",
                         name, (unsigned long long)merged.reserve, sp_strerror(rc));
    if (rc == SP_OK && sp_mutex_init(&pool->lock, SP_RANK_POOL, "pool->lock") != 0)
        rc = SP_ERR_NO_HOST_MEMORY;
    if (rc != SP_OK) {
        if (pool->cuda_pool)
            discard_cuda_pool(pool, held);
        sp__heap_destroy(&pool->slabs);
        sp__heap_destroy(&pool->segments);
        free(pool);
        return rc;
    }
    *out = pool;
    return SP_OK;
}




int sp__pool_free(sp_pool *pool)
{
    /* Nothing is forgotten before the driver has taken everything back: a segment left, or a
     * cudaMemPoolDestroy the driver refuses, leaves the pool as it was, less what went back
     * (its cache), for the caller to destroy again. Forgotten, a segment or a cudaMemPool that
     * keeps its release threshold would stay reserved for the life of the process. */
    int rc = sp__give_back_everything(pool);
    /* the cudaMemPools a raised limit replaced, first: a refusal leaves the current one as it
     * was, and those already destroyed leave the list */
    while (rc == SP_OK && atomic_load_explicit(&pool->retired_cuda_pools, memory_order_relaxed)) {
        struct sp_retired_cuda_pool *r = pool->retired_cuda_pools;
        (void)sp__cuda_pool_trim(r->pool, 0);
        if ((rc = sp__cuda_pool_destroy(r->pool)) == SP_OK) {
            pool->retired_cuda_pools = r->next;
            free(r);
        }
    }
    if (rc == SP_OK && pool->owns_cuda_pool) {
        /* the pages the cudaMemPool keeps under its release threshold go back first, so that
         * a refused destroy leaves it its reservation only (a trim failing loses nothing: the
         * destroy releases them too) */
        (void)sp__cuda_pool_trim(pool->cuda_pool, pool->cfg.reserve);
        rc = sp__cuda_pool_destroy(pool->cuda_pool); /* rule 7: returns at once */
    }
    /* a context lost to a device fault took the memory with it: nothing a later destroy could
     * give back, and every call would fail alike, so the pool goes (sp_last_cuda_error tells) */
    if (rc != SP_OK && !sp__cuda_context_lost())
        return rc;
    for (sp_block *b = pool->refused_frees, *next; b; b = next) {
        next = b->next; /* a lost context took their memory */
        free(b);
    }
    for (struct sp_retired_cuda_pool *r = pool->retired_cuda_pools, *next; r; r = next) {
        next = r->next; /* a lost context: nothing left to destroy them with */
        free(r);
    }
    sp__req_free_all(pool->requests); /* open ones without live allocations (live ones make it busy) */
    sp__share_free(pool); /* its exports' tables (a held block is live: it made the pool busy) */
    sp__heap_destroy(&pool->slabs);
    sp__heap_destroy(&pool->segments);
    sp__fence_drop_all(pool);
    sp__cache_table_free(pool);
    sp_mutex_destroy(&pool->lock);
    free(pool);
    return SP_OK;
}

int sp__pool_release_stream(sp_pool *pool, sp_stream_key key)
{
    /* The cache leaves the pool's list and its figures move to the pool's in one step under
     * pool->lock, which a stats read holds while it walks the list and reads the moved
     * figures: a read finds them in one place or the other, never in neither. */
    sp_mutex_lock(&pool->lock);
    sp_stream_cache *c = sp__cache_detach_locked(pool, key);
    if (!c) {
        sp_mutex_unlock(&pool->lock);
        return SP_OK;
    }
    sp_spin_lock(&c->lock);
    c->released = true;
    sp__cache_flush_locked(pool, c);
    sp_block *list = sp__small_take_all(c);
    sp_block *parked = sp__park_take_all_locked(c, NULL);
    /* what is left is a tombstone: its counters move to the pool, its bins go (a thread
     * still holding it sees `released` under the lock before touching either) */
    atomic_fetch_add_explicit(&pool->retired_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_hits, c->hits, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_frees, c->frees, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_freed_bytes, c->freed_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_requested_total, c->requested_total,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->retired_active_total, c->active_total, memory_order_relaxed);
    c->hits = c->frees = c->freed_bytes = c->requested_total = c->active_total = 0;
    sp_bin *bins = c->bins;
    c->bins = NULL;
    sp_spin_unlock(&c->lock);
    sp_mutex_unlock(&pool->lock);
    free(bins);
    sp__capture_release_aside(c);
    /* the released stream is named one last time: a fence covering all its frees (or, failing
     * that, a synchronize); its blocks and ranges keep their tags behind it */
    int rc = sp__fence_final(c);
    sp__small_to_slabs(pool, c, list);
    sp__park_put(pool, parked);
    return rc;
}


/* A cudaMemPool's maxSize is fixed at its creation. A limit raised past the cap of the pool's
 * cudaMemPool moves the pool to a new one, capped at the new limit (0: none), its reservation
 * taken there first (the device gives it twice for a moment, so that no other pool can take it
 * meanwhile); the old one keeps only the segments the pool still has from it (threshold 0,
 * trimmed) and goes at the pool's destroy. Their frees need no handle: cudaFreeAsync returns a
 * block to the cudaMemPool it came from. pool->lock held. */
int sp__pool_move_cuda_pool(sp_pool *pool, uint64_t cap, const sp_pool_config *cfg)
{
    sp_mutex_assert_owner(&pool->lock);
    struct sp_retired_cuda_pool *r = malloc(sizeof *r);
    if (!r)
        return SP_ERR_NO_HOST_MEMORY;
    cudaMemPool_t fresh = NULL;
    void *held = NULL;
    int rc = sp__cuda_pool_create(pool->dev->device, cap, &fresh);
    if (rc == SP_OK)
        rc = sp__cuda_pool_set_threshold(fresh, sp__pool_threshold(cfg));
    if (rc == SP_OK && cfg->reserve && (rc = take_reservation_in(pool, fresh, &held)) != SP_OK)
        (void)sp__config_errorf(rc,
                         "pool '%s': its limit cannot be raised past %llu bytes: its reserve of "
                         "%llu bytes could not be taken again in a cudaMemPool with the new cap: %s",
                         pool->name, (unsigned long long)pool->cuda_cap,
                         (unsigned long long)cfg->reserve, sp_strerror(rc));
    if (rc != SP_OK) {
        if (fresh)
            discard_cuda_pool_of(pool, fresh, true, held);
        free(r);
        return rc;
    }
    cudaMemPool_t old = pool->cuda_pool;
    r->pool = old;
    r->next = pool->retired_cuda_pools;
    atomic_store_explicit(&pool->retired_cuda_pools, r, memory_order_release);
    pool->cuda_pool = fresh; /* new driver allocations go there from now on */
    pool->cuda_cap = cap;
    /* its reservation is the new one's now: the old one releases every page not in use */
    (void)sp__cuda_pool_set_threshold(old, 0);
    (void)sp__cuda_pool_trim(old, 0);
    return SP_OK;
}


bool sp__pool_tag_given(uint64_t tag)
{
    /* pool ids are given in order from 1: a tag past the last one given names no pool (tags
     * keep the low bits of the id, so after 2^24 pools every tag has been given) */
    uint64_t next = atomic_load_explicit(&next_pool_id, memory_order_relaxed);
    uint64_t mask = (1ull << (64 - SP_REQ_SEQ_BITS)) - 1;
    return tag >= 1 && (next > mask || tag < next);
}

bool sp__pool_reported(sp_pool *pool)
{
    /* The default pool exists from sp_runtime_create on, whether or not the program ever uses
     * it: until it has held memory or counted a call, showing it would only say "one more pool"
     * than the program made. */
    if (!pool->is_default || atomic_load(&pool->fig.usage.held.total) != 0 ||
        atomic_load(&pool->miss_allocs) != 0)
        return true;
    for (int i = 0; i < SP_COUNT_N; i++)
        if (atomic_load(&pool->fig.count[i]) != 0)
            return true;
    return false;
}
