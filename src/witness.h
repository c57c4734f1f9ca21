/* The lock order of streampool, written once, and its check: every lock has a rank, and a
 * thread takes locks in strictly increasing rank only. In debug and test builds (SP_WITNESS,
 * set by src/meson.build for every build type but release) each lock and unlock records the
 * thread's held locks, and a lock taken out of order aborts the process naming both locks, the
 * day the wrong nesting is written (jemalloc's witness is the model). In release builds the
 * check compiles to nothing. A leaf: it calls nothing of the library. */
#ifndef SP_WITNESS_H
#define SP_WITNESS_H

#include <pthread.h>

/* LOCK ORDER (take only in increasing rank; never two locks of one rank at once):
 *  - No driver call and no synchronize under a spin lock (SP_RANK_SPIN, SP_RANK_LEAF); a heap
 *    lock may be held across fence queries and cudaStreamWaitEvent on a miss, never across a
 *    driver allocation or free.
 *  - A stream's park (segment.c) is under its cache->lock: ranges are taken out of it under
 *    that spin lock alone (pool->lock may be held around it, as for the bins) and put into
 *    the segment heap after it is dropped, under the heap's lock. */
typedef enum {
    SP_RANK_RUNTIMES = 1, /* runtime.c: the process's runtimes, for threads that exit */
    SP_RANK_RUNTIME,      /* runtime->lock: pools and names, declared captures, OOM report */
    SP_RANK_TRACE,        /* trace.c's lock: thread list, pool names, start and stop
                           * (sp_runtime_destroy stops the trace under runtime->lock) */
    SP_RANK_PEER,         /* peer.c: a pool's grants, held across cudaMemPoolSetAccess */
    SP_RANK_POOL,         /* pool->lock: the stream table, the cache list, the open requests */
    SP_RANK_HEAP,         /* heap->lock: the slabs or the segments of a pool, one at a time */
    SP_RANK_FENCE,        /* cache->fence_lock: a stream's fences (event record and query) */
    SP_RANK_SHARE,        /* share_guard.c: a pool's exports, their tables and held blocks */
    /* the spin leaves: cache->lock (bins, park, hot counters), ptrmap shard locks, the trace's
     * per-thread buffer locks, the fence pool's list, a request's block list (request_list.c);
     * never one under another */
    SP_RANK_SPIN,
    /* innermost, nothing under them and never one under another: the usage figures' lock
     * (sp_usage: a cache's figures are flushed under its cache->lock, a fresh block counted
     * under its heap's lock) and the stream-label table's mutex (labels.c) */
    SP_RANK_LEAF,
    SP_RANK_COUNT
} sp_rank;

#ifdef SP_WITNESS
/* Records that this thread takes `lock` of `rank`; aborts, naming both, if it holds one of
 * the same or a higher rank. Called before the lock is taken, so that a nesting that could
 * deadlock aborts instead. */
void sp__witness_acquire(sp_rank rank, const void *lock);
/* Forgets `lock` among this thread's held locks; aborts if it does not hold it. */
void sp__witness_release(const void *lock);
#else
static inline void sp__witness_acquire(sp_rank rank, const void *lock)
{
    (void)rank;
    (void)lock;
}

static inline void sp__witness_release(const void *lock)
{
    (void)lock;
}
#endif

static inline void sp_mutex_lock(pthread_mutex_t *m, sp_rank rank)
{
    sp__witness_acquire(rank, m);
    pthread_mutex_lock(m);
}

static inline void sp_mutex_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
    sp__witness_release(m);
}

#endif /* SP_WITNESS_H */
