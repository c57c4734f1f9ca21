/* Small blocks (small.c): a stream cache's bins (newest at the head), steals and the way back to the slabs. */
#ifndef SP_SMALL_H
#define SP_SMALL_H

#include "heap.h"

/* ---- small blocks (small.c): the bins of a stream cache (newest at the head) ---- */
void sp__small_bin_push(sp_bin *bin, sp_block *b);
sp_block *sp__small_bin_pop_newest(sp_bin *bin);
void sp__small_bin_remove(sp_bin *bin, sp_block *b);
/* A block of class cls (or up to SP_FIT_CLASSES larger) that another stream cached. */
sp_block *sp__small_steal(sp_pool *pool, sp_stream_cache *me, uint32_t cls, cudaStream_t stream,
                          sp_take_mode mode, sp_ask_budget *ab);
/* Empties a cache's bins into a list (c->lock held), and returns such a list to the slabs,
 * each block tagged with its free on c's stream. */
sp_block *sp__small_take_all(sp_stream_cache *c);
void sp__small_to_slabs(sp_pool *pool, sp_stream_cache *c, sp_block *list);
/* Every small block cached in the pool's live stream bins back to its slab, tagged. */
void sp__small_flush_bins(sp_pool *pool);

#endif /* SP_SMALL_H */
