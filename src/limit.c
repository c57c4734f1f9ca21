/* The pool's limit: claims of held bytes made before the driver is asked, so that concurrent
 * allocations never pass it together, and admission, which claims a request's fresh memory
 * before any of its work. */
#include "limit.h"
#include "give_back.h"
#include "status.h"

/* Takes up to `size` bytes of the claim of the request the allocation is for, if it is the
 * pool's: they are in limit_used already. */
static uint64_t draw_request_claim(sp_pool *pool, sp_req *r, uint64_t size)
{
    if (!r || r->pool != pool)
        return 0;
    uint64_t left = atomic_load_explicit(&r->claim, memory_order_relaxed), take;
    do
        take = left < size ? left : size;
    while (take && !atomic_compare_exchange_weak_explicit(&r->claim, &left, left - take,
                                                          memory_order_relaxed,
                                                          memory_order_relaxed));
    return take;
}

/* Returns bytes drawn from a request's claim to it. */
static void return_request_claim(const sp_limit_claim *k)
{
    if (k->drawn)
        atomic_fetch_add_explicit(&k->req->claim, k->drawn, memory_order_relaxed);
}

bool sp__limit_claim(sp_pool *pool, uint64_t size, sp_limit_claim *k)
{
    /* an admitted request's allocation draws on its claim first: what it was admitted for
     * never meets the limit again */
    k->drawn = sp_unlikely(k->req != NULL) ? draw_request_claim(pool, k->req, size) : 0;
    if (k->drawn == size)
        return true;
    size -= k->drawn;
    uint64_t limit = pool->limit_bytes;
    uint64_t cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    do {
        if (limit && (size > limit || cur > limit - size)) {
            return_request_claim(k);
            k->drawn = 0;
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&pool->fig.limit_used, &cur, cur + size,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* Undoes a claim the driver refused. */
void sp__limit_unclaim(sp_pool *pool, uint64_t size, sp_limit_claim *k)
{
    return_request_claim(k); /* a request's bytes go back to its claim */
    (void)sp__usage_current_add(&pool->fig.limit_used, -(int64_t)(size - k->drawn));
    k->drawn = 0;
}

/* ---- admission ---- */

int sp__limit_admit(sp_pool *pool, uint64_t expected, uint64_t *claim)
{
    uint64_t limit = pool->limit_bytes;
    /* as sp_alloc judges a request that the limit can never hold: at 512-byte rounding */
    if (limit && sp__round_up(expected, SP_LARGE_ALIGN) > limit) {
        sp__usage_count(&pool->fig, SP_COUNT_admission_refusals, 1);
        return SP_ERR_NEVER_FITS;
    }
    uint64_t fresh =
        sp__fresh_size(expected <= SP_SMALL_MAX, sp__round_up(expected, SP_LARGE_ALIGN));
    if (limit && fresh > limit)
        fresh = limit; /* near the limit a fresh allocation takes only what it needs */
    uint64_t cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    /* Judged from exact figures: the streams' caches keep their live-byte deltas back (up to
     * stats_flush_bytes each) for speed, and a free still unflushed there makes its bytes look
     * live, not cached: a request that only the pool's cache keeps out would be refused
     * forever. Flushed here, only when the limit has no room without the cache. */
    if (limit && cur > limit - fresh)
        (void)sp__cache_active_bytes(pool);
    if (limit && cur > limit - fresh && cur + fresh - limit <= sp__give_back_cached(pool)) {
        /* the pool's own cache makes the room: it goes back first, its streams' frees settled
         * as a trim settles them (the pool's driver calls, none of the request's). Where even
         * all of it would not, the refusal below comes from the figures alone, with no CUDA
         * call */
        uint64_t held = sp__usage_current(&pool->fig.usage.held.current);
        uint64_t need = cur + fresh - limit;
        (void)sp__give_back(pool, held > need ? held - need : 0, true, NULL);
        cur = atomic_load_explicit(&pool->fig.limit_used, memory_order_relaxed);
    }
    do {
        if (limit && cur > limit - fresh) {
            sp__usage_count(&pool->fig, SP_COUNT_admission_refusals, 1);
            return SP_ERR_LIMIT;
        }
    } while (!atomic_compare_exchange_weak_explicit(&pool->fig.limit_used, &cur, cur + fresh,
                                                    memory_order_relaxed, memory_order_relaxed));
    sp__usage_count(&pool->fig, SP_COUNT_admissions, 1);
    sp__usage_count(&pool->fig, SP_COUNT_admitted_bytes, fresh);
    *claim = fresh;
    return SP_OK;
}

void sp__limit_admit_release(sp_pool *pool, uint64_t claim)
{
    if (claim)
        (void)sp__usage_current_add(&pool->fig.limit_used, -(int64_t)claim);
}
