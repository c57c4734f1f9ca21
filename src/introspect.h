/* Per-stream figures kept on the hot path (introspect.c reads them). Inline, and only plain
 * fields of the stream's own cache under the spin lock sp_alloc and sp_free already hold: no
 * shared atomic, no clock read, no extra lock when a block is freed on the stream that
 * allocated it. */
#ifndef SP_INTROSPECT_H
#define SP_INTROSPECT_H

#include "internal.h"

/* An allocation of `bytes` served to c's stream by block b (c->lock held). */
static inline void sp__note_alloc_locked(sp_stream_cache *c, sp_block *b, size_t bytes)
{
    b->owner = c;
    b->alloc_stream = c->key.stream;
    b->alloc_seq = ++c->allocs;
    c->live_requested += bytes;
    c->live_active += b->size;
    if (c->live_requested > c->peak_requested)
        c->peak_requested = c->live_requested;
    if (c->live_active > c->peak_active)
        c->peak_active = c->live_active;
}

/* What a free on another stream than the allocation's still owes the allocating stream. */
typedef struct {
    sp_stream_cache *owner;    /* NULL: nothing owed */
    uint64_t requested, size;
} sp_free_note;

/* A free of live block b on c's stream (c->lock held). When another stream allocated it, the
 * caller passes the note to sp__note_foreign_free once c->lock is released (spin locks never
 * nest). */
static inline sp_free_note sp__note_free_locked(sp_stream_cache *c, sp_block *b)
{
    sp_free_note n = {NULL, b->requested, b->size};
    b->freed_by = c;
    if (sp_likely(b->owner == c)) {
        c->live_requested -= b->requested;
        c->live_active -= b->size;
    } else {
        n.owner = b->owner; /* NULL for a capture bypass: nobody to tell */
    }
    return n;
}

/* introspect.c */
void sp__note_foreign_free(sp_free_note n);
/* An allocation served by the miss ladder: counted like a hit's, and as a steal when b was last
 * freed on another stream. Takes c->lock (and then the other cache's) itself. */
void sp__note_miss(sp_stream_cache *c, sp_block *b, size_t bytes);

#endif /* SP_INTROSPECT_H */
