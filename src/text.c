/* Text output in one shape: sp_*_print hands any report's text to the caller's writer. Each
 * report has one renderer, snprintf-style (the buffer forms: sp_stats_json, the summaries, the
 * Prometheus text); here its text is rendered into a buffer of the size the first pass asked
 * for, again larger if the figures grew in between (another thread allocating), and written.
 * The one-call forms (sp_*_alloc) are sp_*_print with a writer that collects a string. */
#include <stdlib.h>
#include <string.h>

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

/* The renderer of (subject, format); NULL for a format the subject has not. */
static render_fn stats_renderer(sp_text_format format)
{
    return format == SP_TEXT_JSON ? stats_json : format == SP_TEXT_SUMMARY ? stats_summary : NULL;
}

static render_fn oom_renderer(sp_text_format format)
{
    return format == SP_TEXT_JSON ? oom_json : NULL;
}

static render_fn pool_renderer(sp_text_format format)
{
    return format == SP_TEXT_SUMMARY ? pool_summary : NULL;
}

static render_fn runtime_renderer(sp_text_format format)
{
    return format == SP_TEXT_SUMMARY ? runtime_summary
           : format == SP_TEXT_PROMETHEUS ? prometheus
                                          : NULL;
}

/* Renders what's text with fn and hands it to write: the one path of every report. */
static int print(render_fn fn, const void *what, sp_text_writer write, void *user)
{
    if (!fn || !what || !write)
        return SP_ERR_INVALID;
    char *text = NULL;
    int rc = render_alloc(fn, what, &text);
    if (!text)
        return rc;
    if (write(text, strlen(text), user) != 0)
        rc = SP_ERR_IO;
    free(text);
    return rc;
}

int sp_stats_print(const sp_stats *st, sp_text_format format, sp_text_writer write, void *user)
{
    return print(stats_renderer(format), st, write, user);
}

int sp_oom_report_print(const sp_oom_report *r, sp_text_format format, sp_text_writer write,
                        void *user)
{
    return print(oom_renderer(format), r, write, user);
}

int sp_pool_print(sp_pool *pool, sp_text_format format, sp_text_writer write, void *user)
{
    return print(pool_renderer(format), pool, write, user);
}

int sp_runtime_print(sp_runtime *rt, sp_text_format format, sp_text_writer write, void *user)
{
    return print(runtime_renderer(format), rt, write, user);
}

/* ---- the one-call forms: sp_*_print into a string ---- */

typedef struct {
    char *text;
    size_t len, cap;
} string_out;

static int to_string(const char *text, size_t len, void *user)
{
    string_out *s = user;
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + len + 1)
            cap *= 2;
        char *grown = realloc(s->text, cap);
        if (!grown)
            return -1;
        s->text = grown;
        s->cap = cap;
    }
    memcpy(s->text + s->len, text, len);
    s->len += len;
    s->text[s->len] = '\0';
    return 0;
}

/* *out gets the collected string if the print gave text (an empty text is ""), else NULL. */
static int to_out(int rc, string_out *s, char **out)
{
    if (rc == SP_ERR_IO) /* only to_string fails a write: its allocation */
        rc = SP_ERR_NO_HOST_MEMORY;
    if (no_text(rc) || (!s->text && !(s->text = calloc(1, 1)))) {
        free(s->text);
        *out = NULL;
        return no_text(rc) ? rc : SP_ERR_NO_HOST_MEMORY;
    }
    *out = s->text;
    return rc;
}

/* What sp_*_print with this renderer writes, as a string in *out. */
static int print_to_string(render_fn fn, const void *what, char **out)
{
    if (!out)
        return SP_ERR_INVALID;
    string_out s = {NULL, 0, 0};
    return to_out(print(fn, what, to_string, &s), &s, out);
}

int sp_stats_json_alloc(const sp_stats *st, char **out)
{
    return print_to_string(stats_renderer(SP_TEXT_JSON), st, out);
}

int sp_stats_summary_alloc(const sp_stats *st, char **out)
{
    return print_to_string(stats_renderer(SP_TEXT_SUMMARY), st, out);
}

int sp_oom_report_json_alloc(const sp_oom_report *r, char **out)
{
    return print_to_string(oom_renderer(SP_TEXT_JSON), r, out);
}

int sp_pool_summary_alloc(sp_pool *pool, char **out)
{
    return print_to_string(pool_renderer(SP_TEXT_SUMMARY), pool, out);
}

int sp_runtime_summary_alloc(sp_runtime *rt, char **out)
{
    return print_to_string(runtime_renderer(SP_TEXT_SUMMARY), rt, out);
}

int sp_runtime_metrics_prometheus_alloc(sp_runtime *rt, char **out)
{
    return print_to_string(runtime_renderer(SP_TEXT_PROMETHEUS), rt, out);
}

void sp_text_free(char *text)
{
    free(text);
}
