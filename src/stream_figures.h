/* Per-stream figures kept on the hot path (introspect.c reads them; cache.c flushes them). Inline, and only plain
 * fields of the stream's own cache under the spin lock sp_alloc and sp_free already hold: no
 * shared atomic, no clock read, no extra lock when a block is freed on the stream that
 * allocated it. */
#ifndef SP_STREAM_FIGURES_H
#define SP_STREAM_FIGURES_H

#include "cache.h"

/* An allocation served to c's stream by block b (c->lock held). Its bytes are already in the
 * cache's requested_delta and active_delta, which reach the stream's own figures when they are
 * flushed (sp__note_flush_locked): nothing more to add here. */
static inline void sp__note_alloc_locked(sp_stream_cache *c, sp_block *b)
{
    sp_spin_assert_owner(&c->lock);
    b->owner = c;
    b->alloc_seq = ++c->allocs;
}

/* The stream's live figures: what was flushed plus what was not yet. */
static inline uint64_t sp__live_requested(const sp_stream_cache *c)
{
    return c->live_requested + (uint64_t)c->requested_delta;
}

static inline uint64_t sp__live_active(const sp_stream_cache *c)
{
    return c->live_active + (uint64_t)c->active_delta;
}

/* Raises the stream's peaks to its current figures (c->lock held). */
static inline void sp__note_peaks_locked(sp_stream_cache *c)
{
    sp_spin_assert_owner(&c->lock);
    if (sp__live_requested(c) > c->peak_requested)
        c->peak_requested = sp__live_requested(c);
    if (sp__live_active(c) > c->peak_active)
        c->peak_active = sp__live_active(c);
}

/* The cache's unflushed deltas are about to go to the pool's figures (c->lock held): they join
 * the stream's own, and its peaks follow, so that a stream's peak is exact when
 * stats_flush_bytes is 0 and otherwise misses by no more than the pool's. */
static inline void sp__note_flush_locked(sp_stream_cache *c)
{
    sp_spin_assert_owner(&c->lock);
    sp__note_peaks_locked(c);
    c->live_requested = sp__live_requested(c);
    c->live_active = sp__live_active(c);
}

/* What a free on another stream than the allocation's still owes the allocating stream. */
typedef struct {
    sp_stream_cache *owner;    /* NULL: nothing owed */
    uint64_t requested, size;
} sp_free_note;

/* A free of live block b on c's stream (c->lock held), whose bytes the caller takes off c's
 * deltas. When another stream allocated it, c gets them back and the caller passes the note
 * to sp__introspect_note_foreign_free once c->lock is released (spin locks never nest). */
static inline sp_free_note sp__note_free_locked(sp_stream_cache *c, sp_block *b)
{
    sp_spin_assert_owner(&c->lock);
    sp_free_note n = {NULL, 0, 0};
    b->freed_by = c;
    if (sp_unlikely(b->owner != c) && b->owner) {
        n = (sp_free_note){b->owner, b->requested, b->size};
        c->live_requested += b->requested;
        c->live_active += b->size;
    }
    return n;
}

#endif /* SP_STREAM_FIGURES_H */
