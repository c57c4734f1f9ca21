/* What every layer of the core shares: the error policy, branch hints, rounding, the spin lock
 * (with its rank and name: witness.h) and the names of the core's structs, each defined in its
 * layer's header, bottom up: block.h, cache.h, fence.h, device.h (the device context every layer
 * below the runtime is handed), heap.h, pool.h, runtime.h (the top: its pools, names and lock).
 * Types point down: a layer below the runtime reaches the device through its sp_device, not
 * through sp_runtime. Public names are sp_*, cross-file internal ones sp__*, file-local ones
 * static. */
#ifndef SP_BASE_H
#define SP_BASE_H

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
 *  - sp_pool_trim returns the first CUDA error instead of SP_OK. sp_pool_destroy and
 *    sp_runtime_destroy destroy only once the driver took every byte back (SP_OK); otherwise
 *    they return its error and what they could not destroy stays usable, to be destroyed again.
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
 * LOCK ORDER: witness.h, as ranks that debug and test builds check on every lock. */

#define sp_likely(x) __builtin_expect(!!(x), 1)
#define sp_unlikely(x) __builtin_expect(!!(x), 0)

/* n rounded up to a multiple of `to` */
static inline size_t sp__round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* ---- a spin lock for the short critical sections of the hot path ---- */

/* Spins on a held lock this many times before each sched_yield: a holder runs a few dozen
 * instructions, so a short spin usually sees it released; past that it may be descheduled. */
#define SP_SPIN_BEFORE_YIELD 64

/* A spin lock with its rank and name (witness.h), in debug and test builds only: in release
 * builds it is one atomic int, so that the hot structs (sp_stream_cache) do not grow. */
typedef struct {
    atomic_int held;
    SP__WITNESS_FIELD
} sp_spin;

/* For a spin lock not set up by sp_spin_init. */
#define SP_SPIN_INITIALIZER(rank, name) {0 SP__WITNESS_INIT(rank, name)}

/* Sets l up, released, of `rank` (SP_RANK_SPIN or SP_RANK_LEAF) and `name` (witness.h), once
 * before its first lock. */
static inline void sp_spin_init(sp_spin *l, sp_rank rank, const char *name)
{
    atomic_init(&l->held, 0);
#ifdef SP_WITNESS
    l->w = (sp_witness){rank, name};
#else
    (void)rank;
    (void)name;
#endif
}

static inline void sp_spin_lock(sp_spin *l)
{
    SP__WITNESS_CALL(sp__witness_acquire, l);
    for (unsigned spins = 0;; spins++) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        while (atomic_load_explicit(&l->held, memory_order_relaxed))
            if (++spins > SP_SPIN_BEFORE_YIELD)
                sched_yield(); /* the holder may be descheduled: let it run */
    }
}

static inline void sp_spin_unlock(sp_spin *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
    SP__WITNESS_CALL(sp__witness_release, l);
}

/* Asserts, in debug and test builds, that this thread holds l (or does not): witness.h's, as
 * for a mutex. */
#define sp_spin_assert_owner(l) sp__lock_assert_owner(l)
#define sp_spin_assert_not_owner(l) sp__lock_assert_not_owner(l)

/* ---- the core's structs, each defined by its layer (fence.c, cache.h, heap.h, device.h) ---- */

typedef struct sp_device sp_device;

typedef struct sp_fence sp_fence;
typedef struct sp_stream_cache sp_stream_cache;
typedef struct sp_segment sp_segment;
typedef struct sp_heap sp_heap;

#endif /* SP_BASE_H */
