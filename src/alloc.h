/* The allocator (alloc.c): sp_alloc and sp_free, and the one internal call that every way into
 * allocation goes through, with its context explicit (no thread-local carries it). Above the
 * pool ledger, below the API's request scopes. */
#ifndef SP_ALLOC_H
#define SP_ALLOC_H

#include "pool.h"

/* ---- alloc.c: one allocation call ---- */

typedef struct {
    /* in */
    sp_pool *pool;
    size_t bytes;
    cudaStream_t stream;
    struct sp_req *req;   /* the admitted request it is for: its claim is drawn first; or NULL */
    /* out, with SP_OK */
    sp_block *block;      /* the block, live; NULL for 0 bytes */
    sp_outcome outcome;   /* how it was served */
} sp_alloc_call;

/* sp_alloc with its context explicit, checked (check_free_order:1) and recorded (a trace) as
 * sp_alloc is. */
int sp__alloc(sp_alloc_call *a);

#endif /* SP_ALLOC_H */
