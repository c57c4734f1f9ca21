/* One-call forms of every text output (JSON, summaries, Prometheus): each renderer is
 * snprintf-style, so a caller otherwise calls twice, once for the size. Here the text is
 * rendered into a buffer of the size the first pass asked for, again larger if the figures
 * grew in between (another thread allocating), and handed to the caller, who frees it with
 * sp_text_free. */
#include <stdlib.h>

#include "base.h"

/* One rendering into buf of len bytes; sets *needed, returns a status. */
typedef int (*render_fn)(const void *what, char *buf, size_t len, size_t *needed);

enum { RETRIES = 8 }; /* renderings before a text that keeps growing is given up on */

/* The renderers return a stats read's error (a CUDA one) with the text complete all the same;
 * only these two mean there is no text. */
static bool no_text(int rc)
{
    return rc == SP_ERR_INVALID || rc == SP_ERR_NO_HOST_MEMORY;
}

static int render_alloc(render_fn fn, const void *what, char **out)
{
    if (!out)
        return SP_ERR_INVALID;
    *out = NULL;
    size_t needed = 0;
    int rc = fn(what, NULL, 0, &needed);
    for (int i = 0; i < RETRIES && !no_text(rc); i++) {
        size_t cap = needed + needed / 8 + 64; /* room for figures that grew meanwhile */
        char *buf = malloc(cap);
        if (!buf)
            return SP_ERR_NO_HOST_MEMORY;
        rc = fn(what, buf, cap, &needed);
        if (needed < cap && !no_text(rc)) {
            *out = buf;
            return rc;
        }
        free(buf);
    }
    return no_text(rc) ? rc : SP_ERR_NO_HOST_MEMORY;
}

static int stats_json(const void *st, char *buf, size_t len, size_t *needed)
{
    *needed = sp_stats_json(st, buf, len);
    return SP_OK;
}

static int stats_summary(const void *st, char *buf, size_t len, size_t *needed)
{
    *needed = sp_stats_summary(st, buf, len);
    return SP_OK;
}

static int oom_json(const void *r, char *buf, size_t len, size_t *needed)
{
    *needed = sp_oom_report_json(r, buf, len);
    return SP_OK;
}

static int pool_summary(const void *pool, char *buf, size_t len, size_t *needed)
{
    return sp_pool_summary((sp_pool *)pool, buf, len, needed);
}

static int runtime_summary(const void *rt, char *buf, size_t len, size_t *needed)
{
    return sp_runtime_summary((sp_runtime *)rt, buf, len, needed);
}

static int prometheus(const void *rt, char *buf, size_t len, size_t *needed)
{
    return sp_runtime_metrics_prometheus((sp_runtime *)rt, buf, len, needed);
}

int sp_stats_json_alloc(const sp_stats *st, char **out)
{
    return st ? render_alloc(stats_json, st, out) : SP_ERR_INVALID;
}

int sp_stats_summary_alloc(const sp_stats *st, char **out)
{
    return st ? render_alloc(stats_summary, st, out) : SP_ERR_INVALID;
}

int sp_oom_report_json_alloc(const sp_oom_report *r, char **out)
{
    return r ? render_alloc(oom_json, r, out) : SP_ERR_INVALID;
}

int sp_pool_summary_alloc(sp_pool *pool, char **out)
{
    return pool ? render_alloc(pool_summary, pool, out) : SP_ERR_INVALID;
}

int sp_runtime_summary_alloc(sp_runtime *rt, char **out)
{
    return rt ? render_alloc(runtime_summary, rt, out) : SP_ERR_INVALID;
}

int sp_runtime_metrics_prometheus_alloc(sp_runtime *rt, char **out)
{
    return rt ? render_alloc(prometheus, rt, out) : SP_ERR_INVALID;
}

void sp_text_free(char *text)
{
    free(text);
}
