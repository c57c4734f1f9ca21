/* A pool's settings at run time: release threshold, limit (raised past its cudaMemPool's cap,
 * the pool moves to a new one), cache limit, its configuration read back, and trim. */
#include <stdlib.h>

#include "pool.h"
#include "trace.h"
#include "config.h"
#include "cuda.h"
#include "give_back.h"
#include "runtime.h"
#include "status.h"
#include "versioned.h"

int sp_pool_set_release_threshold(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    sp_mutex_lock(&pool->lock);
    sp_pool_config cfg = pool->cfg;
    cfg.release_threshold = bytes;
    int rc = sp__cuda_pool_set_threshold(pool->cuda_pool, sp__pool_threshold(&cfg));
    if (rc == SP_OK)
        pool->cfg.release_threshold = bytes;
    sp_mutex_unlock(&pool->lock);
    return rc;
}

int sp_pool_set_limit(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    /* the limit in force, as a pool created with it would have: clamped to the device (with a
     * warning), in whole pages (config.c, under rt->lock, which ranks before pool->lock) */
    sp_mutex_lock(&pool->rt->lock);
    int rc = bytes ? sp__config_limit_in_force(pool->dev, pool->name, &bytes) : SP_OK;
    sp_mutex_unlock(&pool->rt->lock);
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock(&pool->lock);
    sp_pool_config cfg = pool->cfg;
    cfg.limit = bytes;
    uint64_t limit = sp__pool_limit_in_pages(&cfg);
    rc = sp__pool_check_limit(pool->name, &cfg);
    bool past_cap = pool->owns_cuda_pool && pool->cuda_cap && (!limit || limit > pool->cuda_cap);
    if (rc == SP_OK && past_cap && cfg.share == SP_SHARE_POSIX_FD)
        /* another process imported this cudaMemPool by its handle: a new one would not be it */
        rc = sp__config_errorf(SP_ERR_NOT_SUPPORTED,
                        "pool '%s': a shareable pool's limit cannot be raised past %llu bytes, "
                        "the cap its exported cudaMemPool was created with",
                        pool->name, (unsigned long long)pool->cuda_cap);
    /* past the cap of its cudaMemPool (a pool made with a limit), a new one */
    else if (rc == SP_OK && past_cap)
        rc = sp__pool_move_cuda_pool(pool, limit, &cfg);
    if (rc == SP_OK)
        rc = sp__cuda_pool_set_threshold(pool->cuda_pool, sp__pool_threshold(&cfg));
    if (rc != SP_OK) {
        sp_mutex_unlock(&pool->lock);
        return rc;
    }
    uint64_t old_limit = pool->limit_bytes;
    pool->cfg.limit = limit; /* what every report shows: the limit in force */
    /* from here every claim is judged by the new limit; one that read the old limit may still
     * complete, so held stays within the highest limit in force */
    pool->limit_bytes = limit;
    sp_mutex_unlock(&pool->lock);
    if (limit && (!old_limit || limit < old_limit)) {
        /* lowered: the cache above the new limit goes back now, its frees settled as a trim
         * settles them; live blocks stay, and what they hold over the limit only refuses new
         * driver allocations (sp__limit_claim) until frees bring the pool under it */
        int err = SP_OK;
        (void)sp__give_back(pool, limit, true, &err);
        rc = err;
    }
    return rc;
}

int sp_pool_set_cache_limit(sp_pool *pool, uint64_t bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    sp_mutex_lock(&pool->lock);
    pool->cfg.cache_limit = bytes;
    atomic_store_explicit(&pool->cache_limit, bytes, memory_order_relaxed);
    sp_mutex_unlock(&pool->lock);
    atomic_store_explicit(&pool->limit_stuck, 0, memory_order_relaxed);
    if (bytes != UINT64_MAX) {
        (void)sp__cache_active_bytes(pool); /* flush every cache: the figures must be current */
        sp__give_back_to_cache_limit(pool, bytes, NULL, NULL);
    }
    return SP_OK;
}

int sp_pool_get_config(const sp_pool *pool, sp_pool_config *out)
{
    if (!pool)
        return SP_ERR_INVALID;
    int rc = sp__struct_check(out, SP__MIN_POOL_CONFIG, "sp_pool_get_config", "sp_pool_config");
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock((sp_mutex *)&pool->lock);
    sp__struct_write(out, &pool->cfg, sizeof pool->cfg);
    sp_mutex_unlock((sp_mutex *)&pool->lock);
    return SP_OK;
}

int sp_pool_trim(sp_pool *pool, size_t keep_bytes)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    sp__usage_count(&pool->fig, SP_COUNT_trims, 1);
    int err = SP_OK;
    sp__usage_count(&pool->fig, SP_COUNT_trimmed_bytes, sp__give_back(pool, keep_bytes, true, &err));
    sp__trace_trim(pool);
    return err;
}
