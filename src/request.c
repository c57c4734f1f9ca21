/* Request scopes: the allocations a server makes for one request on (pool, stream), freed at
 * the request's end if still live, with the request's frees settled for other streams at a
 * constant cost there (one fence, or none when the server says it synchronized the stream).
 * A request is an id in its pool's table (under pool->lock, taken only to begin and end),
 * never reused, so that misuse of an ended one is told apart and changes nothing. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "capture.h"
#include "names.h"
#include "limit.h"
#include "config.h"
#include "cache.h"
#include "fence.h"
#include "heap.h"
#include "format.h"
#include "free_order.h"
#include "ptrmap.h"
#include "request_list.h"
#include "alloc.h"
#include "runtime.h"
#include "status.h"
#include "trace.h"
#include "versioned.h"

static sp_req **bucket(sp_pool *pool, sp_request id)
{
    return &pool->requests[(id * 0x9E3779B97F4A7C15ull) >> (64 - SP_REQ_BUCKET_BITS)];
}

static uint64_t pool_tag(const sp_pool *pool)
{
    return pool->id & ((1ull << (64 - SP_REQ_SEQ_BITS)) - 1);
}

/* The open request `id` of pool (pool->lock held), or why not: SP_ERR_WRONG_POOL for an id
 * another pool gave, SP_ERR_REQUEST_ENDED for one this pool gave and ended, SP_ERR_NO_REQUEST
 * for any other (0, or high bits that name no pool ever made). With `detach`, it leaves the
 * table (its end); without, it is pinned (a reference the caller drops with put). */
static int find_locked(sp_pool *pool, sp_request id, bool detach, sp_req **out)
{
    sp_mutex_assert_owner(&pool->lock);
    if (id == 0)
        return SP_ERR_NO_REQUEST;
    for (sp_req **p = bucket(pool, id); *p; p = &(*p)->next)
        if ((*p)->id == id) {
            *out = *p;
            if (detach)
                *p = (*p)->next;
            else
                atomic_fetch_add_explicit(&(*p)->refs, 1, memory_order_relaxed);
            return SP_OK;
        }
    uint64_t seq = id & ((1ull << SP_REQ_SEQ_BITS) - 1);
    if (id >> SP_REQ_SEQ_BITS != pool_tag(pool))
        return seq >= 1 && sp__pool_tag_given(id >> SP_REQ_SEQ_BITS) ? SP_ERR_WRONG_POOL
                                                                     : SP_ERR_NO_REQUEST;
    return seq >= 1 && seq <= pool->request_seq ? SP_ERR_REQUEST_ENDED : SP_ERR_NO_REQUEST;
}

/* Drops a reference to r: the last one (its end's, or that of an allocation the end raced)
 * gives back what is left of its claim and frees it. An allocation that drew on the claim and
 * was refused by the driver puts the bytes back after the end may have released the claim:
 * they go back to the pool here. */
static void put(sp_pool *pool, sp_req *r)
{
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    sp__limit_admit_release(pool, atomic_exchange_explicit(&r->claim, 0, memory_order_relaxed));
    free(r);
}

/* Opens a request holding `claim` bytes of its pool's limit (0: none); on failure the claim
 * goes back. */
static int open_request(sp_pool *pool, cudaStream_t stream, const char *label, uint64_t claim,
                        sp_request *out)
{
    size_t len = label ? strnlen(label, SP_POOL_NAME_MAX + 1) : 0;
    sp_req *r = calloc(1, sizeof *r);
    if (!r) {
        sp__limit_admit_release(pool, claim);
        return SP_ERR_NO_HOST_MEMORY;
    }
    sp_spin_init(&r->lock, SP_RANK_SPIN, "request->lock");
    atomic_init(&r->claim, claim);
    atomic_init(&r->refs, 1); /* the table's */
    r->pool = pool;
    r->stream = stream;
    if (len)
        memcpy(r->label, label, len);
    r->st.size = sizeof r->st;
    atomic_store_explicit(&pool->requests_used, true, memory_order_relaxed);
    sp_mutex_lock(&pool->lock);
    if (pool->request_seq + 1 >= 1ull << SP_REQ_SEQ_BITS) {
        sp_mutex_unlock(&pool->lock);
        sp__limit_admit_release(pool, claim);
        free(r);
        return SP_ERR_NO_REQUEST; /* 2^40 requests in one pool: no id is left to give */
    }
    r->id = pool_tag(pool) << SP_REQ_SEQ_BITS | ++pool->request_seq;
    r->st.id = r->id;
    sp_req **b = bucket(pool, r->id);
    r->next = *b;
    *b = r;
    sp_mutex_unlock(&pool->lock);
    *out = r->id;
    return SP_OK;
}

static bool label_ok(const char *label)
{
    size_t len = label ? strnlen(label, SP_POOL_NAME_MAX + 1) : 0;
    return len <= SP_POOL_NAME_MAX && (!len || sp__names_check_pool(label) == SP_OK);
}

int sp_request_begin(sp_pool *pool, cudaStream_t stream, const char *label, sp_request *out)
{
    if (!pool || !out || !label_ok(label))
        return SP_ERR_INVALID;
    return open_request(pool, stream, label, 0, out);
}

int sp_request_begin_with(sp_pool *pool, cudaStream_t stream, const sp_request_config *cfg,
                          sp_request *out)
{
    if (!pool || !out || !cfg)
        return SP_ERR_INVALID;
    int rc = sp__struct_check(cfg, SP__MIN_REQUEST_CONFIG, "sp_request_begin_with",
                              "sp_request_config");
    if (rc != SP_OK)
        return rc;
    if (!label_ok(cfg->label))
        return SP_ERR_INVALID;
    /* admission: the claim is taken, or refused, before the request makes any CUDA call */
    uint64_t claim = 0;
    if (cfg->expected_bytes) {
        if (cfg->expected_bytes > SP_MAX_ALLOC)
            return SP_ERR_TOO_LARGE;
        int rc = sp__limit_admit(pool, cfg->expected_bytes, &claim);
        if (rc != SP_OK)
            return rc;
    }
    return open_request(pool, stream, cfg->label, claim, out);
}

int sp_request_alloc(sp_pool *pool, sp_request req, void **ptr, size_t bytes)
{
    if (!pool || !ptr)
        return SP_ERR_INVALID;
    sp_mutex_lock(&pool->lock);
    sp_req *r = NULL;
    int rc = find_locked(pool, req, false, &r); /* pinned: an end cannot free it under us */
    sp_mutex_unlock(&pool->lock);
    if (rc != SP_OK)
        return rc;
    /* one call, its context explicit: the request's claim is drawn first, and the block and
     * its outcome come back, so the request links it without looking it up again */
    sp_alloc_call a = {.pool = pool, .bytes = bytes, .stream = r->stream, .req = r};
    rc = sp__alloc(&a);
    void *p = rc == SP_OK && a.block ? a.block->ptr : NULL;
    if (p && !sp__req_link(r, a.block, a.outcome != SP_OUTCOME_HIT)) {
        /* the end took the request's list before this block could join it: refused, and
         * the block goes back on the request's stream like the end's own frees (were
         * that free refused, the caller gets its error and the block, to free) */
        int frc = sp_free(pool, p, r->stream);
        rc = frc == SP_OK ? SP_ERR_REQUEST_ENDED : frc;
        if (frc == SP_OK)
            p = NULL;
    }
    if (rc == SP_OK || p)
        *ptr = p;
    put(pool, r);
    return rc;
}

int sp_request_end(sp_pool *pool, sp_request req, unsigned flags, sp_request_stats *out)
{
    if (!pool || (flags & ~SP_REQUEST_SYNCHRONIZED))
        return SP_ERR_INVALID;
    if (out && sp__struct_check(out, SP__MIN_REQUEST_STATS, "sp_request_end", "sp_request_stats"))
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    sp_mutex_lock(&pool->lock);
    sp_req *r = NULL;
    int rc = find_locked(pool, req, true, &r);
    sp_mutex_unlock(&pool->lock);
    if (rc != SP_OK)
        return rc;
    /* no allocation joins from here on: those in flight are refused (sp_request_alloc) */
    sp__req_mark_ended(r);
    /* what is still live goes back on the request's stream, in its order */
    void *ptrs[64];
    size_t n;
    while ((n = sp__req_take(r, ptrs, sizeof ptrs / sizeof *ptrs, &r->st.freed_at_end_bytes))) {
        for (size_t i = 0; i < n; i++) {
            int frc = sp_free(pool, ptrs[i], r->stream);
            if (frc == SP_OK)
                r->st.freed_at_end++;
            else if (rc == SP_OK)
                rc = frc;
        }
    }
    sp_stream_cache *c = sp__cache_get(pool, sp__cache_key(r->stream));
    bool capturing = false;
    if (c && sp__capture_possible(pool->dev) && sp__capture_check(c, &capturing) != SP_OK)
        capturing = true;
    if (c && !capturing) {
        if ((flags & SP_REQUEST_SYNCHRONIZED) && sp__free_order_settled(pool->dev, r->stream, &rc))
            sp__fence_settle_synchronized(c);
        else if (sp__fence_frees(c))
            r->st.fences_recorded = 1; /* the pool counted it where it was recorded */
    }
    /* what the request's allocations did not draw of its claim is the pool's headroom again */
    sp__limit_admit_release(pool, atomic_exchange_explicit(&r->claim, 0, memory_order_relaxed));
    sp__trace_request(pool, r->id, r->stream, r->st.requested_peak);
    if (out)
        sp__struct_write(out, &r->st, sizeof r->st);
    put(pool, r); /* the table's reference: an allocation still in flight frees it */
    return rc;
}
