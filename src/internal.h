/* streampool internals: the types every layer shares and the prototypes of each file, grouped
 * under the name of the file that defines them. Public names are sp_*, cross-file internal
 * names sp__*, file-local ones static. */
#ifndef SP_INTERNAL_H
#define SP_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "streampool.h"
#include "witness.h"

/* ERROR POLICY (issue 10), followed everywhere:
 *  - A best-effort step (probing another stream's cache, recording or querying a fence, giving
 *    cache back) never fails the request: on a CUDA error it is skipped and counted
 *    (SP_COUNT_skipped_steps), and the ladder goes on to the next step.
 *  - A step that gives memory back never forgets it: if cudaFreeAsync refuses a segment, the
 *    segment stays owned and counted as held, to be given back later.
 *  - Ordering is never skipped: if the wait that orders a free after a stream's pending work
 *    fails, that stream is synchronized instead; if that fails too, the memory stays cached.
 *  - sp_pool_trim and sp_pool_destroy return the first CUDA error instead of SP_OK.
 *  - Graph capture (CUDA-SEMANTICS 24-26): a capturing stream's allocations go straight to the
 *    driver; a block allocated before the capture and freed during it is kept aside in its
 *    stream's cache (never cudaFreeAsync inside the capture) and goes back to its slab or
 *    segment when the capture ends. Nothing queries, records a fence on, waits on or
 *    synchronizes a capturing stream (declared: its caches' `capturing` flag; ALWAYS: asked of
 *    cudaStreamIsCapturing first), nor the legacy stream while any capture is declared;
 *    fences recorded before the capture are still queried. While a capture may be under way,
 *    event queries and synchronizes run in relaxed capture mode, and cudaMemPool attribute
 *    reads and writes and trims always do (in global mode they would invalidate the capture:
 *    cuda.c).
 *
 * LOCK ORDER: witness.h, as ranks that debug and test builds check on every lock.
 */

#define sp_likely(x) __builtin_expect(!!(x), 1)
#define sp_unlikely(x) __builtin_expect(!!(x), 0)

/* n rounded up to a multiple of `to` */
static inline size_t sp__round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* ---- a spin lock for the short critical sections of the hot path ---- */

typedef struct {
    atomic_int held;
} sp_spin;

/* A spin lock of rank SP_RANK_SPIN, or of `rank` (witness.h) */
static inline void sp_spin_lock_ranked(sp_spin *l, sp_rank rank)
{
    sp__witness_acquire(rank, l);
    for (unsigned spins = 0;; spins++) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        while (atomic_load_explicit(&l->held, memory_order_relaxed))
            if (++spins > 64)
                sched_yield(); /* the holder may be descheduled: let it run */
    }
}

static inline void sp_spin_lock(sp_spin *l)
{
    sp_spin_lock_ranked(l, SP_RANK_SPIN);
}

static inline void sp_spin_unlock(sp_spin *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
    sp__witness_release(l);
}

/* ---- small requests (small.c): size classes, bins, steals, slabs ----
 * 256-byte steps up to 4 KiB, then 16 classes per power of two: rounding waste is under 256
 * bytes below 4 KiB and under 1/16 (6.25%) of the request above. */
#define SP_CLASS_COUNT (16 + 34 * 16) /* up to SP_MAX_ALLOC = 2^46 */

/* Two tiers. Requests up to SP_SMALL_MAX are rounded to their size class and cached per stream
 * in bins (the hot path); their blocks are carved from SP_SLAB_BYTES slabs. Larger requests are
 * rounded to SP_LARGE_ALIGN and carved by best fit from segments (segment.c). */
#define SP_SMALL_MAX ((size_t)1 << 20)
#define SP_SLAB_BYTES ((size_t)2 << 20)
#define SP_LARGE_ALIGN ((size_t)512)
/* The driver reserves pool memory in pages of this size (2 MiB on every current GPU). */
#define SP_DRIVER_GRANULARITY ((uint64_t)2 << 20)
/* Medium requests (up to SP_MEDIUM_MAX) share segments; huge ones get whole segments of their
 * own. A segment is whole driver pages: the driver maps whole pages anyway, and the tail of a
 * page that a segment left out stayed free in the driver's pool, where no streampool
 * allocation fits (none is smaller than a page) and no remap can take it. In a medium segment
 * the tail serves other medium requests. Near a pool's limit a segment is only the request
 * rounded to SP_SEGMENT_ROUND. */
#define SP_MEDIUM_MAX ((size_t)8 << 20)
#define SP_SEGMENT_ROUND ((size_t)64 << 10)
/* A huge request reuses a free huge segment at most 1/SP_HUGE_SLACK larger than itself. The
 * slack stays held while the block lives, in flight on its stream, where no other request can
 * use it: in sp-bench serve, 1/4 (with a rung that took segments up to twice the request below
 * the high-water mark) reserved 1.00-1.17x what raw cudaMallocAsync did at 4 and 16 streams,
 * 1/8 without that rung 0.99-1.04x, for more driver calls. */
#define SP_HUGE_SLACK 8
/* A stream keeps the huge segment it frees (parked, for its next request) only while its huge
 * frees stay within 1/SP_HUGE_SAME of one size, a steady state that then costs no CUDA call.
 * Any other huge free gives its segment back to the driver at once, on the freeing stream: the
 * pages become the driver's to remap for any stream and size as soon as the stream's work
 * passes the free, as raw cudaMallocAsync's would, instead of waiting for the stream's next
 * miss (sp-bench serve at 4 streams: 0.94-1.08x raw cudaMallocAsync's reserved memory in six
 * runs, 1.02-1.18x without). */
#define SP_HUGE_SAME 16

/* A stream's park: the large ranges it freed most recently (at most SP_PARK_SLOTS), kept out
 * of the segment heap so that its next large request of the same size takes one back under its
 * own spin lock, not the heap's mutex that every stream shares. Invisible to other streams' best
 * fit, merging and give-back, so a park is small, and whatever needs the heap's whole truth
 * (any large miss, give-back, stats, release, destroy) flushes every park into the heap first. */
#define SP_PARK_SLOTS 4

/* A same-stream miss may take a cached block up to this many classes larger (at most 4/16 =
 * 25% over the request above 4 KiB) rather than carve a new one. */
#define SP_FIT_CLASSES 4

/* A miss looks for a fenced block in at most this many other streams' caches (newest first),
 * asking the driver (stream query, fence record or query) about at most SP_STEAL_ASKS of them;
 * a segment scan asks about at most SP_STEAL_ASKS free ranges. */
#define SP_STEAL_PROBES 64
#define SP_STEAL_ASKS 8
/* An unanswered ask about a stream fences its next SP_FENCE_INTEREST large frees (one event,
 * re-recorded): enough to cover a few requests' frees until the next ask renews it, and a
 * stream no one asks about goes back to making no CUDA call on the hot path. */
#define SP_FENCE_INTEREST 64
/* A miss reads at most this many older fences of streams it asked already (each read is an
 * event query; sp-bench serve made 14-23 of them per request with the ask budget instead). */
#define SP_FENCE_READS 2

uint32_t sp__class_of(size_t bytes); /* bytes in 1..SP_MAX_ALLOC */
/* The largest class whose size is <= bytes (bytes >= 256): the bin of a free range. */
uint32_t sp__class_floor(size_t bytes);
size_t sp__class_size(uint32_t cls);

/* ---- blocks and ranges ---- */

enum { SP_BLOCK_LIVE = 1, SP_BLOCK_CACHED, SP_BLOCK_BYPASS /* live, graph capture: no cache */ };

typedef struct sp_fence sp_fence;
typedef struct sp_stream_cache sp_stream_cache;
typedef struct sp_segment sp_segment;
typedef struct sp_heap sp_heap;

/* A piece of a segment (or, for a graph-capture bypass, one whole driver allocation): live, a
 * small block cached in a stream's bin, or a free range of its segment. Owned by one pool. */
typedef struct sp_block {
    void *ptr;
    size_t size;               /* small: its class size; large and free ranges: bytes */
    size_t requested;          /* of the live allocation */
    uint32_t cls;              /* small blocks: the class; SP_CLASS_COUNT otherwise */
    atomic_int state;
    sp_pool *pool;
    /* the tag of a free block or range: the cache of the stream that freed it and that cache's
     * free count at the free. tag NULL: settled, usable by any stream. */
    sp_stream_cache *tag;
    uint64_t epoch;
    sp_segment *seg;           /* NULL: a bypass block, its own driver allocation */
    struct sp_block *addr_prev, *addr_next; /* neighbours in the segment, by address */
    bool is_free;              /* a free range in its segment's heap (under the heap's lock) */
    /* a free range: the heap's coalesce that settled it by asking (sp_heap.coalesces), so that
     * the take of the same miss counts a cross-stream reuse; 0 if none */
    uint32_t asked_in;
    struct sp_block *prev, *next; /* in a stream bin or a heap's free bin */
    /* introspect.c: who allocated a live block, and who last freed it (set under that cache's
     * lock, read under the ptrmap shard's lock while the block is live) */
    sp_stream_cache *owner;    /* the allocating stream's cache; NULL for a capture bypass */
    sp_stream_cache *freed_by; /* the cache of its latest free: a steal when another takes it */
    union {                    /* within the second cache line, which the hot path touches */
        uint64_t alloc_seq;    /* owner set: its allocation count when this was allocated */
        cudaStream_t bypass_stream; /* owner NULL: the capturing stream it was allocated on */
    };
} sp_block;

/* ---- fences (fence.c) ----
 * An event recorded on a stream after some of its frees; it covers every block freed there
 * with an epoch <= its own. Never recorded per free. A tag (cache, epoch) is settled once a
 * covering fence completed; the cache remembers that as done_epoch. */
struct sp_fence {
    cudaEvent_t event;
    uint64_t epoch;
    bool done;                 /* an event query has seen it complete */
    sp_fence *next;
};

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
/* The owner thread records a fence behind its frees so far, for another thread that asked
 * (fence_wanted: it could not record one itself on this thread's cudaStreamPerThread) or for
 * the streams whose asks found frees unsettled (fence_interest): a new fence, never a move of
 * one recorded before, unless the stream is at its cap on fences. Best effort. */
void sp__cache_offer_fence(sp_stream_cache *c);

/* ---- segments and slabs (segment.c) ----
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
    pthread_mutex_t lock;
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
sp_segment *sp__segment_new(void);
void sp__segment_discard(sp_segment *s);
/* Adds a fresh driver allocation as segment s (from sp__segment_new) with one free range tagged
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
 * lock. */
void sp__heap_coalesce(sp_heap *h, size_t size, sp_stream_cache *me, sp_ask_budget *ab);
/* Returns a block to its segment as a free range tagged (tag, epoch), merging it with free
 * neighbours whose tags allow. Caller holds the lock. */
void sp__heap_put(sp_heap *h, sp_block *b, sp_stream_cache *tag, uint64_t epoch);
/* Gives wholly free, settled segments back to the driver, largest first, until `want` bytes went
 * (or none is left); settled by what is known, or asking the driver with `ask` (and about `me`,
 * the allocating stream, in any case). A miss (`me` not NULL) frees on its own `stream`, which
 * `me`'s thread may use and which is not capturing; anyone else on the service stream. A miss
 * passes its ask budget `ab`, so that no stream is asked twice in one miss. Returns
 * the bytes given back; *err (if not NULL and still SP_OK) gets the first CUDA error. Takes the
 * lock itself; driver frees happen outside it, and a segment the driver refuses stays the
 * pool's. */
uint64_t sp__heap_release(sp_heap *h, uint64_t want, bool ask, sp_stream_cache *me,
                          cudaStream_t stream, sp_ask_budget *ab, int *err);
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
/* Puts huge block b, just freed on c's stream, back into its segment and gives the segment
 * (now wholly free) to the driver with cudaFreeAsync on `stream`, in that stream's order (rule
 * 3), with no synchronize. A segment the driver refuses stays, tagged with c. Takes the heap's
 * lock; the driver call is made outside it. */
void sp__heap_give_back_huge(sp_heap *h, sp_block *b, sp_stream_cache *c, cudaStream_t stream);
/* Fragmentation figures for stats (parks flushed first, so that they are exact); takes the
 * lock. */
void sp__heap_stats(sp_heap *h, sp_stats *st);
/* Frees host structures; every segment must have been released. */
void sp__heap_destroy(sp_heap *h);

/* ---- stream caches (stream_cache.c) ---- */

typedef struct {
    sp_block *head, *tail;     /* head: most recently freed */
} sp_bin;

/* Streams are keyed by handle, and cudaStreamPerThread also by thread: it is a different
 * stream in every thread. */
typedef struct {
    cudaStream_t stream;
    uint64_t thread;           /* 0 unless stream == cudaStreamPerThread */
} sp_stream_key;

struct sp_stream_cache {
    sp_spin lock;
    sp_stream_key key;
    sp_pool *pool;
    atomic_bool released;      /* forgotten: callers holding it must look again (set under
                                * `lock`, read by fence checks without it) */
    /* capture in progress on this stream: declared, or under SP_CAPTURE_ALWAYS last seen by
     * cudaStreamIsCapturing (read without a lock by the hot path) */
    atomic_bool capturing;
    /* declared capture in progress (sp_stream_capture_begin; set and cleared under
     * runtime->lock): under SP_CAPTURE_ALWAYS, cudaStreamIsCapturing's "not yet" before the
     * capture begins must not clear `capturing`, which other threads' fence steps rely on */
    atomic_bool declared;
    /* blocks allocated before a capture and freed during it, under `lock`: kept aside until the
     * capture ends (rule 24) */
    sp_block *aside;
    atomic_uint_least64_t free_epoch;  /* frees on this stream so far; written under `lock` */
    /* fence state, under fence_lock (a mutex: fences mean driver calls) */
    pthread_mutex_t fence_lock;
    atomic_uint_least64_t done_epoch;  /* frees known complete */
    /* another stream's miss found this stream's frees unsettled, or could not fence them (another
     * thread's cudaStreamPerThread): the owner thread publishes news at its next free
     * (sp__cache_offer_fence) or large allocation (sp__fence_early), whichever comes first */
    atomic_bool fence_wanted;
    /* how many of this stream's next large frees get a fence right behind them, because another
     * stream's miss found its frees unsettled: that fence completes with the work before the
     * free, so the next asker learns the memory is settled even when the stream has queued
     * more work since (a stream query would say busy, a fence recorded then would complete
     * only after that work). Set by askers, counted down by the owner's frees. */
    atomic_uint fence_interest;
    /* segments went back to the driver on this stream (cudaFreeAsync) since the host last
     * synchronized it for a trim: the driver releases their pages only once the host has
     * observed those frees (rule 13), which the tags, settled by a query or fence, do not say */
    atomic_bool driver_frees;
    sp_fence *fences;          /* outstanding fences, newest first */
    /* released after giving segments back: a fence recorded at release behind those frees,
     * which a trim synchronizes so that the driver may release their pages (under fence_lock) */
    sp_fence *final_fence;
    unsigned fence_count;
    /* SP_CLASS_COUNT bins, under `lock`; freed when the stream is released (NULL after), so
     * that a released stream's cache is a small tombstone kept only for its tags */
    sp_bin *bins;
    uint64_t cached_bytes;     /* in bins, under `lock` */
    /* the park (segment.c), newest first, under `lock`; park_count is also read without it, to
     * skip an empty park when flushing */
    sp_block *park[SP_PARK_SLOTS];
    atomic_uint park_count;
    size_t last_huge_free;     /* the size of the stream's last huge free, under `lock` */
    /* counters of the hot path, under `lock`, merged by stats */
    uint64_t hits, frees, freed_bytes, requested_total, active_total;
    /* byte changes not yet added to the pool's and runtime's shared figures: flushed past the
     * runtime's stats_flush_bytes, on the slow path and on a stats read, so that threads on
     * different streams do not bounce one cache line on every call */
    int64_t requested_delta, active_delta;
    /* per-stream figures (introspect.h), under `lock` like the counters above */
    uint64_t allocs, live_requested, live_active, peak_requested, peak_active;
    uint64_t steals_taken, steals_given;
    sp_stream_cache *next_in_pool;
    sp_stream_cache *next_in_bucket;
};

sp_stream_key sp__stream_key(cudaStream_t stream);
bool sp__this_threads_stream(sp_stream_key key);
/* The thread-specific key whose destructor releases an exiting thread's cudaStreamPerThread
 * caches (runtime.c creates it before any pool exists). */
void sp__thread_exit_key_set(pthread_key_t key);

/* small.c, continued: the bins of a stream cache (newest at the head) */
void sp__bin_push(sp_bin *bin, sp_block *b);
sp_block *sp__bin_pop_newest(sp_bin *bin);
void sp__bin_remove(sp_bin *bin, sp_block *b);
/* A block of class cls (or up to SP_FIT_CLASSES larger) that another stream cached. */
sp_block *sp__small_steal(sp_pool *pool, sp_stream_cache *me, uint32_t cls, cudaStream_t stream,
                          sp_take_mode mode, sp_ask_budget *ab);
/* Empties a cache's bins into a list (c->lock held), and returns such a list to the slabs,
 * each block tagged with its free on c's stream. */
sp_block *sp__small_take_all(sp_stream_cache *c);
void sp__small_to_slabs(sp_pool *pool, sp_stream_cache *c, sp_block *list);
/* Every small block cached in the pool's live stream bins back to its slab, tagged. */
void sp__small_flush_bins(sp_pool *pool);
/* The pool's cache for `stream`, created if missing; NULL if host memory ran out. Fast when
 * this thread used the same (pool, stream) recently. */
sp_stream_cache *sp__cache_get(sp_pool *pool, sp_stream_key key);
/* The pool's cache for key if it exists, else (if `create`) a new one, else NULL; without the
 * per-thread memo or the capture check of sp__cache_get: creating, for sp_stream_capture_begin,
 * under runtime->lock. */
sp_stream_cache *sp__cache_find(sp_pool *pool, sp_stream_key key, bool create);
/* Detaches the pool's cache for key (NULL if none), pool->lock held; the caller empties it. */
sp_stream_cache *sp__cache_detach_locked(sp_pool *pool, sp_stream_key key);
/* Waits for every fence step under way on the pool's caches, live and released (each takes and
 * drops its fence_lock, under pool->lock). */
void sp__cache_drain_fence_steps(sp_pool *pool);
void sp__cache_table_free(sp_pool *pool);

/* ---- pointer map (ptrmap.c): pointer -> block for every block a runtime holds ---- */

#define SP_PTRMAP_SHARDS 64

typedef struct {
    sp_spin lock;
    struct sp_ptrmap_slot *slots;
    size_t cap, len;
} sp_ptrmap_shard;

typedef struct {
    sp_ptrmap_shard shards[SP_PTRMAP_SHARDS];
} sp_ptrmap;

int sp__ptrmap_insert(sp_ptrmap *m, sp_block *b);
void sp__ptrmap_remove(sp_ptrmap *m, const void *ptr);
/* Looks ptr up and, if it is a live block of `pool`, marks it cached; all under the shard's
 * lock so that the block cannot go away meanwhile. Returns SP_OK, SP_ERR_BAD_POINTER,
 * SP_ERR_DOUBLE_FREE or SP_ERR_WRONG_POOL; *out gets the block (also a BYPASS one, which is
 * removed from the map). */
int sp__ptrmap_take_for_free(sp_ptrmap *m, const void *ptr, const sp_pool *pool, sp_block **out);
void sp__ptrmap_free(sp_ptrmap *m);
/* Calls fn with ptr's block (NULL if unknown), or with every block, under the shard's lock:
 * fn takes no lock and allocates nothing (introspect.c). */
void sp__ptrmap_visit(sp_ptrmap *m, const void *ptr, void (*fn)(sp_block *, void *), void *arg);
void sp__ptrmap_each(sp_ptrmap *m, void (*fn)(sp_block *, void *), void *arg);
/* What ptr is (sp_pointer_info), and for a live block the cache of the stream that allocated
 * it (sp_free_any frees on that stream), read under the shard's lock. */
typedef struct {
    sp_ptr_info info;
    sp_stream_cache *owner;
} sp_ptr_lookup;
sp_ptr_lookup sp__ptrmap_lookup(sp_ptrmap *m, const void *ptr);

/* ---- pools (pool.c) ---- */

typedef struct {
    atomic_uint_least64_t current, peak, total;
} sp_bytes_counter;

enum {
#define SP_COUNTER_ENUM(name, text) SP_COUNT_##name,
    SP_STATS_COUNTERS(SP_COUNTER_ENUM)
#undef SP_COUNTER_ENUM
    SP_COUNT_N
};

/* Live-memory figures kept for a pool and again for its runtime. Every change and every read
 * of them is one step under `lock`, so that a read pairs figures of one moment (held ==
 * active + cached) and every peak, cached_peak too, has seen every state a read can see. The
 * hot path never takes it: its hits reach these figures through the caches' deltas. Readers
 * that only estimate (the high-water mark before a new segment, give-back, the cache limit,
 * the OOM report, the trace) load single figures without it; room under a limit is judged by
 * the pool's limit_used, not by these. */
typedef struct {
    sp_spin lock;
    sp_bytes_counter requested, active;
    sp_bytes_counter held;               /* bytes of blocks taken from the driver, not given back */
    atomic_uint_least64_t cached_peak;
} sp_usage;

struct sp_pool {
    sp_runtime *rt;
    char name[SP_POOL_NAME_MAX + 1];
    uint64_t id;                         /* unique for the process: per-thread memos key on it */
    cudaMemPool_t cuda_pool;
    bool owns_cuda_pool, is_default;
    sp_pool_config cfg;                  /* changed at run time under `lock` */
    /* cfg.limit at streampool's granularity (SP_LARGE_ALIGN), what held bytes are held to, so
     * that any request of at most the limit less what is held fits; the cudaMemPool's maxSize
     * is the limit at the driver's granularity (SP_DRIVER_GRANULARITY). 0: none. */
    uint64_t limit_bytes;
    /* held bytes plus the claims of driver allocations in flight: what the limit is judged by
     * (held_claim). usage.held counts a claim only once the driver granted it */
    atomic_uint_least64_t limit_used;
    atomic_uint_least64_t cache_limit;   /* cfg.cache_limit, read on the hot path */
    uint64_t stats_flush;                /* the runtime's stats_flush_bytes */
    pthread_mutex_t lock;                /* the stream table and the cache list */
    sp_stream_cache **buckets;
    size_t bucket_count, cache_count;
    sp_stream_cache *caches;             /* live caches */
    sp_stream_cache *retired;            /* released caches: tombstones, their tags may still be
                                          * in use; their counters are in retired_* */
    atomic_uint_least64_t retired_count, retired_hits, retired_frees, retired_freed_bytes,
        retired_requested_total, retired_active_total;
    atomic_uint_least64_t stream_gen;    /* bumped when a cache is detached */
    sp_heap slabs;                       /* small blocks */
    sp_heap segments;                    /* large ranges */
    sp_usage usage;
    atomic_uint_least64_t count[SP_COUNT_N]; /* slow-path counters (hot ones live in caches) */
    atomic_uint_least64_t miss_allocs, miss_requested_total, miss_active_total;
    /* the cache limit: one thread gives back at a time, and a pass that left the cache over the
     * limit (pending frees) is not repeated until the cache grew by a slab or a miss came */
    atomic_flag limit_busy;
    atomic_uint_least64_t limit_stuck;
    sp_pool *next;
};

int sp__pool_new(sp_runtime *rt, const char *name, cudaMemPool_t adopt, const sp_pool_config *cfg,
                 sp_pool **out);
/* Gives all the pool's memory back and frees its structures; the caller has checked it has no
 * live allocation. Returns the first CUDA error. */
int sp__pool_free(sp_pool *pool);
/* sp_stream_release for one pool: detaches key's cache, if any, and returns its blocks to their
 * slabs and segments behind its final fence. */
int sp__pool_release_stream(sp_pool *pool, sp_stream_key key);
/* Gives cached memory back to the driver until the pool holds at most `keep` bytes (largest
 * segments first); with `sync`, orders and synchronizes those frees and trims the cudaMemPool
 * (never below the reservation). Returns the bytes the pool stopped holding or, with `sync`,
 * what its cudaMemPool released if more (pages of segments given back earlier); *err (if not
 * NULL) gets the first CUDA error. */
uint64_t sp__pool_give_back(sp_pool *pool, uint64_t keep, bool sync, int *err);
/* A fresh slab or segment of heap h for a request of `size` bytes (rounded), allocated on
 * `stream` whose cache is `me`, and the range carved from it into *out. SP_ERR_LIMIT without
 * asking the driver if it would pass the pool's limit. The block is counted live (`requested`
 * bytes asked) in the same step as the fresh bytes are counted held: no read sees the new
 * memory all cached. */
int sp__pool_grow(sp_pool *pool, sp_heap *h, size_t size, size_t requested, sp_stream_cache *me,
                  cudaStream_t stream, sp_block **out);
/* A graph-capture bypass: the request's own driver allocation, never cached (rule 24), counted
 * live and held in one step, like sp__pool_grow's block. */
int sp__pool_bypass_alloc(sp_pool *pool, size_t bytes, cudaStream_t stream, sp_block **out);
/* Gives a bypass block straight back to the driver on `stream`. */
void sp__pool_bypass_free(sp_pool *pool, sp_block *b, cudaStream_t stream);
/* ---- counters.c: the figures every layer may bump ---- */
void sp__pool_count(sp_pool *pool, int counter, uint64_t n);
/* Adds a signed change to a current figure outside any lock (limit_used: claims and give-backs
 * race); returns the new value. */
uint64_t sp__current_add(atomic_uint_least64_t *cur, int64_t delta);
/* sp__usage_add without limit_used: for a driver allocation that claimed its bytes there
 * before the driver was asked. */
void sp__usage_commit(sp_pool *pool, int64_t requested, int64_t active, int64_t held);
/* The one stat-update helper: signed changes of requested, active (live) and held bytes of a
 * pool and its runtime, keeping peaks (cached = held - active); a held change moves the pool's
 * limit_used too. */
void sp__usage_add(sp_pool *pool, int64_t requested, int64_t active, int64_t held);
/* The figures of u as of one moment, as a stats read shows them: held >= active (cached = held
 * - active), every peak at least its current. */
typedef struct {
    uint64_t requested, active, held;
    uint64_t requested_peak, active_peak, held_peak, cached_peak, held_total;
} sp_usage_view;
void sp__usage_read(sp_usage *u, sp_usage_view *v);
/* Every peak of u back to its current figure, in one step. */
void sp__usage_reset_peaks(sp_usage *u);
/* A current figure of an sp_usage as readers see it: the caches' deltas reach it in any order,
 * so it may be a negative partial sum for a while, read as 0. */
uint64_t sp__usage_current(const atomic_uint_least64_t *cur);
/* Adds a cache's unflushed byte deltas to the pool and runtime figures (c->lock held). */
void sp__cache_flush_locked(sp_pool *pool, sp_stream_cache *c);
/* The pool's live bytes, every cache flushed first: 0 iff it has no live allocation. */
uint64_t sp__pool_active_bytes(sp_pool *pool);
/* Over its cache limit, the pool gives cached memory back. */
void sp__pool_enforce_cache_limit(sp_pool *pool, uint64_t cache_limit);

/* ---- config.c ---- */

/* Checks a merged pool config (reserve within limit, a known policy); SP_ERR_CONFIG with the
 * message otherwise. */
int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen);
/* Allocates rt->conf_pools_seen for the pool-prefixed keys of both conf strings. */
int sp__config_seen_init(sp_runtime *rt);
/* Notes that a pool called `name` exists, for sp_runtime_check_config (rt->lock held). */
void sp__config_pool_created(sp_runtime *rt, const char *name);
/* Prints a warning on stderr for each conf pool name no pool has had (rt->lock held). */
void sp__config_warn_unused(sp_runtime *rt);
/* The value of the runtime key trace:FILE (SP_ALLOC_CONF wins over alloc_conf), copied into
 * out; false if neither string has it. */
bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len);

/* ---- reclaim.c: out of memory across pools ---- */

/* Asks the other pools of the runtime, lowest priority first, to give their cached memory back
 * (never below their reservation) until the device has room for `bytes` (or they gave that
 * much back); true if any did, or if the device has the room already. */
bool sp__reclaim_others(sp_pool *pool, size_t bytes);
/* Calls the user's out-of-memory callback (not from inside itself); true: retry. */
bool sp__oom_callback(sp_pool *pool, size_t bytes, cudaStream_t stream);
/* Records the report for sp_runtime_last_oom of a failure with `status` (SP_ERR_OUT_OF_MEMORY
 * or SP_ERR_LIMIT) of a request of `bytes` (`rounded` as the pool would have held it). */
void sp__oom_record(sp_pool *pool, size_t bytes, size_t rounded, cudaStream_t stream, int status);

/* ---- runtime (runtime.c) ---- */

struct sp_runtime {
    int device;
    sp_runtime_config cfg;
    pthread_mutex_t lock;                /* pools list and names, capture list */
    sp_pool *pools;
    sp_pool *default_pool;
    cudaStream_t service;                /* non-blocking: frees of released streams' blocks */
    sp_fence_pool fences;
    sp_ptrmap ptrmap;
    sp_usage usage;
    atomic_uint_least64_t captures;      /* declared captures in progress */
    char *alloc_conf;                    /* sp_runtime_config.alloc_conf, copied */
    char *env_conf;                      /* SP_ALLOC_CONF, copied */
    sp_oom_callback oom_cb;
    void *oom_user;
    sp_oom_report last_oom;              /* under `lock` */
    sp_stream_key *capturing;
    size_t capturing_len, capturing_cap;
    _Atomic(struct sp_trace *) trace;    /* trace.c: NULL until a trace is first started */
    uint64_t *conf_pools_seen;           /* config.c, under `lock`: bit i set once a pool named
                                            by the i-th pool-prefixed conf key has existed (a
                                            bit per such key; NULL if none) */
    sp_runtime *next_runtime;            /* in the process's list, for threads that exit */
};

/* A graph capture may be under way in the process: one is declared, or SP_CAPTURE_ALWAYS, under
 * which streampool is not told. */
static inline bool sp__capture_possible(const sp_runtime *rt)
{
    return rt->cfg.capture_check == SP_CAPTURE_ALWAYS ||
           atomic_load_explicit(&rt->captures, memory_order_relaxed) != 0;
}

/* stream_cache.c: a thread that made a cudaStreamPerThread cache: at its exit, its caches in
 * every runtime are released from that thread, behind a final fence it can still record. */
void sp__thread_watch(void);
/* stream_cache.c: the index of key in rt->capturing (declared captures), SIZE_MAX if none
 * (rt->lock held). */
size_t sp__capture_find(const sp_runtime *rt, sp_stream_key key);

/* Is the stream of cache c being captured into a graph (declared: c's flag, no lock; ALWAYS:
 * asked of CUDA)? In ALWAYS mode, a stream found no longer capturing gets its kept-aside blocks
 * back. */
int sp__cache_capturing(sp_stream_cache *c, bool *capturing);
/* A cache just created while captures are declared: flagged if its stream is one of them. */
void sp__capture_adopt(sp_stream_cache *c);
/* Returns the blocks kept aside during a capture to their slabs and segments, tagged with a
 * free on c's stream now. */
void sp__cache_release_aside(sp_stream_cache *c);
/* May the library name c's stream to the driver now (query, fence, wait, synchronize)? Not if it
 * is another thread's per-thread stream, capturing (rule 25), or the legacy stream while a
 * capture is declared. (Whether it was released is the caller's question.) */
bool sp__may_touch_stream(sp_stream_cache *c);

/* ---- cuda.c: the only file that calls CUDA ---- */

int sp__cuda_check_device(int device);
int sp__cuda_pool_create(int device, uint64_t max_size, cudaMemPool_t *out);
int sp__cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total);
int sp__cuda_pool_destroy(cudaMemPool_t pool);
int sp__cuda_pool_set_threshold(cudaMemPool_t pool, uint64_t bytes);
int sp__cuda_pool_usage(cudaMemPool_t pool, uint64_t *reserved, uint64_t *used);
int sp__cuda_pool_trim(cudaMemPool_t pool, size_t keep);
int sp__cuda_malloc(cudaMemPool_t pool, void **ptr, size_t bytes, cudaStream_t stream);
int sp__cuda_free(void *ptr, cudaStream_t stream);
int sp__cuda_event_create(int device, cudaEvent_t *out);
int sp__cuda_event_destroy(cudaEvent_t event);
int sp__cuda_event_record(cudaEvent_t event, cudaStream_t stream);
/* relaxed: a graph capture may be under way (sp__capture_possible); see cuda.c */
int sp__cuda_event_query(cudaEvent_t event, bool relaxed, bool *done);
int sp__cuda_event_sync(cudaEvent_t event, bool relaxed);
int sp__cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event);
int sp__cuda_stream_create(int device, cudaStream_t *out);
int sp__cuda_stream_destroy(cudaStream_t stream);
int sp__cuda_stream_sync(cudaStream_t stream);
int sp__cuda_stream_query(cudaStream_t stream, bool *idle);
int sp__cuda_stream_is_capturing(cudaStream_t stream, bool *capturing);
int sp__cuda_device_sync(int device);
/* Successful cudaMallocFromPoolAsync and cudaStreamWaitEvent calls made by this thread: how
 * the trace tells a fresh block and a wait on a fence from a cache hit. */
extern _Thread_local uint64_t sp__cuda_thread_mallocs, sp__cuda_thread_waits;

/* ---- text.c: the appender of every report ---- */

/* snprintf at buf + *used, advancing *used by what the whole text needs (like snprintf, so a
 * short buffer still yields the full length). */
void sp__appendf(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- names.c: pool names, and how names are escaped in every report ---- */

/* SP_OK for 1..SP_POOL_NAME_MAX bytes of well-formed UTF-8 without control characters (C0,
 * DEL, C1); SP_ERR_INVALID otherwise. */
int sp__pool_name_check(const char *name);
/* A JSON string: quotes around `s`, every control character escaped, a byte that is not UTF-8
 * as U+FFFD. */
void sp__append_json_string(char *buf, size_t len, size_t *used, const char *s);
/* A Prometheus label value: quotes around `s`, with \, " and newline escaped. */
void sp__append_label_value(char *buf, size_t len, size_t *used, const char *s);

/* ---- trace.c: the allocation trace ----
 * Off, it costs sp_alloc and sp_free one load of sp__tracing and a branch that is never taken
 * (the hook line). On, each event goes to the calling thread's own buffer. */

extern atomic_int sp__tracing;          /* runtimes with a trace on, in the whole process */
extern _Thread_local bool sp__trace_inside __attribute__((tls_model("initial-exec")));

static inline bool sp__trace_wanted(void)
{
    if (sp_likely(atomic_load_explicit(&sp__tracing, memory_order_relaxed) == 0))
        return false;
    if (sp__trace_inside) { /* the recording wrapper's own call: consume the mark */
        sp__trace_inside = false;
        return false;
    }
    return true;
}

/* The recording half of alloc.c's traced sp_alloc / sp_free: figures read before the call
 * (the mark), and the events the call made, told from how those figures moved. */
typedef struct {
    struct sp_trace *trace;            /* NULL: not traced */
    uint64_t mallocs, waits, steals, retries, trims, at_ns;
} sp_trace_mark;
sp_trace_mark sp__trace_alloc_mark(sp_pool *pool);
void sp__trace_alloc_done(const sp_trace_mark *m, sp_pool *pool, void *const *ptr, size_t bytes,
                          cudaStream_t stream, int rc);
sp_trace_mark sp__trace_free_mark(sp_pool *pool);
void sp__trace_free_done(const sp_trace_mark *m, sp_pool *pool, const void *ptr,
                         cudaStream_t stream, int rc);
/* An instant event for sp_pool_trim (only when a trace is on). */
void sp__trace_trim(sp_pool *pool);
/* Starts the trace SP_ALLOC_CONF's trace:FILE asks for (a warning on stderr if it cannot). */
void sp__trace_autostart(sp_runtime *rt);
/* Stops a trace still on (writing its files) and frees the trace's memory. */
void sp__trace_destroy(sp_runtime *rt);

/* ---- introspect.c: stream labels, per-stream figures (hot-path part in introspect.h) ---- */

/* The label of a stream (exact key), or of any thread's stream with that handle, into out
 * ("" if none). Takes the label table's mutex: after runtime->lock, before nothing. */
void sp__stream_label(const sp_runtime *rt, sp_stream_key key, char *out, size_t len);
void sp__stream_label_any_thread(const sp_runtime *rt, cudaStream_t stream, char *out, size_t len);
/* Forgets the runtime's label of *stream, or all its labels when stream is NULL. */
void sp__stream_labels_forget(const sp_runtime *rt, const cudaStream_t *stream);
/* The pool's table of streams for sp_pool_summary (takes pool->lock). */
void sp__streams_table(sp_pool *pool, char *buf, size_t len, size_t *used,
                       const char *(*human)(uint64_t, char[16]));

/* ---- status.c ---- */

/* Remembers a failed CUDA call's error for sp_last_cuda_error(). */
void sp__set_cuda_error(int cuda_error);

/* This thread's last CUDA error. Every public call that can reach CUDA clears it on entry (one
 * line, early in the function), so that it only ever describes the call that just returned.
 * initial-exec: the hot path reads it without a __tls_get_addr call. */
extern _Thread_local int sp__cuda_error __attribute__((tls_model("initial-exec")));

static inline void sp__cuda_error_clear(void)
{
    if (sp_unlikely(sp__cuda_error != 0)) /* a read, no store, on the hot path */
        sp__cuda_error = 0;
}

#endif /* SP_INTERNAL_H */
