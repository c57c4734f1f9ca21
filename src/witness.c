/* The lock-rank check of witness.h: each thread's held locks in a small array, searched on
 * every lock and every assertion (a thread holds a handful at most). Every message names the
 * locks by the names and ranks stored at their init. Compiled in debug and test builds only. */
#ifndef SP_WITNESS
#error "witness.c is built with -DSP_WITNESS only (src/meson.build)"
#endif

#include <stdio.h>
#include <stdlib.h>

#include "witness.h"

/* More locks than any path of the library holds at once (it holds four at most): more is a
 * lock that was never released. */
#define HELD_MAX 16

static const char *const rank_name[SP_RANK_COUNT] = {
    [SP_RANK_OUTER] = "SP_RANK_OUTER",
    [SP_RANK_RUNTIMES] = "SP_RANK_RUNTIMES",
    [SP_RANK_RUNTIME] = "SP_RANK_RUNTIME",
    [SP_RANK_TRACE] = "SP_RANK_TRACE",
    [SP_RANK_PEER] = "SP_RANK_PEER",
    [SP_RANK_POOL] = "SP_RANK_POOL",
    [SP_RANK_HEAP] = "SP_RANK_HEAP",
    [SP_RANK_FENCE] = "SP_RANK_FENCE",
    [SP_RANK_SHARE] = "SP_RANK_SHARE",
    [SP_RANK_SPIN] = "SP_RANK_SPIN",
    [SP_RANK_LEAF] = "SP_RANK_LEAF",
};

static _Thread_local const sp_witness *held[HELD_MAX];
static _Thread_local int held_count;

const char *sp__witness_rank_name(sp_rank rank)
{
    return rank > 0 && rank < SP_RANK_COUNT && rank_name[rank] ? rank_name[rank] : "no rank";
}

/* "pool->lock (rank 5 SP_RANK_POOL, 0x...)" into buf */
static const char *describe(const sp_witness *w, char *buf, size_t len)
{
    snprintf(buf, len, "%s (rank %d %s, %p)", w->name ? w->name : "a lock never initialized",
             (int)w->rank, sp__witness_rank_name(w->rank), (const void *)w);
    return buf;
}

#define DESCRIBED 160 /* room for one describe(): a name, a rank and an address */

static int find(const sp_witness *w)
{
    for (int i = held_count - 1; i >= 0; i--)
        if (held[i] == w)
            return i;
    return -1;
}

void sp__witness_acquire(const sp_witness *w)
{
    char a[DESCRIBED], b[DESCRIBED];
    if (w->rank <= 0 || w->rank >= SP_RANK_COUNT || !w->name) {
        fprintf(stderr, "streampool: taking a lock with no rank or name: %s\n",
                describe(w, a, sizeof a));
        abort();
    }
    for (int i = 0; i < held_count; i++) {
        if (held[i]->rank >= w->rank) {
            fprintf(stderr, "streampool: lock order violated: taking %s while holding %s\n",
                    describe(w, a, sizeof a), describe(held[i], b, sizeof b));
            abort();
        }
    }
    if (held_count == HELD_MAX) {
        fprintf(stderr, "streampool: more than %d locks held at once, taking %s\n", HELD_MAX,
                describe(w, a, sizeof a));
        abort();
    }
    held[held_count++] = w;
}

void sp__witness_release(const sp_witness *w)
{
    int i = find(w);
    if (i < 0) {
        char a[DESCRIBED];
        fprintf(stderr, "streampool: releasing a lock this thread does not hold: %s\n",
                describe(w, a, sizeof a));
        abort();
    }
    for (; i + 1 < held_count; i++)
        held[i] = held[i + 1];
    held_count--;
}

void sp__witness_assert_owner(const sp_witness *w, const char *where)
{
    if (find(w) < 0) {
        char a[DESCRIBED];
        fprintf(stderr, "streampool: %s needs %s held, and this thread does not hold it\n", where,
                describe(w, a, sizeof a));
        abort();
    }
}

void sp__witness_assert_not_owner(const sp_witness *w, const char *where)
{
    if (find(w) >= 0) {
        char a[DESCRIBED];
        fprintf(stderr, "streampool: %s needs %s not held, and this thread holds it\n", where,
                describe(w, a, sizeof a));
        abort();
    }
}

void sp__witness_assert_lockless(const char *where)
{
    if (held_count > 0) {
        char a[DESCRIBED];
        fprintf(stderr,
                "streampool: %s needs no lock held, and this thread holds %d, the last %s\n", where,
                held_count, describe(held[held_count - 1], a, sizeof a));
        abort();
    }
}
