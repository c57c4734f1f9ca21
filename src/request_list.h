/* Request scopes (request.c, the API above the allocator) and the live blocks of a request
 * (request_list.c, a leaf below it that sp_free and the pool's destroy call down into). */
#ifndef SP_REQUEST_H
#define SP_REQUEST_H

#include "block.h"

/* ---- requests (request.c) and their block lists (request_list.c) ---- */

/* the open requests' table: buckets by the top bits of a hash of the id */
#define SP_REQ_BUCKET_BITS 6
#define SP_REQ_BUCKETS (1 << SP_REQ_BUCKET_BITS)
/* A request id is its pool's id in the high bits and a sequence number below: ids are never
 * reused, so an id that the pool gave but no longer holds is an ended request. */
#define SP_REQ_SEQ_BITS 40

typedef struct sp_req {
    /* its block list and figures: a spin leaf (SP_RANK_SPIN), nothing taken under it. The
     * owner's allocations and any thread's sp_free of one of its blocks take it, never under
     * another spin lock. */
    sp_spin lock;
    /* set under `lock` by its end before it takes the list: an allocation that links after it
     * is refused (SP_ERR_REQUEST_ENDED), so no block ever points at an ended request */
    bool ended;
    /* the table's reference (dropped by the end) plus one per sp_request_alloc in flight,
     * taken under pool->lock where it finds the request: the last one frees the structure and
     * gives back what is left of its claim (request.c), so that an end racing an allocation
     * never frees what the allocation still reads */
    atomic_uint refs;
    sp_request id;
    sp_pool *pool;
    cudaStream_t stream;
    sp_block *blocks;          /* live allocations, newest first */
    uint64_t live_requested;
    sp_request_stats st;
    /* what is left of its admission claim (sp_request_begin_with): bytes counted in its pool's
     * limit_used that its allocations' driver allocations draw on first (pool.c) */
    atomic_uint_least64_t claim;
    char label[SP_POOL_NAME_MAX + 1];
    struct sp_req *next;       /* in its pool's table */
} sp_req;

/* Adds live block b (allocated for r, `missed`: not by a hit on its stream's cache) to r's list
 * and figures; false, adding nothing, if r's end has taken its list already. */
bool sp__req_link(sp_req *r, sp_block *b, bool missed);
/* Marks r ended: from now on sp__req_link refuses. */
void sp__req_mark_ended(sp_req *r);
/* b is being freed: it leaves its request (b->req, not NULL), counted as a free before the
 * end; returns that request. */
sp_req *sp__req_forget(sp_block *b);
/* Undoes sp__req_forget for a free that failed: b is live again, in r. */
void sp__req_unforget(sp_req *r, sp_block *b);
/* Empties r's list onto an array of at most `cap` pointers (each block leaves the request, as
 * freed at the end); returns how many, with their requested bytes added to *bytes. */
size_t sp__req_take(sp_req *r, void **ptrs, size_t cap, uint64_t *bytes);
/* Frees the structures of a pool's open requests (`table`: its SP_REQ_BUCKETS buckets), at the
 * pool's destroy. */
void sp__req_free_all(sp_req **table);

#endif /* SP_REQUEST_H */
