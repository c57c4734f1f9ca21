/* The pool's limit (limit.c): claims under it, and admission. */
#ifndef SP_LIMIT_H
#define SP_LIMIT_H

#include "pool.h"

/* Claims `size` bytes of the pool's limit before the driver is asked, so that concurrent
 * allocations can never together pass it. The claim moves limit_used only: held bytes and
 * their peaks and totals follow when the driver said yes, with the block carved from them
 * (sp__usage_commit), so that a refused request changes nothing, not even for a stats read made
 * while the driver is asked. */
/* A claim under the limit, and how much of it came from an admitted request's own claim. */
typedef struct {
    sp_req *req;    /* the request the allocation is for, or NULL */
    uint64_t drawn; /* bytes of the claim taken from req->claim (in limit_used already) */
} sp_limit_claim;

/* Claims `size` bytes under the pool's limit (an admitted request's own claim first); false,
 * with nothing claimed, if they would pass it. */
bool sp__limit_claim(sp_pool *pool, uint64_t size, sp_limit_claim *k);
/* Undoes a claim the driver refused. */
void sp__limit_unclaim(sp_pool *pool, uint64_t size, sp_limit_claim *k);

/* Admission (sp_request_begin_with): claims under the limit what a fresh allocation of
 * `expected` bytes takes from the driver (a slab for a small request, whole driver pages for a
 * large one; at most the limit), before any CUDA call. SP_OK with the bytes in *claim;
 * SP_ERR_NEVER_FITS if the request is larger than the limit itself, SP_ERR_LIMIT if the limit
 * has no room for it now. Counted either way. */
int sp__limit_admit(sp_pool *pool, uint64_t expected, uint64_t *claim);
/* Gives back what is left of an admitted request's claim, at its end. */
void sp__limit_admit_release(sp_pool *pool, uint64_t claim);

#endif /* SP_LIMIT_H */
