/* Footprints a server can compute (issue 27, item 5): what a list of allocation sizes may take
 * from a pool's limit, for sp_request_begin_with's expected_bytes. An admitted request's
 * allocations draw on its claim whenever they need memory from the driver (pool.c,
 * sp__limit_claim), and one allocation draws at most what a fresh one takes: a whole slab for a
 * small request, its size in whole driver pages above (classes.h). Memory a request finds in
 * the caches draws nothing, and what is left of a fresh slab or segment may serve another
 * stream before this request's next allocation, so the sum of those per-allocation figures, not
 * a packing of them, is what the claim must hold for no allocation ever to meet the limit. A
 * leaf above classes.h: the pool is read through the public API. */
#include "classes.h"

/* What one allocation of `bytes` takes from the driver when it is fresh (sp__grow's
 * grow_size away from the limit): the upper bound of its draw on a request's claim. */
static uint64_t fresh_bytes(size_t bytes)
{
    if (bytes == 0)
        return 0; /* sp_alloc of 0 gives NULL and takes nothing */
    return sp__fresh_size(bytes <= SP_SMALL_MAX, sp__round_up(bytes, SP_LARGE_ALIGN));
}

int sp_pool_footprint(const sp_pool *pool, const size_t *sizes, size_t count, uint64_t *out)
{
    if (!pool || !out || (!sizes && count))
        return SP_ERR_INVALID;
    sp_pool_config cfg = {.size = sizeof cfg};
    int rc = sp_pool_get_config(pool, &cfg); /* the limit in force, whole pages */
    if (rc != SP_OK)
        return rc;
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (sizes[i] > SP_MAX_ALLOC)
            return SP_ERR_TOO_LARGE;
        uint64_t f = fresh_bytes(sizes[i]);
        if (cfg.limit && sp__round_up(sizes[i], SP_LARGE_ALIGN) > cfg.limit)
            return SP_ERR_NEVER_FITS; /* as sp_alloc judges it */
        total += f; /* total stays under 2^63 and f under 2^47: no overflow */
        if (total > UINT64_MAX / 2)
            return SP_ERR_TOO_LARGE;
    }
    *out = total;
    return SP_OK;
}
