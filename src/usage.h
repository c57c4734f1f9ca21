/* The figures every layer may bump (usage.c): a pool's slow-path counters and the usage
 * figures of a pool and its device. A leaf: its functions take the figures they change. */
#ifndef SP_COUNTERS_H
#define SP_COUNTERS_H

#include "base.h"

typedef struct {
    atomic_uint_least64_t current, peak, total;
} sp_bytes_counter;

enum {
#define SP_COUNTER_ENUM(name, text) SP_COUNT_##name,
    SP_STATS_COUNTERS(SP_COUNTER_ENUM)
#undef SP_COUNTER_ENUM
    SP_COUNT_N
};

/* Live-memory figures kept for a pool and again for its device. Every change and every read
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

/* A pool's figures, embedded in its struct (sp_pool.fig) and counted here: its slow-path
 * counters, its usage, and the bytes its limit is judged by. */
typedef struct {
    atomic_uint_least64_t count[SP_COUNT_N]; /* slow-path counters (hot ones live in caches) */
    sp_usage usage;
    /* held bytes plus the claims of driver allocations in flight: what the limit is judged by
     * (sp__limit_claim). usage.held counts a claim only once the driver granted it */
    atomic_uint_least64_t limit_used;
    sp_usage *device;                        /* its device's figures (sp_device.usage): every
                                              * change of `usage` is made there too */
} sp_pool_figures;

/* ---- usage.c: the figures every layer may bump ---- */
void sp__usage_count(sp_pool_figures *f, int counter, uint64_t n);
/* Adds a signed change to a current figure outside any lock (limit_used: claims and give-backs
 * race); returns the new value. */
uint64_t sp__usage_current_add(atomic_uint_least64_t *cur, int64_t delta);
/* sp__usage_add without limit_used: for a driver allocation that claimed its bytes there
 * before the driver was asked. */
void sp__usage_commit(sp_pool_figures *f, int64_t requested, int64_t active, int64_t held);
/* The one stat-update helper: signed changes of requested, active (live) and held bytes of a
 * pool and its device, keeping peaks (cached = held - active); a held change moves the pool's
 * limit_used too: bytes given back leave it only after held, so held never passes it. */
void sp__usage_add(sp_pool_figures *f, int64_t requested, int64_t active, int64_t held);
/* The figures of u as of one moment, as a stats read shows them: held >= active (cached = held
 * - active), every peak at least its current. */
typedef struct {
    uint64_t requested, active, held;
    uint64_t requested_peak, active_peak, held_peak, cached_peak, held_total;
} sp_usage_view;
void sp__usage_read(sp_usage *u, sp_usage_view *v);
/* u's lock set up (its figures zero, as calloc left them): once, before its first use */
void sp__usage_init(sp_usage *u);
/* Every peak of u back to its current figure, in one step. */
void sp__usage_reset_peaks(sp_usage *u);
/* A current figure of an sp_usage as readers see it: the caches' deltas reach it in any order,
 * so it may be a negative partial sum for a while, read as 0. */
uint64_t sp__usage_current(const atomic_uint_least64_t *cur);

#endif /* SP_COUNTERS_H */
