/* A stream's park (park.c): its last large frees, outside the heap. */
#ifndef SP_PARK_H
#define SP_PARK_H

#include "heap.h"

/* The park (c->lock held): a parked range for a large request of `size` (rounded) bytes that
 * best fit could not beat, never split (medium: the exact size; huge: a segment of the size a
 * fresh one would have), or NULL. */
sp_block *sp__park_take_locked(sp_stream_cache *c, size_t size);
/* Parks b, freed on c's stream at b->epoch (c->lock held); returns the oldest parked range if
 * the park was full, for the caller to sp__park_put once the spin lock is dropped. */
sp_block *sp__park_push_locked(sp_stream_cache *c, sp_block *b);
/* Empties c's park (c->lock held) onto `list` (linked by ->next); returns the list. */
sp_block *sp__park_take_all_locked(sp_stream_cache *c, sp_block *list);
/* Puts parked ranges (a list from sp__park_take_all_locked or one evicted range) into the
 * segment heap with their own tags; takes the heap's lock (caller holds none, or pool->lock). */
void sp__park_put(sp_pool *pool, sp_block *list);
/* The same with the segment heap's lock held. */
void sp__park_put_locked(sp_heap *h, sp_block *list);
/* Flushes c's park into the heap (pool->lock may be held). */
void sp__park_flush(sp_pool *pool, sp_stream_cache *c);
/* Flushes every live stream's park into the heap; takes pool->lock (caller holds no pool or
 * heap lock). */
void sp__park_flush_all(sp_pool *pool);

#endif /* SP_PARK_H */
