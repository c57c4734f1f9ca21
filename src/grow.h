/* Taking memory from the driver (grow.c). */
#ifndef SP_GROW_H
#define SP_GROW_H

#include "pool.h"

/* A fresh slab or segment of heap h for a request of `size` bytes (rounded), allocated on
 * `stream` whose cache is `me`, and the range carved from it into *out. SP_ERR_LIMIT without
 * asking the driver if it would pass the pool's limit. The block is counted live (`requested`
 * bytes asked) in the same step as the fresh bytes are counted held: no read sees the new
 * memory all cached. An allocation for admitted request `req` (NULL: none) draws on its claim
 * first. */
int sp__grow(sp_pool *pool, sp_heap *h, size_t size, size_t requested, sp_stream_cache *me,
                  cudaStream_t stream, struct sp_req *req, sp_block **out);
/* A graph-capture bypass: the request's own driver allocation, never cached (rule 24), counted
 * live and held in one step, like sp__grow's block. */
int sp__grow_bypass(sp_pool *pool, size_t bytes, cudaStream_t stream, struct sp_req *req,
                          sp_block **out);
/* Gives a bypass block straight back to the driver on `stream`. */
void sp__grow_bypass_free(sp_pool *pool, sp_block *b, cudaStream_t stream);

#endif /* SP_GROW_H */
