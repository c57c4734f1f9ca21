/* Timelines (fence.c): each stream's frees advance an epoch; fences say which epochs
 * completed; a tag (stream cache, epoch) is settled once one did. Above the stream caches,
 * below the tiers. */
#ifndef SP_FENCE_H
#define SP_FENCE_H

#include "cache.h"

/* A miss looks for a fenced block in at most this many other streams' caches (newest first),
 * taking what is known settled with no CUDA call. Of the candidates pending on other streams it
 * asks about the one that would serve it best, once (a covering fence, else the stream: one
 * call, never a record); every other pending candidate's stream is marked (fence_wanted), and
 * that stream's own thread learns what its stream completed at its next step, in one call that
 * settles every free it made for every later miss (sp__fence_early). */
#define SP_STEAL_PROBES 64
/* Asks per miss about live streams, and, separately, about released ones (their owner is gone
 * and cannot publish: an event query of the final fence that covers their frees). */
#define SP_STEAL_ASKS 1
/* At most this many fences pending per stream: past it, the newest is re-recorded instead. */
#define SP_FENCE_CAP 8

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
/* Whether fence f has completed: an event query in the calling thread's own capture mode. */
int sp__fence_query(const sp_fence *f, bool *done);
void sp__fence_recycle(sp_fence_pool *fp, sp_fence *f);

/* Is the tag (c, epoch) settled (c NULL: yes)? Reads only what is known (no CUDA call) unless
 * `ask`: then the stream is queried or a covering fence recorded and queried (best effort: a
 * failing call leaves it unsettled and is counted). */
bool sp__fence_tag_settled(sp_stream_cache *c, uint64_t epoch, bool ask);
/* What one miss knows and has asked: the released streams it asked about (at most
 * SP_STEAL_ASKS, each once), whether its own stream was idle when its thread last asked, and
 * its coalesce. */
typedef enum { SP_IDLE_UNKNOWN, SP_IDLE_YES, SP_IDLE_NO } sp_idle;
typedef struct {
    int asks, released_asks; /* live streams asked, released ones asked: each within its budget */
    sp_stream_cache *asked[2 * SP_STEAL_ASKS];
    sp_idle own_idle;  /* the allocating stream, as sp__fence_early found it in this miss */
    uint32_t coalesce; /* this miss's coalesce of its heap (sp_heap.coalesces); 0 if none */
    /* what the take that served the miss counted, where it counted it (heap.c, small.c):
     * the allocation's outcome, as the stats say it */
    enum { SP_TOOK_PLAIN, SP_TOOK_REUSE, SP_TOOK_WAIT } took;
} sp_ask_budget;
/* Is the tag settled, for a miss? By what is known; if not, marks a live stream for its owner to
 * publish (no CUDA call), and asks about a released one within the budget (one event query). */
bool sp__fence_tag_settled_within(sp_ask_budget *ab, sp_stream_cache *c, uint64_t epoch);
/* Makes `stream` wait until the tag is settled (a covering fence, recorded if needed);
 * SP_OK if it now is ordered after it. */
int sp__fence_tag_wait(sp_stream_cache *c, uint64_t epoch, cudaStream_t stream);
/* Blocks the host until the tag is settled (a covering fence, else the stream), for trim and
 * out of memory only; never on a capturing stream. SP_OK once settled. */
int sp__fence_tag_sync(sp_stream_cache *c, uint64_t epoch);
/* Blocks the host until the segments given back to the driver on c's stream are observed
 * complete (a synchronize, if any went back since the last), so that a trim can release their
 * pages; for trim and out of memory only. SP_OK once observed (or none). */
int sp__fence_observe_driver_frees(sp_stream_cache *c);
/* Publishes what c's stream has completed when another stream's miss wanted its frees
 * (fence_wanted): an idle stream settles all its frees at once (one query), a busy one gets a
 * fence right behind them. Called by c's own thread on the large path and on a miss, before it
 * enqueues new work; returns what it found of the stream (SP_IDLE_UNKNOWN if not asked). No CUDA
 * call unless wanted: a stream that only hits its own cache makes none. */
sp_idle sp__fence_early(sp_stream_cache *c);
/* A released stream's final fence covering all its frees; on failure, synchronizes it. */
int sp__fence_final(sp_stream_cache *c);
/* A segment went back to the driver with cudaFreeAsync on c's own stream `on`: notes it for a
 * trim (driver_frees) and, if c was released meanwhile, records its final fence behind it. */
void sp__fence_gave_back(sp_stream_cache *c, cudaStream_t on);
/* Recycles every fence of the pool's caches, live and released (at pool destroy). */
void sp__fence_drop_all(sp_pool *pool);
/* A request's end with the host's word that c's stream is synchronized past every free made on
 * it so far: all of them settle, with no CUDA call. */
void sp__fence_settle_synchronized(sp_stream_cache *c);
/* A request's end in stream order: one fence behind all of c's frees so far if another stream's
 * miss wanted c's memory (fence_wanted), unless they are settled or a fence covers them
 * already; true if one was recorded. Nobody wanted it: no call, as for a plain free. */
bool sp__fence_frees(sp_stream_cache *c);
/* The owner thread records a fence behind its frees so far, for another thread that asked
 * (fence_wanted: another stream's miss wanted memory this stream freed): a new fence, never a
 * move of one recorded before, unless the stream is at its cap on fences. Best effort. */
void sp__fence_offer(sp_stream_cache *c);

#endif /* SP_FENCE_H */
