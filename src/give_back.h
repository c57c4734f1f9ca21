/* Giving cached memory back to the driver (give_back.c). */
#ifndef SP_GIVE_BACK_H
#define SP_GIVE_BACK_H

#include "pool.h"

/* The bytes the pool holds and no allocation uses. */
uint64_t sp__give_back_cached(sp_pool *pool);
/* Gives back every byte the pool holds, first settling what was freed on every stream: a trim
 * to nothing. SP_OK once no slab or segment is left, else the first error. */
int sp__give_back_everything(sp_pool *pool);

/* The reserved and used bytes of the pool's cudaMemPools: its current one and those a raised
 * limit replaced. */
int sp__give_back_cuda_usage(sp_pool *pool, uint64_t *reserved, uint64_t *used);
/* Gives cached memory back to the driver until the pool holds at most `keep` bytes (largest
 * segments first); with `sync`, orders and synchronizes those frees and trims the cudaMemPool
 * (never below the reservation). Returns the bytes the pool stopped holding or, with `sync`,
 * what its cudaMemPool released if more (pages of segments given back earlier); *err (if not
 * NULL) gets the first CUDA error. */
uint64_t sp__give_back(sp_pool *pool, uint64_t keep, bool sync, int *err);
/* Over its cache limit, the pool gives cached memory back: settled memory, and with `me` (the
 * cache of a free's `stream`, not capturing) what that stream freed, on it, however much work
 * it still has queued (rule 3). me NULL: settled memory only, on the service stream. */
void sp__give_back_to_cache_limit(sp_pool *pool, uint64_t cache_limit, sp_stream_cache *me,
                                  cudaStream_t stream);

#endif /* SP_GIVE_BACK_H */
