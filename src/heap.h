/* The tiers: segments and slabs in heaps with best fit, split and merge (heap.c), small
 * blocks in per-stream bins (small.c), and the blocks a capturing stream keeps aside
 * (capture.c). Above the timelines, below the pool ledger. */
#ifndef SP_HEAP_H
#define SP_HEAP_H

#include "fence.h"

/* ---- segments and slabs (heap.c) ----
 * A heap holds a pool's segments of one tier (slabs for small blocks, segments for large
 * ranges) and indexes their free ranges by size for best fit. Under its mutex. */
struct sp_segment {
    void *ptr;
    size_t size;
    size_t used;               /* bytes not free in the heap (live, or cached in a stream bin) */
    bool huge;                 /* for requests over SP_MEDIUM_MAX only */
    /* its one range is in no ptrmap (no host memory for it, and the driver refused it back):
     * never handed out, only held until a give-back gives it to the driver */
    bool unmapped;
    sp_block *first;           /* lowest range */
    sp_segment *prev, *next;
};

#define SP_HEAP_WORDS ((SP_CLASS_COUNT + 63) / 64)

struct sp_heap {
    sp_mutex lock;
    sp_pool *pool;
    bool small;
    sp_segment *segments;
    uint64_t segment_count, segment_bytes, free_bytes;
    uint32_t coalesces;        /* sp__heap_coalesce calls, never 0 once one was made */
    uint64_t nonempty[SP_HEAP_WORDS];
    struct { sp_block *head; } bins[SP_CLASS_COUNT];
};

typedef enum {
    SP_TAKE_KNOWN,   /* settled by what is known, or the same stream: no CUDA call */
    SP_TAKE_SETTLED, /* may ask the driver whether tags are settled */
    SP_TAKE_WAIT,    /* may make the allocating stream wait on a pending fence */
} sp_take_mode;

int sp__heap_init(sp_heap *h, sp_pool *pool, bool small);
/* Carves `size` bytes by best fit from a free range usable by `me` (mode as above); NULL if
 * none. Caller holds h->lock. */
sp_block *sp__heap_take(sp_heap *h, size_t size, sp_stream_cache *me, cudaStream_t stream,
                        sp_take_mode mode, sp_ask_budget *ab);
/* The host structures of a segment with one range, made before the driver is asked for its
 * memory, so that memory the driver gave never waits on host memory to be tracked. NULL
 * without host memory. */
sp_segment *sp__heap_segment_new(void);
void sp__heap_segment_discard(sp_segment *s);
/* Adds a fresh driver allocation as segment s (from sp__heap_segment_new) with one free range tagged
 * (tag, epoch): the allocation is ordered on the allocating stream only. Caller holds the lock.
 * SP_ERR_NO_HOST_MEMORY if the ptrmap cannot take its range (nothing changed, s still the
 * caller's). */
int sp__heap_add_segment(sp_heap *h, sp_segment *s, void *ptr, size_t size, bool huge,
                         sp_stream_cache *tag, uint64_t epoch);
/* Adds s as sp__heap_add_segment would, but unmapped (see sp_segment): for memory that the
 * ptrmap could not take and the driver refused back, which must stay counted where it is held.
 * Cannot fail. Caller holds the lock. */
void sp__heap_keep_unmapped(sp_heap *h, sp_segment *s, void *ptr, size_t size, bool huge,
                            sp_stream_cache *tag, uint64_t epoch);
/* Merges free neighbours whose tags now allow it: a range freed next to another stream's
 * pending one stays apart until both settle. Asks the driver (within the budget) only about the
 * tags of a run of free neighbours that, merged, would hold `size` bytes. Caller holds the
 * takes the lock. */
void sp__heap_coalesce(sp_heap *h, size_t size, sp_stream_cache *me, sp_ask_budget *ab);
/* Returns a block to its segment as a free range tagged (tag, epoch), merging it with free
 * neighbours whose tags allow. Caller holds the lock. */
void sp__heap_put(sp_heap *h, sp_block *b, sp_stream_cache *tag, uint64_t epoch);
/* Gives wholly free, settled segments back to the driver, largest first, until `want` bytes went
 * (or none is left); settled by what is known, or asking the driver with `ask` (and about `me`,
 * the allocating stream, in any case). A miss or a free over the cache limit (`me` not NULL)
 * frees on its own `stream`, which `me`'s thread may use and which is not capturing, ranges it
 * freed itself included, settled or not; anyone else on the service stream. A miss
 * passes its ask budget `ab`, so that no stream is asked twice in one miss. Returns
 * the bytes given back; *err (if not NULL and still SP_OK) gets the first CUDA error. Takes the
 * lock itself; driver frees happen outside it, and a segment the driver refuses stays the
 * pool's. */
uint64_t sp__heap_release(sp_heap *h, uint64_t want, bool ask, sp_stream_cache *me,
                          cudaStream_t stream, sp_ask_budget *ab, int *err);
/* Puts huge block b, just freed on c's stream, back into its segment and gives the segment
 * (now wholly free) to the driver with cudaFreeAsync on `stream`, in that stream's order (rule
 * 3), with no synchronize. A segment the driver refuses stays, tagged with c. Takes the heap's
 * lock; the driver call is made outside it. */
void sp__heap_give_back_huge(sp_heap *h, sp_block *b, sp_stream_cache *c, cudaStream_t stream);
/* Fragmentation figures for stats (the caller flushes the parks first, so that they are exact);
 * takes the lock. */
void sp__heap_stats(sp_heap *h, sp_stats *st);
/* Frees host structures; every segment must have been released. */
void sp__heap_destroy(sp_heap *h);




#endif /* SP_HEAP_H */
