/* Timelines (fence.c): each stream's frees advance an epoch; fences say which epochs
 * completed; a tag (stream cache, epoch) is settled once one did. Above the stream caches,
 * below the tiers. */
#ifndef SP_FENCE_H
#define SP_FENCE_H

#include "cache.h"

/* A miss looks for a fenced block in at most this many other streams' caches (newest first),
 * taking first what is known settled (no CUDA call), and asks the driver (stream query, fence
 * record or query) about at most SP_STEAL_ASKS of them; a segment scan asks about at most
 * SP_STEAL_ASKS free ranges, and only once no range known usable fits. */
#define SP_STEAL_PROBES 64
#define SP_STEAL_ASKS 8
/* An unanswered ask about a stream fences its next SP_FENCE_INTEREST large frees (one event,
 * re-recorded): enough to cover a few requests' frees until the next ask renews it, and a
 * stream no one asks about goes back to making no CUDA call on the hot path. */
#define SP_FENCE_INTEREST 64
/* A miss reads at most this many older fences of streams it asked already (each read is an
 * event query; sp-bench serve made 14-23 of them per request with the ask budget instead). */
#define SP_FENCE_READS 2

/* ---- fences (fence.c) ----
 * An event recorded on a stream after some of its frees (struct sp_fence, private to fence.c);
 * it covers every block freed there with an epoch <= its own. Never recorded per free. A tag
 * (cache, epoch) is settled once a covering fence completed; the cache remembers that as
 * done_epoch. */

typedef struct {
    sp_spin lock;              /* a spin leaf: a list push or pop, nothing else, under it */
    int device;
    sp_fence *free_fences;     /* recycled, events kept for re-recording */
} sp_fence_pool;

int sp__fence_pool_init(sp_fence_pool *fp, int device);
void sp__fence_pool_destroy(sp_fence_pool *fp);
/* Records a new fence on `stream` covering `epoch`. */
int sp__fence_record(sp_fence_pool *fp, cudaStream_t stream, uint64_t epoch, sp_fence **out);
void sp__fence_recycle(sp_fence_pool *fp, sp_fence *f);

/* Is the tag (c, epoch) settled (c NULL: yes)? Reads only what is known (no CUDA call) unless
 * `ask`: then the stream is queried or a covering fence recorded and queried (best effort: a
 * failing call leaves it unsettled and is counted). */
bool sp__tag_settled(sp_stream_cache *c, uint64_t epoch, bool ask);
/* One miss asks the driver about at most SP_STEAL_ASKS streams, each at most once: a stream
 * that was busy a moment ago is not asked again within the same miss. */
typedef struct {
    int asks;
    sp_stream_cache *asked[SP_STEAL_ASKS];
    int reads; /* queries of older fences of streams already asked, at most SP_FENCE_READS */
    uint32_t coalesce; /* this miss's coalesce of its heap (sp_heap.coalesces); 0 if none */
} sp_ask_budget;
/* sp__tag_settled within a miss's budget: asks only about a stream not yet asked; about one
 * asked already, only reads a fence recorded before (within the budget). */
bool sp__tag_settled_within(sp_ask_budget *ab, sp_stream_cache *c, uint64_t epoch);
/* Makes `stream` wait until the tag is settled (a covering fence, recorded if needed);
 * SP_OK if it now is ordered after it. */
int sp__tag_wait(sp_stream_cache *c, uint64_t epoch, cudaStream_t stream);
/* Blocks the host until the tag is settled (a covering fence, else the stream), for trim and
 * out of memory only; never on a capturing stream. SP_OK once settled. */
int sp__tag_sync(sp_stream_cache *c, uint64_t epoch);
/* Blocks the host until the segments given back to the driver on c's stream are observed
 * complete (a synchronize, if any went back since the last), so that a trim can release their
 * pages; for trim and out of memory only. SP_OK once observed (or none). */
int sp__cache_observe_driver_frees(sp_stream_cache *c);
/* Publishes what c's stream has completed when another stream's miss asked about it and found
 * its frees unsettled (fence_wanted): an idle stream settles all its frees at once, a busy one
 * gets a fence right behind them. Called by c's own thread on the large path and on a miss,
 * before it enqueues new work. No CUDA call unless asked: a stream that only hits its own cache
 * makes none. */
void sp__fence_early(sp_stream_cache *c);
/* A released stream's final fence covering all its frees; on failure, synchronizes it. */
int sp__cache_final_fence(sp_stream_cache *c);
/* A segment went back to the driver with cudaFreeAsync on c's own stream `on`: notes it for a
 * trim (driver_frees) and, if c was released meanwhile, records its final fence behind it. */
void sp__cache_gave_back(sp_stream_cache *c, cudaStream_t on);
/* Recycles every fence of the pool's caches, live and released (at pool destroy). */
void sp__pool_drop_fences(sp_pool *pool);
/* A request's end with the host's word that c's stream is synchronized past every free made on
 * it so far: all of them settle, with no CUDA call. */
void sp__cache_settle_synchronized(sp_stream_cache *c);
/* A request's end: one fence behind all of c's frees so far, unless they are settled or a fence
 * covers them already; true if one was recorded. */
bool sp__cache_fence_frees(sp_stream_cache *c);
/* The owner thread records a fence behind its frees so far, for another thread that asked
 * (fence_wanted: it could not record one itself on this thread's cudaStreamPerThread) or for
 * the streams whose asks found frees unsettled (fence_interest): a new fence, never a move of
 * one recorded before, unless the stream is at its cap on fences. Best effort. */
void sp__cache_offer_fence(sp_stream_cache *c);

#endif /* SP_FENCE_H */
