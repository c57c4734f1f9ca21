/* Stats: hot-path counters live in each stream cache (under its lock) and the slow-path ones in
 * the pool (atomics); a read merges them into the caller's versioned struct. JSON rendering
 * walks the same X-macro list as the struct, so a new counter is declared once. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "park.h"
#include "cache.h"
#include "cuda.h"
#include "runtime.h"
#include "status.h"
#include "config.h"
#include "format.h"
#include "peer.h"
#include "share_guard.h"
#include "versioned.h"

static uint64_t load(const atomic_uint_least64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void merge_cache(sp_pool *pool, sp_stream_cache *c, sp_stats *st,
                        uint64_t *requested_total, uint64_t *active_total)
{
    sp_spin_lock(&c->lock);
    sp__cache_flush_locked(pool, c); /* current figures are exact at a read */
    st->same_stream_hits += c->hits;
    st->allocs += c->hits; /* a hit is an allocation the pool's miss counter never saw */
    st->frees += c->frees;
    st->cached.total += c->freed_bytes;
    *requested_total += c->requested_total;
    *active_total += c->active_total;
    sp_spin_unlock(&c->lock);
}

/* The pool's reservation and the part of it no block holds (reserve_idle): with held, the
 * pool's share of what the device has reserved for it. */
static void add_reserve(sp_pool *pool, sp_stats *st)
{
    uint64_t reserve = pool->cfg.reserve; /* set at creation, never changed */
    uint64_t held = sp__usage_current(&pool->fig.usage.held.current);
    st->reserve += reserve;
    st->reserve_idle += reserve > held ? reserve - held : 0;
}

/* Adds one pool's counters to st (current/peak bytes are filled by the caller). */
static int add_pool(sp_pool *pool, sp_stats *st)
{
    uint64_t requested_total = load(&pool->miss_requested_total);
    uint64_t active_total = load(&pool->miss_active_total);
    /* released streams' counters were merged into the pool's at release, under pool->lock
     * with the cache's unlinking: read under it too, they and the list agree. A read costs
     * O(live streams) however many came and went. */
    sp_mutex_lock(&pool->lock);
    requested_total += load(&pool->retired_requested_total);
    active_total += load(&pool->retired_active_total);
    st->same_stream_hits += load(&pool->retired_hits);
    st->allocs += load(&pool->retired_hits);
    st->frees += load(&pool->retired_frees);
    st->cached.total += load(&pool->retired_freed_bytes);
    st->released_streams += load(&pool->retired_count);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        merge_cache(pool, c, st, &requested_total, &active_total);
    st->streams += pool->cache_count;
    sp_mutex_unlock(&pool->lock);
    st->requested.total += requested_total;
    st->active.total += active_total;
#define SP_ADD_COUNTER(name, text) st->name += load(&pool->fig.count[SP_COUNT_##name]);
    SP_STATS_COUNTERS(SP_ADD_COUNTER)
#undef SP_ADD_COUNTER
    st->allocs += load(&pool->miss_allocs);
    sp__heap_stats(&pool->slabs, st);
    sp__park_flush_all(pool); /* inactive_split and largest_free count parked ranges as free */
    sp__heap_stats(&pool->segments, st);
    uint64_t reserved = 0, used = 0;
    int rc = sp__cuda_pool_usage(pool->cuda_pool, &reserved, &used);
    st->pool_reserved += reserved;
    st->pool_used += used;
    st->pools++;
    add_reserve(pool, st);
    sp__peer_stats(pool, st);  /* peer.c: grants */
    sp__share_stats(pool, st); /* share_guard.c: importers and held blocks */
    return rc;
}

/* The figures of one moment (sp__usage_read), whatever other threads do meanwhile: held ==
 * active + cached, every peak >= its current and never lower than an earlier read's (but
 * after a reset), cached.peak <= held.peak. */
static void fill_usage(sp_usage *u, sp_stats *st)
{
    sp_usage_view v;
    sp__usage_read(u, &v);
    st->requested.current = v.requested;
    st->requested.peak = v.requested_peak;
    st->active.current = v.active;
    st->active.peak = v.active_peak;
    st->held.current = v.held;
    st->held.peak = v.held_peak;
    st->held.total = v.held_total;
    st->cached.current = v.held - v.active;
    st->cached.peak = v.cached_peak;
}

/* A stats read's start: the CUDA error cleared, the subject (pool or runtime) and the caller's
 * struct checked, st zeroed at the current version. */
static int begin(const char *call, const void *subject, sp_stats *out, sp_stats *st)
{
    sp__cuda_error_clear();
    int rc = sp__struct_check(out, SP__MIN_STATS, call, "sp_stats");
    if (!subject || rc != SP_OK)
        return subject ? rc : SP_ERR_INVALID;
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    st->version = SP_STATS_VERSION;
    return SP_OK;
}

/* A stats read's end: the usage figures, then the caller's struct filled up to its size. */
static int finish(sp_usage *usage, sp_stats *st, sp_stats *out, int rc)
{
    fill_usage(usage, st);
    sp__struct_write(out, st, sizeof *st);
    return rc;
}

int sp_pool_stats(sp_pool *pool, sp_stats *out)
{
    sp_stats st;
    int rc = begin("sp_pool_stats", pool, out, &st);
    return rc == SP_OK ? finish(&pool->fig.usage, &st, out, add_pool(pool, &st)) : rc;
}

int sp_runtime_stats(sp_runtime *rt, sp_stats *out)
{
    sp_stats st;
    int rc = begin("sp_runtime_stats", rt, out, &st);
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock(&rt->lock);
    for (sp_pool *p = rt->pools; p; p = p->next) {
        if (!sp__pool_reported(p))
            continue;
        int prc = add_pool(p, &st);
        if (rc == SP_OK)
            rc = prc;
    }
    sp_mutex_unlock(&rt->lock);
    return finish(&rt->dev.usage, &st, out, rc);
}

size_t sp_stats_json(const sp_stats *st, char *buf, size_t len)
{
    size_t used = 0;
#define SP_EMIT(...) sp__format_append(buf, len, &used, __VA_ARGS__)
    if (len > 0)
        buf[0] = '\0';
    if (!st)
        return 0;
    SP_EMIT("{\"version\":%u", st->version);
    /* a caller built against an older header has a shorter struct: only what its size covers
     * is read (and written), as sp_pool_stats fills only that much */
#define SP_HAS(field) (st->size >= offsetof(sp_stats, field) + sizeof st->field)
#define SP_EMIT_BYTES(field)                                                                  \
    if (SP_HAS(field))                                                                        \
        SP_EMIT(",\"" #field "\":{\"current\":%llu,\"peak\":%llu,\"total\":%llu}",           \
                (unsigned long long)st->field.current, (unsigned long long)st->field.peak,   \
                (unsigned long long)st->field.total);
    SP_EMIT_BYTES(requested)
    SP_EMIT_BYTES(active)
    SP_EMIT_BYTES(cached)
    SP_EMIT_BYTES(held)
#undef SP_EMIT_BYTES
#define SP_EMIT_FIELD(name, ...)                                                              \
    if (SP_HAS(name))                                                                         \
        SP_EMIT(",\"" #name "\":%llu", (unsigned long long)st->name);
    SP_STATS_GAUGES(SP_EMIT_FIELD)
    SP_STATS_COUNTERS(SP_EMIT_FIELD)
    SP_STATS_LAYOUT(SP_EMIT_FIELD)
    SP_STATS_STREAMS(SP_EMIT_FIELD, SP_EMIT_FIELD)
    SP_STATS_RESERVE(SP_EMIT_FIELD)
    SP_STATS_MULTI(SP_EMIT_FIELD, SP_EMIT_FIELD)
#undef SP_EMIT_FIELD
#undef SP_HAS
    SP_EMIT("}");
#undef SP_EMIT
    return used;
}
