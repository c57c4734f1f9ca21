/* Summaries for people: the stats struct as an aligned text table, for a log line at shutdown
 * or a debug endpoint. The rows come from the X-macro lists that declare sp_stats; sizes are
 * shown with a binary unit (exact bytes stay in JSON and Prometheus). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "introspect.h"
#include "pool.h"
#include "runtime.h"
#include "status.h"
#include "format.h"
#include "versioned.h"

typedef struct {
    char *buf;
    size_t len, used;
} text;

/* "512 B", "70.3 KiB", ... into out (16 bytes are enough for any uint64_t). */
static const char *human(uint64_t bytes, char out[16])
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(out, 16, "%llu B", (unsigned long long)bytes);
        return out;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 5)
        v /= 1024, u++;
    snprintf(out, 16, "%.1f %s", v, units[u]);
    return out;
}

static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void stats_block(text *t, const sp_stats *st)
{
    char a[16], b[16], c[16], d[16];
    sp__format_append(t->buf, t->len, &t->used, "%-10s %12s %12s %12s\n", "bytes", "current", "peak",
                "total");
#define SP_SUMMARY_BYTES(f, current_text, total_text)                                         \
    sp__format_append(t->buf, t->len, &t->used, "%-10s %12s %12s %12s\n", #f,                       \
                human(st->f.current, a), human(st->f.peak, b), human(st->f.total, c));
    SP_STATS_BYTES(SP_SUMMARY_BYTES)
#undef SP_SUMMARY_BYTES
    sp__format_append(t->buf, t->len, &t->used,
                "driver: %s reserved, %s used by %llu pool%s\n", human(st->pool_reserved, a),
                human(st->pool_used, b), (unsigned long long)st->pools, st->pools == 1 ? "" : "s");
    /* held + reserve_idle + what the cudaMemPool keeps beyond both = reserved */
    sp__format_append(t->buf, t->len, &t->used, "reservation: %s, %s of it idle (reserved, not held)\n",
                human(st->reserve, a), human(st->reserve_idle, b));
    uint64_t reused = st->same_stream_hits + st->cross_stream_reuses + st->cross_stream_waits;
    sp__format_append(t->buf, t->len, &t->used,
                "allocations: %llu, %.1f%% from a cache (%.1f%% same stream), %llu from the driver\n",
                (unsigned long long)st->allocs, percent(reused, st->allocs),
                percent(st->same_stream_hits, st->allocs),
                (unsigned long long)st->driver_allocs);
    sp__format_append(t->buf, t->len, &t->used,
                "layout: %llu slab%s (%s), %llu segment%s (%s), %s free inside them, largest "
                "free range %s\n",
                (unsigned long long)st->slabs, st->slabs == 1 ? "" : "s", human(st->slab_bytes, a),
                (unsigned long long)st->segments, st->segments == 1 ? "" : "s",
                human(st->segment_bytes, b), human(st->inactive_split, c),
                human(st->largest_free, d));
    sp__format_append(t->buf, t->len, &t->used, "counters:\n");
#define SP_SUMMARY_COUNTER(f, text_)                                                          \
    sp__format_append(t->buf, t->len, &t->used, "  %-20s %12llu  %s\n", #f,                          \
                (unsigned long long)st->f, text_);
    SP_STATS_COUNTERS(SP_SUMMARY_COUNTER)
#undef SP_SUMMARY_COUNTER
}

size_t sp_stats_summary(const sp_stats *st, char *buf, size_t len)
{
    text t = {buf, len, 0};
    if (len)
        buf[0] = '\0';
    if (st) {
        /* a caller built against an older header passes a shorter struct (st->size): what it
         * does not have reads as 0, never as the bytes past its end */
        sp_stats full;
        memset(&full, 0, sizeof full);
        sp__struct_read(&full, sizeof full, st);
        stats_block(&t, &full);
    }
    return t.used;
}

/* A pool name padded to `width` columns, counting UTF-8 characters rather than bytes. */
static void padded_name(text *t, const char *name, int width)
{
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        chars += (*p & 0xC0) != 0x80;
    sp__format_append(t->buf, t->len, &t->used, "%s%*s", name, chars < width ? width - chars : 1, "");
}

int sp_pool_summary(sp_pool *pool, char *buf, size_t len, size_t *needed)
{
    if (!pool || !needed || (!buf && len))
        return SP_ERR_INVALID;
    sp_stats st = {.size = sizeof st};
    int rc = sp_pool_stats(pool, &st); /* clears sp_last_cuda_error too */
    text t = {buf, len, 0};
    if (len)
        buf[0] = '\0';
    sp__format_append(buf, len, &t.used, "streampool pool \"%s\" on device %d\n", pool->name,
                pool->dev->device);
    stats_block(&t, &st);
    sp__introspect_streams_table(pool, buf, len, &t.used, human); /* each stream's share, with its label */
    *needed = t.used;
    return rc;
}

typedef struct {
    char name[SP_POOL_NAME_MAX + 1];
    sp_stats st;
    uint64_t limit;
} pool_row;

int sp_runtime_summary(sp_runtime *rt, char *buf, size_t len, size_t *needed)
{
    if (!rt || !needed || (!buf && len))
        return SP_ERR_INVALID;
    sp_stats total = {.size = sizeof total};
    int rc = sp_runtime_stats(rt, &total);
    sp_mutex_lock(&rt->lock);
    size_t n = 0;
    for (sp_pool *p = rt->pools; p; p = p->next)
        n += sp__pool_reported(p);
    pool_row *rows = calloc(n ? n : 1, sizeof *rows);
    size_t i = n; /* the list is newest first: fill from the end, oldest first */
    /* the default pool may have been used since it was counted: never more than n rows */
    for (sp_pool *p = rt->pools; p && rows && i > 0; p = p->next) {
        if (!sp__pool_reported(p))
            continue;
        pool_row *r = &rows[--i];
        memcpy(r->name, p->name, sizeof r->name);
        r->st.size = sizeof r->st;
        int prc = sp_pool_stats(p, &r->st);
        if (rc == SP_OK)
            rc = prc;
        /* the limit in force (whole pages), read under the pool's lock as the API gives it:
         * it may change at run time */
        sp_pool_config cfg = {.size = sizeof cfg};
        r->limit = sp_pool_get_config(p, &cfg) == SP_OK ? cfg.limit : 0;
    }
    sp_mutex_unlock(&rt->lock);
    if (!rows)
        return SP_ERR_NO_HOST_MEMORY;
    text t = {buf, len, 0};
    if (len)
        buf[0] = '\0';
    sp__format_append(buf, len, &t.used, "streampool runtime on device %d\n", rt->dev.device);
    stats_block(&t, &total);
    sp__format_append(buf, len, &t.used, "%-24s %10s %10s %10s %10s %10s %10s\n", "pool", "requested",
                "active", "cached", "held", "reserved", "limit");
    for (i = 0; i < n; i++) {
        char c[6][16];
        const sp_stats *st = &rows[i].st;
        padded_name(&t, rows[i].name, 25);
        sp__format_append(buf, len, &t.used, "%10s %10s %10s %10s %10s %10s\n",
                    human(st->requested.current, c[0]), human(st->active.current, c[1]),
                    human(st->cached.current, c[2]), human(st->held.current, c[3]),
                    human(st->pool_reserved, c[4]),
                    rows[i].limit ? human(rows[i].limit, c[5]) : "none");
    }
    free(rows);
    *needed = t.used;
    return rc;
}
