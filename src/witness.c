/* The lock-rank check of witness.h: each thread's held locks in a small array, searched on
 * every lock (a thread holds a handful at most). Compiled in debug and test builds only. */
#ifndef SP_WITNESS
#error "witness.c is built with -DSP_WITNESS only (src/meson.build)"
#endif

#include <stdio.h>
#include <stdlib.h>

#include "witness.h"

#define HELD_MAX 16

static const char *const rank_name[SP_RANK_COUNT] = {
    [SP_RANK_RUNTIMES] = "runtimes_lock (the process's runtimes)",
    [SP_RANK_RUNTIME] = "runtime->lock",
    [SP_RANK_TRACE] = "the trace's lock",
    [SP_RANK_POOL] = "pool->lock",
    [SP_RANK_HEAP] = "heap->lock",
    [SP_RANK_FENCE] = "cache->fence_lock",
    [SP_RANK_SPIN] = "a spin lock (cache, ptrmap shard, trace buffer or fence pool)",
    [SP_RANK_LEAF] = "a leaf lock (usage figures or stream labels)",
};

static _Thread_local struct {
    sp_rank rank;
    const void *lock;
} held[HELD_MAX];
static _Thread_local int held_count;

static const char *name_of(sp_rank rank)
{
    return rank > 0 && rank < SP_RANK_COUNT ? rank_name[rank] : "a lock of no known rank";
}

void sp__witness_acquire(sp_rank rank, const void *lock)
{
    for (int i = 0; i < held_count; i++) {
        if (held[i].rank >= rank) {
            fprintf(stderr,
                    "streampool: lock order violated: taking %s (rank %d, %p) while holding %s "
                    "(rank %d, %p)\n",
                    name_of(rank), (int)rank, lock, name_of(held[i].rank), (int)held[i].rank,
                    held[i].lock);
            abort();
        }
    }
    if (held_count == HELD_MAX) {
        fprintf(stderr, "streampool: more than %d locks held at once, taking %s\n", HELD_MAX,
                name_of(rank));
        abort();
    }
    held[held_count].rank = rank;
    held[held_count].lock = lock;
    held_count++;
}

void sp__witness_release(const void *lock)
{
    for (int i = held_count - 1; i >= 0; i--) {
        if (held[i].lock == lock) {
            for (int j = i; j + 1 < held_count; j++)
                held[j] = held[j + 1];
            held_count--;
            return;
        }
    }
    fprintf(stderr, "streampool: releasing a lock this thread does not hold (%p)\n", lock);
    abort();
}
