/* Introspection: what each stream of a pool holds, peak resets, what a pointer is, stream
 * labels, and the list of outstanding allocations. The hot path only bumps plain fields of the
 * stream's own cache (introspect.h); everything here runs at read time, under the locks the
 * figures live under (pool->lock for the stream list, each cache's spin lock, the heap locks
 * for free ranges, the ptrmap shard locks for blocks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"
#include "park.h"
#include "pool.h"
#include "ptrmap.h"
#include "runtime.h"
#include "status.h"
#include "config.h"
#include "format.h"
#include "introspect.h"
#include "versioned.h"

_Static_assert(sizeof(((sp_oom_report *)0)->stream_name) == SP_STREAM_NAME_MAX + 1,
               "the OOM report holds a whole stream label");

/* ---- per-stream stats ---- */

static sp_stream_cache *cache_find_locked(sp_pool *pool, sp_stream_key key)
{
    sp_mutex_assert_owner(&pool->lock);
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool)
        if (c->key.stream == key.stream && c->key.thread == key.thread)
            return c;
    return NULL;
}

/* Free ranges of h still tagged with c's frees (not yet settled or merged away). */
static uint64_t tagged_free_bytes(sp_heap *h, const sp_stream_cache *c)
{
    uint64_t bytes = 0;
    sp_mutex_lock(&h->lock);
    for (sp_segment *s = h->segments; s; s = s->next)
        for (sp_block *b = s->first; b; b = b->addr_next)
            if (b->is_free && b->tag == c)
                bytes += b->size;
    sp_mutex_unlock(&h->lock);
    return bytes;
}

/* c's figures (pool->lock held, so that c stays in the pool's list). */
static void cache_stats(sp_pool *pool, sp_stream_cache *c, sp_stream_usage *st)
{
    sp_mutex_assert_owner(&pool->lock);
    sp__park_flush(pool, c); /* parked ranges counted as the heap's tagged ranges are */
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    st->version = SP_STREAM_STATS_VERSION;
    sp_spin_lock(&c->lock);
    sp__note_peaks_locked(c);
    st->requested = sp__live_requested(c);
    st->requested_peak = c->peak_requested;
    st->active = sp__live_active(c);
    st->active_peak = c->peak_active;
    st->cached = c->cached_bytes;
    st->allocs = c->allocs;
    st->hits = c->hits;
    st->frees = c->frees;
    st->steals_taken = c->steals_taken;
    st->steals_given = c->steals_given;
    sp_spin_unlock(&c->lock);
    st->cached += tagged_free_bytes(&pool->slabs, c) + tagged_free_bytes(&pool->segments, c);
    sp__label_of(pool->rt, c->key, st->name, sizeof st->name);
}

int sp_stream_stats(sp_pool *pool, cudaStream_t stream, sp_stream_usage *out)
{
    sp__cuda_error_clear();
    int rc = sp__struct_check(out, SP__MIN_STREAM_USAGE, "sp_stream_stats", "sp_stream_usage");
    if (!pool || rc != SP_OK)
        return pool ? rc : SP_ERR_INVALID;
    sp_stream_usage st;
    sp_mutex_lock(&pool->lock);
    sp_stream_cache *c = cache_find_locked(pool, sp__cache_key(stream));
    if (c)
        cache_stats(pool, c, &st);
    sp_mutex_unlock(&pool->lock);
    if (!c)
        return SP_ERR_NOT_FOUND;
    sp__struct_write(out, &st, sizeof st);
    return SP_OK;
}

/* One row per stream of the pool, newest stream first, for sp_pool_summary. */
void sp__introspect_streams_table(sp_pool *pool, char *buf, size_t len, size_t *used,
                       const char *(*human)(uint64_t, char[16]))
{
    sp_mutex_lock(&pool->lock);
    if (!pool->caches) {
        sp_mutex_unlock(&pool->lock);
        return;
    }
    sp__format_append(buf, len, used, "%-18s %-16s %10s %10s %10s %8s %8s %8s %8s\n", "stream",
                "label", "requested", "active", "cached", "allocs", "hits", "taken", "given");
    for (sp_stream_cache *c = pool->caches; c; c = c->next_in_pool) {
        sp_stream_usage st;
        cache_stats(pool, c, &st);
        char a[16], b[16], d[16];
        sp__format_append(buf, len, used, "%-18p %-16s %10s %10s %10s %8llu %8llu %8llu %8llu\n",
                    (void *)c->key.stream, st.name[0] ? st.name : "-",
                    human(st.requested, a), human(st.active, b), human(st.cached, d),
                    (unsigned long long)st.allocs, (unsigned long long)st.hits,
                    (unsigned long long)st.steals_taken, (unsigned long long)st.steals_given);
    }
    sp_mutex_unlock(&pool->lock);
}

/* ---- peaks ---- */

static void pool_reset(sp_pool *pool)
{
    (void)sp__cache_active_bytes(pool); /* flushes every cache: the current figures are exact */
    sp__usage_reset_peaks(&pool->fig.usage);
    sp_mutex_lock(&pool->lock);
    for (sp_stream_cache *lists[2] = {pool->caches, pool->retired}, **l = lists; l < lists + 2; l++)
        for (sp_stream_cache *c = *l; c; c = c->next_in_pool) {
            sp_spin_lock(&c->lock);
            c->peak_requested = sp__live_requested(c);
            c->peak_active = sp__live_active(c);
            sp_spin_unlock(&c->lock);
        }
    sp_mutex_unlock(&pool->lock);
}

int sp_pool_reset_peaks(sp_pool *pool)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    pool_reset(pool);
    return SP_OK;
}

int sp_runtime_reset_peaks(sp_runtime *rt)
{
    sp__cuda_error_clear();
    if (!rt)
        return SP_ERR_INVALID;
    sp_mutex_lock(&rt->lock);
    for (sp_pool *p = rt->pools; p; p = p->next)
        pool_reset(p);
    sp__usage_reset_peaks(&rt->dev.usage);
    sp_mutex_unlock(&rt->lock);
    return SP_OK;
}

/* ---- pointers ---- */

int sp_pointer_info(sp_runtime *rt, const void *ptr, sp_ptr_info *out)
{
    sp__cuda_error_clear();
    int rc = sp__struct_check(out, SP__MIN_PTR_INFO, "sp_pointer_info", "sp_ptr_info");
    if (!rt || rc != SP_OK)
        return rt ? rc : SP_ERR_INVALID;
    sp_ptr_lookup l = sp__ptrmap_lookup(&rt->dev.ptrmap, ptr);
    sp__struct_write(out, &l.info, sizeof l.info);
    return SP_OK;
}

/* ---- outstanding allocations ---- */

typedef struct {
    sp_pool *pool;
    sp_live_alloc *rows;
    sp_stream_cache **owners;
    uint64_t *seqs;
    size_t cap, n, missed;
} live_list;

static void collect_live(sp_block *b, void *arg)
{
    live_list *l = arg;
    int state = atomic_load_explicit(&b->state, memory_order_acquire);
    if (b->pool != l->pool || (state != SP_BLOCK_LIVE && state != SP_BLOCK_BYPASS))
        return;
    if (l->n == l->cap) { /* no allocation under a spin lock: counted, and the caller retries */
        l->missed++;
        return;
    }
    cudaStream_t stream = b->owner ? b->owner->key.stream : b->bypass_stream;
    l->rows[l->n] = (sp_live_alloc){b->ptr, b->requested, b->size, stream, "", 0};
    l->owners[l->n] = b->owner;
    l->seqs[l->n] = b->owner ? b->alloc_seq : 0;
    l->n++;
}

static int oldest_first(const void *x, const void *y)
{
    const sp_live_alloc *a = x, *b = y;
    if (a->age_allocs != b->age_allocs)
        return a->age_allocs < b->age_allocs ? 1 : -1;
    return (uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : (uintptr_t)a->ptr > (uintptr_t)b->ptr;
}

typedef struct {
    sp_live_alloc row;
    char name[SP_STREAM_NAME_MAX + 1];
} named_row;

int sp_pool_dump_live(sp_pool *pool, sp_live_callback cb, void *user)
{
    sp__cuda_error_clear();
    if (!pool || !cb)
        return SP_ERR_INVALID;
    live_list l = {.pool = pool, .cap = 64};
    for (;;) {
        l.rows = calloc(l.cap, sizeof *l.rows);
        l.owners = calloc(l.cap, sizeof *l.owners);
        l.seqs = calloc(l.cap, sizeof *l.seqs);
        if (!l.rows || !l.owners || !l.seqs) {
            free(l.rows), free(l.owners), free(l.seqs);
            return SP_ERR_NO_HOST_MEMORY;
        }
        l.n = l.missed = 0;
        sp__ptrmap_each(&pool->dev->ptrmap, collect_live, &l);
        if (!l.missed)
            break;
        free(l.rows), free(l.owners), free(l.seqs);
        l.cap = (l.cap + l.missed) * 2;
    }
    named_row *named = calloc(l.n ? l.n : 1, sizeof *named);
    if (!named) {
        free(l.rows), free(l.owners), free(l.seqs);
        return SP_ERR_NO_HOST_MEMORY;
    }
    for (size_t i = 0; i < l.n; i++) {
        sp_stream_cache *o = l.owners[i];
        if (o) { /* caches live as long as their pool: reading one after the shard lock is safe */
            sp_spin_lock(&o->lock);
            uint64_t now = o->allocs;
            sp_spin_unlock(&o->lock);
            l.rows[i].age_allocs = now > l.seqs[i] ? now - l.seqs[i] : 0;
            sp__label_of(pool->rt, o->key, named[i].name, sizeof named[i].name);
        } else {
            sp__label_of_any_thread(pool->rt, l.rows[i].stream, named[i].name,
                                        sizeof named[i].name);
        }
        named[i].row = l.rows[i];
        named[i].row.stream_name = NULL; /* pointed at once the rows stop moving */
    }
    qsort(named, l.n, sizeof *named, oldest_first);
    int count = 0;
    for (size_t i = 0; i < l.n; i++) {
        named[i].row.stream_name = named[i].name;
        count++;
        if (cb(&named[i].row, user))
            break;
    }
    free(named);
    free(l.rows), free(l.owners), free(l.seqs);
    return count;
}
void sp__introspect_note_foreign_free(sp_free_note n)
{
    sp_spin_lock(&n.owner->lock);
    n.owner->live_requested -= n.requested;
    n.owner->live_active -= n.size;
    sp_spin_unlock(&n.owner->lock);
}

void sp__introspect_note_miss(sp_stream_cache *c, sp_block *b, size_t bytes)
{
    sp_stream_cache *from = b->freed_by; /* b is ours alone until it is marked live */
    bool steal = from != NULL && from != c;
    sp_spin_lock(&c->lock);
    sp__note_alloc_locked(c, b);
    c->live_requested += bytes;
    c->live_active += b->size;
    sp__note_peaks_locked(c);
    c->steals_taken += steal;
    sp_spin_unlock(&c->lock);
    if (steal) {
        sp_spin_lock(&from->lock);
        from->steals_given++;
        sp_spin_unlock(&from->lock);
    }
}
