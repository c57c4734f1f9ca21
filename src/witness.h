/* The lock order of streampool, written once, and its check: every lock has a rank and a name,
 * stored with it at its init, and a thread takes locks in strictly increasing rank only. In debug
 * and test builds (SP_WITNESS, set by src/meson.build for every build type but release) each
 * lock and unlock records the thread's held locks; a lock taken out of order aborts the process
 * naming both locks, the day the wrong nesting is written; and a function that needs a lock held
 * (every *_locked one) asserts it. jemalloc's witness is the model. In release builds the rank,
 * the name and every check compile to nothing: a lock is its pthread mutex or its spin word, no
 * bigger. A leaf: it calls nothing of the library. */
#ifndef SP_WITNESS_H
#define SP_WITNESS_H

#include <pthread.h>

/* LOCK ORDER (take only in increasing rank; never two locks of one rank at once):
 *  - No driver call and no synchronize under a spin lock (SP_RANK_SPIN, SP_RANK_LEAF); a heap
 *    lock may be held across fence queries and cudaStreamWaitEvent on a miss, never across a
 *    driver allocation or free.
 *  - A stream's park (heap.c) is under its cache->lock: ranges are taken out of it under
 *    that spin lock alone (pool->lock may be held around it, as for the bins) and put into
 *    the segment heap after it is dropped, under the heap's lock.
 * Every lock of src/, by rank, with the name it is initialized with: */
typedef enum {
    /* taken with no other lock held and nothing of the library's taken under it, never one
     * under another: share.c's "imports_lock" (the process's imports) and "import->lock" (an
     * import's mappings and records, held across the driver frees and synchronizes of a
     * release), share_guard.c's "share create_lock" (a pool's first export) */
    SP_RANK_OUTER = 1,
    SP_RANK_RUNTIMES,     /* runtime.c's "runtimes_lock": the process's runtimes, for threads
                           * that exit */
    SP_RANK_RUNTIME,      /* "runtime->lock": pools and names, declared captures, OOM report */
    SP_RANK_TRACE,        /* "trace->lock" (trace.c): thread list, pool names, start and stop
                           * (sp_runtime_destroy stops the trace under runtime->lock) */
    SP_RANK_PEER,         /* peer.c's "grants_lock": a pool's grants, held across
                           * cudaMemPoolSetAccess */
    SP_RANK_POOL,         /* "pool->lock": the stream table, the cache list, the open requests */
    SP_RANK_HEAP,         /* "heap->lock" (heap.c): the slabs or the segments of a pool, one
                           * at a time */
    SP_RANK_FENCE,        /* "cache->fence_lock": a stream's fences (event record and query) */
    SP_RANK_SHARE,        /* "share->lock" (share_guard.c): a pool's exports, their tables and
                           * held blocks */
    /* the spin leaves, never one under another: "cache->lock" (bins, park, hot counters), the
     * pointer map's "ptrmap shard->lock", the trace's per-thread "trace buffer->lock", the fence
     * pool's "fence_pool->lock" (its list), a request's "request->lock" (request_list.c: its
     * block list) */
    SP_RANK_SPIN,
    /* innermost, nothing under them and never one under another: the usage figures'
     * "usage->lock" (a spin: a cache's figures are flushed under its cache->lock, a fresh block
     * counted under its heap's lock), the stream-label table's "labels_lock" (labels.c) and
     * check_free_order's "free_order->lock" (free_order.c: its marks, spares and points) */
    SP_RANK_LEAF,
    SP_RANK_COUNT
} sp_rank;

/* What the witness knows of one lock, set once at its init. */
typedef struct {
    sp_rank rank;
    const char *name;          /* for messages: "pool->lock", "cache->lock", ... */
} sp_witness;

#ifdef SP_WITNESS
/* Records that this thread takes the lock of w; aborts, naming both, if it holds one of the same
 * or a higher rank, or if the lock was never initialized (no rank). Called before the lock is
 * taken, so that a nesting that could deadlock aborts instead. */
void sp__witness_acquire(const sp_witness *w);
/* Forgets the lock of w among this thread's held locks; aborts, naming it, if it does not hold
 * it. */
void sp__witness_release(const sp_witness *w);
/* Abort, naming the lock and `where` (the function that asserts), unless this thread holds the
 * lock of w (_owner), unless it does not (_not_owner), unless it holds no lock at all
 * (_lockless). */
void sp__witness_assert_owner(const sp_witness *w, const char *where);
void sp__witness_assert_not_owner(const sp_witness *w, const char *where);
void sp__witness_assert_lockless(const char *where);
/* "SP_RANK_POOL" for SP_RANK_POOL, ...; "no rank" for a value that is none */
const char *sp__witness_rank_name(sp_rank rank);
/* The fields a lock adds for the witness, and their static initializer. */
#define SP__WITNESS_FIELD sp_witness w;
#define SP__WITNESS_INIT(rank, name) , {(rank), (name)}
/* Calls fn with the witness of `lock` (a pointer to a struct with SP__WITNESS_FIELD), and
 * `where` for the assertions. */
#define SP__WITNESS_CALL(fn, lock) fn(&(lock)->w)
#define SP__WITNESS_ASSERT(fn, lock, where) fn(&(lock)->w, (where))
#define sp__witness_lockless(where) sp__witness_assert_lockless(where)
#else
#define SP__WITNESS_FIELD
#define SP__WITNESS_INIT(rank, name)
#define SP__WITNESS_CALL(fn, lock) ((void)(lock))
#define SP__WITNESS_ASSERT(fn, lock, where) ((void)(lock), (void)(where))
#define sp__witness_lockless(where) ((void)0)
#endif

/* The ownership asserts of both kinds of lock, an sp_mutex (below) and an sp_spin (base.h), by
 * their witness, the caller's name the `where` of a report. */
#define sp__lock_assert_owner(l) SP__WITNESS_ASSERT(sp__witness_assert_owner, (l), __func__)
#define sp__lock_assert_not_owner(l)                                                               \
    SP__WITNESS_ASSERT(sp__witness_assert_not_owner, (l), __func__)

/* Asserts, in debug and test builds, that this thread holds no lock of the library: at a point
 * that may block for long or call out. */
#define sp_assert_lockless() sp__witness_lockless(__func__)

/* ---- a mutex that knows its rank and name ---- */

typedef struct {
    pthread_mutex_t mutex;
    SP__WITNESS_FIELD
} sp_mutex;

/* For a static mutex: static sp_mutex m = SP_MUTEX_INITIALIZER(SP_RANK_LEAF, "labels_lock"); */
#define SP_MUTEX_INITIALIZER(rank, name) {PTHREAD_MUTEX_INITIALIZER SP__WITNESS_INIT(rank, name)}

/* pthread_mutex_init's result */
static inline int sp_mutex_init(sp_mutex *m, sp_rank rank, const char *name)
{
#ifdef SP_WITNESS
    m->w = (sp_witness){rank, name};
#else
    (void)rank;
    (void)name;
#endif
    return pthread_mutex_init(&m->mutex, NULL);
}

static inline void sp_mutex_destroy(sp_mutex *m)
{
    pthread_mutex_destroy(&m->mutex);
}

static inline void sp_mutex_lock(sp_mutex *m)
{
    SP__WITNESS_CALL(sp__witness_acquire, m);
    pthread_mutex_lock(&m->mutex);
}

static inline void sp_mutex_unlock(sp_mutex *m)
{
    pthread_mutex_unlock(&m->mutex);
    SP__WITNESS_CALL(sp__witness_release, m);
}

/* Asserts, in debug and test builds, that this thread holds m (or does not). */
#define sp_mutex_assert_owner(m) sp__lock_assert_owner(m)
#define sp_mutex_assert_not_owner(m) sp__lock_assert_not_owner(m)

#endif /* SP_WITNESS_H */
