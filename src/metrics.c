/* Prometheus text exposition (format 0.0.4) of every pool's stats. Metric names, # HELP and
 * # TYPE come from the X-macro lists that declare sp_stats, so a new figure shows up here
 * without a line in this file. The pools are read under the runtime's lock (so none goes away)
 * and rendered after it is dropped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "names.h"
#include "runtime.h"
#include "status.h"
#include "format.h"

typedef struct {
    char name[SP_POOL_NAME_MAX + 1];
    sp_stats st;
    uint64_t limit;     /* the limit in force (whole pages; 0: none), from sp_pool_get_config */
} pool_figures;

typedef struct {
    char *buf;
    size_t len, used;
    int device;
    const pool_figures *pools;
    size_t npools;
} out;

/* One family: # HELP, # TYPE, then a sample per pool. `field` is the figure's byte offset in
 * sp_stats, so one routine serves every X-macro entry. */
static void family(out *o, const char *name, const char *type, const char *help, size_t field)
{
    sp__format_append(o->buf, o->len, &o->used, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (size_t i = 0; i < o->npools; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&o->pools[i].st + field, sizeof v);
        sp__format_append(o->buf, o->len, &o->used, "%s{device=\"%d\",pool=", name, o->device);
        sp__names_append_label_value(o->buf, o->len, &o->used, o->pools[i].name);
        sp__format_append(o->buf, o->len, &o->used, "} %llu\n", (unsigned long long)v);
    }
}

static void render(out *o, size_t npools_total)
{
    char name[128];
#define SP_METRIC_BYTES(f, current_text, total_text)                                          \
    family(o, "streampool_" #f "_bytes", "gauge", current_text,                               \
           offsetof(sp_stats, f) + offsetof(sp_stat_bytes, current));                         \
    family(o, "streampool_" #f "_peak_bytes", "gauge",                                        \
           "highest value of streampool_" #f "_bytes",                                         \
           offsetof(sp_stats, f) + offsetof(sp_stat_bytes, peak));                            \
    family(o, "streampool_" #f "_added_bytes_total", "counter", total_text,                   \
           offsetof(sp_stats, f) + offsetof(sp_stat_bytes, total));
    SP_STATS_BYTES(SP_METRIC_BYTES)
#undef SP_METRIC_BYTES
#define SP_METRIC_GAUGE(f, unit, text)                                                        \
    if (strcmp(#f, "pools") != 0) {                                                            \
        snprintf(name, sizeof name, "streampool_%s%s%s", #f, unit[0] ? "_" : "", unit);        \
        family(o, name, "gauge", text, offsetof(sp_stats, f));                                 \
    }
    SP_STATS_GAUGES(SP_METRIC_GAUGE)
    SP_STATS_LAYOUT(SP_METRIC_GAUGE)
#define SP_METRIC_STREAM_COUNTER(f, unit, text)                                               \
    family(o, "streampool_" #f "_total", "counter", text, offsetof(sp_stats, f));
    SP_STATS_STREAMS(SP_METRIC_GAUGE, SP_METRIC_STREAM_COUNTER)
    SP_STATS_RESERVE(SP_METRIC_GAUGE)
    SP_STATS_MULTI(SP_METRIC_GAUGE, SP_METRIC_STREAM_COUNTER)
#undef SP_METRIC_STREAM_COUNTER
#undef SP_METRIC_GAUGE
#define SP_METRIC_COUNTER(f, text)                                                            \
    family(o, "streampool_" #f "_total", "counter", text, offsetof(sp_stats, f));
    SP_STATS_COUNTERS(SP_METRIC_COUNTER)
#undef SP_METRIC_COUNTER
    /* the limit in force, so that an operator can alert on held / limit: only pools that have
     * one (a 0 there would make that ratio infinite for every pool without a limit) */
    sp__format_append(o->buf, o->len, &o->used,
                "# HELP streampool_limit_bytes the pool's limit in force: most bytes it may hold "
                "from the device, in whole driver pages (pools without a limit have no sample)\n"
                "# TYPE streampool_limit_bytes gauge\n");
    for (size_t i = 0; i < o->npools; i++) {
        if (!o->pools[i].limit)
            continue;
        sp__format_append(o->buf, o->len, &o->used, "streampool_limit_bytes{device=\"%d\",pool=",
                    o->device);
        sp__names_append_label_value(o->buf, o->len, &o->used, o->pools[i].name);
        sp__format_append(o->buf, o->len, &o->used, "} %llu\n", (unsigned long long)o->pools[i].limit);
    }
    /* one figure per pool makes no sense for the pool count: the runtime's, unlabelled but for
     * the device */
    sp__format_append(o->buf, o->len, &o->used,
                "# HELP streampool_pools pools of the runtime\n# TYPE streampool_pools gauge\n"
                "streampool_pools{device=\"%d\"} %zu\n",
                o->device, npools_total);
}

int sp_runtime_metrics_prometheus(sp_runtime *rt, char *buf, size_t len, size_t *needed)
{
    if (!rt || !needed || (!buf && len))
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    if (len)
        buf[0] = '\0';
    sp_mutex_lock(&rt->lock);
    size_t n = 0;
    for (sp_pool *p = rt->pools; p; p = p->next)
        n += sp__pool_reported(p);
    pool_figures *pools = calloc(n ? n : 1, sizeof *pools);
    int rc = pools ? SP_OK : SP_ERR_NO_HOST_MEMORY;
    size_t i = 0;
    /* the default pool may have been used since it was counted: never more than n rows */
    for (sp_pool *p = rt->pools; p && pools && i < n; p = p->next) {
        if (!sp__pool_reported(p))
            continue;
        memcpy(pools[i].name, p->name, sizeof pools[i].name);
        pools[i].st.size = sizeof pools[i].st;
        int prc = sp_pool_stats(p, &pools[i].st);
        sp_pool_config cfg = {.size = sizeof cfg};
        if (sp_pool_get_config(p, &cfg) == SP_OK)
            pools[i].limit = cfg.limit;
        if (rc == SP_OK)
            rc = prc;
        i++;
    }
    n = i;
    sp_mutex_unlock(&rt->lock);
    if (!pools)
        return rc;
    /* oldest pool first: the list is newest first, and a stable order keeps diffs readable */
    for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
        pool_figures t = pools[a];
        pools[a] = pools[b];
        pools[b] = t;
    }
    out o = {buf, len, 0, rt->dev.device, pools, n};
    render(&o, n);
    free(pools);
    *needed = o.used;
    return rc;
}
