/* Peers (peer.c): which devices may use a pool's memory, and the check that keeps a stream of
 * a device without a read-write grant from being handed a block. Above the pool ledger (a
 * revoked peer's caches are released through it), below the runtime's API. */
#ifndef SP_PEER_H
#define SP_PEER_H

#include "cache.h"
#include "pool.h"

/* sp_alloc's check for a cache whose stream is not known to be of the pool's device
 * (c->peer != SP_PEER_OWN): SP_OK if the stream's device may write the pool's memory, else
 * SP_ERR_NO_ACCESS (or the CUDA error of asking the stream's device). */
int sp__peer_admit(sp_pool *pool, sp_stream_cache *c, cudaStream_t stream);
/* The grants of cfg.peers_read_write / peers_read, given at sp_pool_create (runtime->lock
 * held, the pool not yet registered). */
int sp__peer_grant_initial(sp_pool *pool);
/* Adds the pool's grants to the stats' peers_read_write and peers_read. */
void sp__peer_stats(sp_pool *pool, sp_stats *st);

/* Whether sp_alloc must ask sp__peer_admit: not for a cache known to be of the pool's device. */
static inline bool sp__peer_check_wanted(sp_stream_cache *c)
{
    return atomic_load_explicit(&c->peer, memory_order_relaxed) != SP_PEER_OWN;
}

#endif /* SP_PEER_H */
