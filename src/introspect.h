/* Per-stream figures and the introspection of streams and pointers (introspect.c); the inline
 * figures the hot path keeps are in stream_figures.h. */
#ifndef SP_INTROSPECT_H
#define SP_INTROSPECT_H

#include "stream_figures.h"

/* introspect.c: the figures the hot path leaves to a call of its own, below the miss ladder
 * that calls them */
void sp__introspect_note_foreign_free(sp_free_note n);
/* An allocation served by the miss ladder (its bytes went to the pool's figures directly):
 * counted for the stream, and as a steal when b was last freed on another stream. Takes
 * c->lock (and then the other cache's) itself. */
void sp__introspect_note_miss(sp_stream_cache *c, sp_block *b, size_t bytes);

/* The pool's table of streams for sp_pool_summary (takes pool->lock). */
void sp__introspect_streams_table(sp_pool *pool, char *buf, size_t len, size_t *used,
                       const char *(*human)(uint64_t, char[16]));

#endif /* SP_INTROSPECT_H */
