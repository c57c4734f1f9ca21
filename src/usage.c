/* The figures every layer may bump: a pool's slow-path counters and the usage figures of a pool
 * and its device (requested, active and held bytes with their peaks). A leaf below the stream
 * caches, fences and tiers, so that none of them calls up into the pool ledger to count: it
 * knows only its own types (sp_pool_figures, sp_usage), which the pool embeds. */
#include "usage.h"

void sp__usage_count(sp_pool_figures *f, int counter, uint64_t n)
{
    atomic_fetch_add_explicit(&f->count[counter], n, memory_order_relaxed);
}

/* Adds a signed change to limit_used (claims and give-backs race outside any lock) and returns
 * the new value. */
uint64_t sp__usage_current_add(atomic_uint_least64_t *cur, int64_t delta)
{
    return atomic_fetch_add_explicit(cur, (uint64_t)delta, memory_order_relaxed) + (uint64_t)delta;
}

uint64_t sp__usage_current(const atomic_uint_least64_t *cur)
{
    uint64_t v = atomic_load_explicit(cur, memory_order_relaxed);
    return (int64_t)v < 0 ? 0 : v;
}

/* Adds a signed change to a figure of an sp_usage, under its lock: a plain load and store (atomic
 * for the readers that estimate without the lock), no locked instruction. Modular, never
 * clamped: the caches' unflushed deltas reach it in any order (a block allocated by a hit on
 * one stream and freed on another: the freeing stream's -bytes may come first), so a partial
 * sum may be below zero for a while; clamping it would lose those bytes for good when the
 * +bytes follow. Readers see such a transient value through sp__usage_current, as 0. */
static void locked_add(atomic_uint_least64_t *v, int64_t delta)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + (uint64_t)delta,
                          memory_order_relaxed);
}

static void locked_raise(atomic_uint_least64_t *peak, uint64_t now)
{
    if (now > atomic_load_explicit(peak, memory_order_relaxed))
        atomic_store_explicit(peak, now, memory_order_relaxed);
}

/* The current figures as a read shows them (u's lock held): a transient negative partial sum
 * as 0, and active never above held. Live memory is part of what is held, but a block's +bytes
 * may be flushed and its -bytes not yet (a small block stolen from another stream's bin, or
 * given back with its slab, before that stream flushed its free). Held is exact (every change
 * of it is made at once, under this lock, never kept back in a cache) and is what a limit is
 * judged by: active, the estimate, gives way, so that held never shows more than the pool
 * holds. */
static void currents_locked(const sp_usage *u, uint64_t *requested, uint64_t *active,
                            uint64_t *held)
{
    sp_spin_assert_owner(&u->lock);
    *requested = sp__usage_current(&u->requested.current);
    *active = sp__usage_current(&u->active.current);
    *held = sp__usage_current(&u->held.current);
    if (*active > *held)
        *active = *held;
}

/* One step: the changes, then every peak raised to what a read of the new state shows, the
 * cached peak with them (what the caches keep grows when live memory is freed, and when memory
 * taken leaves more than the request cached), before any reader can see that state. */
static void usage_apply(sp_usage *u, int64_t requested, int64_t active, int64_t held)
{
    sp_spin_lock(&u->lock);
    if (requested)
        locked_add(&u->requested.current, requested);
    if (active)
        locked_add(&u->active.current, active);
    if (held)
        locked_add(&u->held.current, held);
    if (held > 0)
        locked_add(&u->held.total, held);
    uint64_t r, a, h;
    currents_locked(u, &r, &a, &h);
    locked_raise(&u->requested.peak, r);
    locked_raise(&u->active.peak, a);
    locked_raise(&u->held.peak, h);
    locked_raise(&u->cached_peak, h - a);
    sp_spin_unlock(&u->lock);
}

/* A change of the pool's and the device's figures, without limit_used: a driver allocation
 * claimed its bytes there before the driver was asked (sp__limit_claim). */
void sp__usage_commit(sp_pool_figures *f, int64_t requested, int64_t active, int64_t held)
{
    usage_apply(&f->usage, requested, active, held);
    usage_apply(f->device, requested, active, held);
}

void sp__usage_add(sp_pool_figures *f, int64_t requested, int64_t active, int64_t held)
{
    /* held never passes limit_used, which never passes the limit: bytes given back leave room
     * under the limit only once held shows them gone. Room let go first, another thread could
     * claim it and count its fresh bytes while held still showed these, and the figures (the
     * peak for good) would pass the limit the driver kept. */
    if (held > 0)
        (void)sp__usage_current_add(&f->limit_used, held);
    sp__usage_commit(f, requested, active, held);
    if (held < 0)
        (void)sp__usage_current_add(&f->limit_used, held);
}

void sp__usage_init(sp_usage *u)
{
    sp_spin_init(&u->lock, SP_RANK_LEAF, "usage->lock");
}

void sp__usage_read(sp_usage *u, sp_usage_view *v)
{
    sp_spin_lock(&u->lock);
    currents_locked(u, &v->requested, &v->active, &v->held);
    v->requested_peak = atomic_load_explicit(&u->requested.peak, memory_order_relaxed);
    v->active_peak = atomic_load_explicit(&u->active.peak, memory_order_relaxed);
    v->held_peak = atomic_load_explicit(&u->held.peak, memory_order_relaxed);
    v->cached_peak = atomic_load_explicit(&u->cached_peak, memory_order_relaxed);
    v->held_total = atomic_load_explicit(&u->held.total, memory_order_relaxed);
    sp_spin_unlock(&u->lock);
}

void sp__usage_reset_peaks(sp_usage *u)
{
    sp_spin_lock(&u->lock);
    uint64_t r, a, h;
    currents_locked(u, &r, &a, &h);
    atomic_store_explicit(&u->requested.peak, r, memory_order_relaxed);
    atomic_store_explicit(&u->active.peak, a, memory_order_relaxed);
    atomic_store_explicit(&u->held.peak, h, memory_order_relaxed);
    atomic_store_explicit(&u->cached_peak, h - a, memory_order_relaxed);
    sp_spin_unlock(&u->lock);
}
