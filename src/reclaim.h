/* Out of memory across pools (reclaim.c): a rung of the miss ladder, above the pool ledger and
 * below the allocator. */
#ifndef SP_RECLAIM_H
#define SP_RECLAIM_H

#include "base.h"

/* ---- reclaim.c: out of memory across pools ---- */

/* Asks the other pools of the runtime, lowest priority first, to give their cached memory back
 * (never below their reservation) until the device has room for `bytes` (or they gave that
 * much back); true if any did, or if the device has the room already. */
bool sp__reclaim_others(sp_pool *pool, size_t bytes);
/* Calls the user's out-of-memory callback (not from inside itself); true: retry. */
bool sp__reclaim_oom_callback(sp_pool *pool, size_t bytes, cudaStream_t stream);
/* Records the report for sp_runtime_last_oom of a failure with `status` (SP_ERR_OUT_OF_MEMORY
 * or SP_ERR_LIMIT) of a request of `bytes` (`rounded` as the pool would have held it). */
void sp__reclaim_oom_record(sp_pool *pool, size_t bytes, size_t rounded, cudaStream_t stream, int status);

#endif /* SP_RECLAIM_H */
