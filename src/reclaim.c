/* Out of memory across pools: the rungs of the ladder (alloc.c) that reach beyond the failing
 * pool. The other pools of the runtime give back their cached memory, lowest priority first and
 * never below their reservation; the user's callback may free memory for one more retry. A
 * final failure leaves a report of what every pool held. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reclaim.h"
#include "names.h"
#include "give_back.h"
#include "cuda.h"
#include "labels.h"
#include "pool.h"
#include "runtime.h"
#include "status.h"
#include "config.h"
#include "format.h"
#include "versioned.h"

static _Thread_local bool in_oom_callback; /* a callback's own allocations do not call it again */

static int by_priority(const void *a, const void *b)
{
    const sp_pool *x = *(sp_pool *const *)a, *y = *(sp_pool *const *)b;
    return (x->cfg.priority > y->cfg.priority) - (x->cfg.priority < y->cfg.priority);
}

/* The device has the free pages a request of `bytes` needs: the pools not asked yet keep their
 * cache. */
static bool device_has_room(sp_runtime *rt, size_t bytes)
{
    uint64_t free_b = 0, total = 0;
    return sp__cuda_mem_info(rt->dev.device, &free_b, &total) == SP_OK &&
           free_b >= sp__round_up(bytes, SP_DRIVER_GRANULARITY);
}

bool sp__reclaim_others(sp_pool *pool, size_t bytes)
{
    sp_runtime *rt = pool->rt;
    uint64_t freed = 0;
    bool room = false;
    sp_mutex_lock(&rt->lock); /* pools cannot be destroyed meanwhile */
    size_t n = 0;
    for (sp_pool *p = rt->pools; p; p = p->next)
        n++;
    sp_pool **order = calloc(n ? n : 1, sizeof *order);
    if (order) {
        n = 0;
        for (sp_pool *p = rt->pools; p; p = p->next)
            if (p != pool)
                order[n++] = p;
        qsort(order, n, sizeof *order, by_priority);
        /* only as far up the priorities as the request needs: what the device had free
         * counts with what the victims gave back */
        for (size_t i = 0; i < n && freed < bytes; i++) {
            if ((room = device_has_room(rt, bytes)))
                break;
            sp_pool *victim = order[i];
            uint64_t released = sp__give_back(victim, victim->cfg.reserve, true, NULL);
            if (released == 0)
                continue; /* nothing reached the device */
            sp__usage_count(&victim->fig, SP_COUNT_reclaims, 1);
            sp__usage_count(&victim->fig, SP_COUNT_reclaimed_bytes, released);
            freed += released;
        }
        free(order);
    }
    sp_mutex_unlock(&rt->lock);
    return freed > 0 || room;
}

bool sp__reclaim_oom_callback(sp_pool *pool, size_t bytes, cudaStream_t stream)
{
    sp_runtime *rt = pool->rt;
    sp_mutex_lock(&rt->lock);
    sp_oom_callback cb = rt->oom_cb;
    void *user = rt->oom_user;
    sp_mutex_unlock(&rt->lock);
    if (!cb || in_oom_callback)
        return false;
    in_oom_callback = true;
    int again = cb(pool, bytes, stream, user);
    in_oom_callback = false;
    return again != 0;
}

int sp_runtime_set_oom_callback(sp_runtime *rt, sp_oom_callback cb, void *user)
{
    if (!rt)
        return SP_ERR_INVALID;
    sp_mutex_lock(&rt->lock);
    rt->oom_cb = cb;
    rt->oom_user = user;
    sp_mutex_unlock(&rt->lock);
    return SP_OK;
}

static void describe_pool(sp_pool *p, sp_oom_pool *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p->name);
    uint64_t active = sp__cache_active_bytes(p); /* flushes the stream caches */
    uint64_t held = sp__usage_current(&p->fig.usage.held.current);
    out->requested = sp__usage_current(&p->fig.usage.requested.current);
    out->active = active;
    out->cached = held > active ? held - active : 0;
    uint64_t used;
    (void)sp__give_back_cuda_usage(p, &out->reserved, &used);
    out->limit = p->limit_bytes; /* in force, in pages; cfg changes under p->lock (sp_pool_set_limit) */
    out->reservation = p->cfg.reserve;
    out->priority = p->cfg.priority;
}

void sp__reclaim_oom_record(sp_pool *pool, size_t bytes, size_t rounded, cudaStream_t stream, int status)
{
    sp_runtime *rt = pool->rt;
    uint64_t free_b = 0, total = 0;
    (void)sp__cuda_mem_info(rt->dev.device, &free_b, &total);
    sp_mutex_lock(&rt->lock);
    sp_oom_report *r = &rt->last_oom;
    uint32_t failures = r->failures + 1;
    memset(r, 0, sizeof *r);
    r->size = sizeof *r;
    r->failures = failures;
    snprintf(r->pool, sizeof r->pool, "%s", pool->name);
    r->bytes = bytes;
    r->rounded = rounded;
    r->status = status;
    r->stream = stream;
    sp__label_of(rt, sp__cache_key(stream), r->stream_name, sizeof r->stream_name);
    r->device_free = free_b;
    r->device_total = total;
    for (sp_pool *p = rt->pools; p; p = p->next) {
        if (!sp__pool_reported(p))
            continue;
        if (r->npools < SP_OOM_REPORT_POOLS)
            describe_pool(p, &r->pools[r->npools++]);
        else
            r->pools_omitted++;
    }
    sp_mutex_unlock(&rt->lock);
}

int sp_runtime_last_oom(sp_runtime *rt, sp_oom_report *out)
{
    if (!rt || !out)
        return SP_ERR_INVALID;
    int rc = sp__struct_check(out, SP__MIN_OOM_REPORT, "sp_runtime_last_oom", "sp_oom_report");
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock(&rt->lock);
    sp__struct_write(out, &rt->last_oom, sizeof rt->last_oom);
    sp_mutex_unlock(&rt->lock);
    return SP_OK;
}

size_t sp_oom_report_json(const sp_oom_report *r, char *buf, size_t len)
{
    size_t used = 0;
    if (len > 0)
        buf[0] = '\0';
    if (!r)
        return 0;
    sp__format_append(buf, len, &used, "{\"failures\":%u,\"pool\":", r->failures);
    sp__names_append_json(buf, len, &used, r->pool);
    sp__format_append(buf, len, &used,
                ",\"bytes\":%llu,\"stream\":\"%p\",\"device_free\":%llu,\"device_total\":%llu,"
                "\"pools\":[",
                (unsigned long long)r->bytes, (void *)r->stream,
                (unsigned long long)r->device_free, (unsigned long long)r->device_total);
    for (uint32_t i = 0; i < r->npools && i < SP_OOM_REPORT_POOLS; i++) {
        const sp_oom_pool *p = &r->pools[i];
        sp__format_append(buf, len, &used, "%s{\"name\":", i ? "," : "");
        sp__names_append_json(buf, len, &used, p->name);
        sp__format_append(buf, len, &used,
                    ",\"requested\":%llu,\"active\":%llu,\"cached\":%llu,\"reserved\":%llu,"
                    "\"limit\":%llu,\"reservation\":%llu,\"priority\":%d}",
                    (unsigned long long)p->requested, (unsigned long long)p->active,
                    (unsigned long long)p->cached, (unsigned long long)p->reserved,
                    (unsigned long long)p->limit, (unsigned long long)p->reservation, p->priority);
    }
    sp__format_append(buf, len, &used, "],\"pools_omitted\":%u", r->pools_omitted);
    if (r->size >= offsetof(sp_oom_report, rounded) + sizeof r->rounded)
        /* the reason in words: "over the limit now" and "larger than the limit can ever
         * hold" call for different answers (queue and retry, or reject) */
        sp__format_append(buf, len, &used, ",\"status\":\"%s\",\"reason\":\"%s\",\"rounded\":%llu",
                    sp_status_name(r->status), sp_strerror(r->status),
                    (unsigned long long)r->rounded);
    if (r->size >= offsetof(sp_oom_report, stream_name) + sizeof r->stream_name) {
        char name[sizeof r->stream_name + 1]; /* a caller's struct may lack the NUL */
        memcpy(name, r->stream_name, sizeof r->stream_name);
        name[sizeof r->stream_name] = '\0';
        sp__format_append(buf, len, &used, ",\"stream_name\":");
        sp__names_append_json(buf, len, &used, name);
    }
    sp__format_append(buf, len, &used, "}");
    return used;
}
