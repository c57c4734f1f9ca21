/* Text output in one shape: sp_*_print gives every report (stats JSON and summary, the OOM
 * report's JSON, a pool's and the runtime's summary, the Prometheus text) to a writer, the same
 * text as its buffer form; a writer that stops ends the call with SP_ERR_IO; a format the
 * subject has not is refused before anything is written; the one-call forms give the same text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const size_t MiB = 1024 * 1024;

/* What a writer was given, joined, and how many times it was called. */
typedef struct {
    char text[1 << 16];
    size_t len;
    int calls;
    int stop_after; /* calls before it answers non-zero; 0: never */
} collected;

static int collect(const char *text, size_t len, void *user)
{
    collected *c = user;
    c->calls++;
    assert_true(c->len + len < sizeof c->text);
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = '\0';
    return c->stop_after && c->calls >= c->stop_after;
}

/* A runtime whose reports all have something to say: a pool "chat" with a live allocation on a
 * labelled stream and a refused request (the OOM report). */
typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    void *live;
    sp_stats stats;
    sp_oom_report oom;
} reporting_runtime;

static reporting_runtime *busy_runtime(void)
{
    static reporting_runtime r;
    r.rt = track_runtime(0, NULL);
    r.pool = pool_of(r.rt, "chat", 4 * MiB, 0, UINT64_MAX);
    SP(sp_stream_set_name(r.rt, cudaStreamPerThread, "worker-1"));
    SP(sp_alloc(r.pool, &r.live, 5000, cudaStreamPerThread));
    void *p = NULL;
    assert_int_equal(sp_alloc(r.pool, &p, 8 * MiB, cudaStreamPerThread), SP_ERR_NEVER_FITS);
    r.stats = (sp_stats)SP_STATS_INIT;
    SP(sp_pool_stats(r.pool, &r.stats));
    r.oom = (sp_oom_report)SP_OOM_REPORT_INIT;
    SP(sp_runtime_last_oom(r.rt, &r.oom));
    return &r;
}

static void end_busy_runtime(reporting_runtime *r)
{
    SP(sp_free(r->pool, r->live, cudaStreamPerThread));
    destroy_runtime(r->rt);
}

static char want[1 << 16]; /* the buffer form's text */
static collected got;      /* the print's */

static collected *fresh(collected *c)
{
    memset(c, 0, sizeof *c);
    return c;
}

/* The print succeeded and gave exactly the buffer form's text, `needed` bytes long. */
static void printed_the_buffer_forms_text(int print_status, size_t needed)
{
    SP(print_status);
    assert_int_equal(got.len, needed);
    assert_string_equal(got.text, want);
}

typedef enum {
    STATS_JSON,
    STATS_SUMMARY,
    OOM_JSON,
    POOL_SUMMARY,
    RUNTIME_SUMMARY,
    PROMETHEUS,
} report;

/* The report's buffer form into `want`; its length. */
static size_t buffer_form(report which, const reporting_runtime *r)
{
    size_t needed = 0;
    switch (which) {
    case STATS_JSON:
        return sp_stats_json(&r->stats, want, sizeof want);
    case STATS_SUMMARY:
        return sp_stats_summary(&r->stats, want, sizeof want);
    case OOM_JSON:
        return sp_oom_report_json(&r->oom, want, sizeof want);
    case POOL_SUMMARY:
        SP(sp_pool_summary(r->pool, want, sizeof want, &needed));
        break;
    case RUNTIME_SUMMARY:
        SP(sp_runtime_summary(r->rt, want, sizeof want, &needed));
        break;
    case PROMETHEUS:
        SP(sp_runtime_metrics_prometheus(r->rt, want, sizeof want, &needed));
        break;
    }
    return needed;
}

/* The same report through the one shape, into `got`; the print's status. */
static int print(report which, const reporting_runtime *r)
{
    static const sp_text_format format[] = {SP_TEXT_JSON,    SP_TEXT_SUMMARY, SP_TEXT_JSON,
                                            SP_TEXT_SUMMARY, SP_TEXT_SUMMARY, SP_TEXT_PROMETHEUS};
    collected *c = fresh(&got);
    if (which <= STATS_SUMMARY)
        return sp_stats_print(&r->stats, format[which], collect, c);
    if (which == OOM_JSON)
        return sp_oom_report_print(&r->oom, format[which], collect, c);
    if (which == POOL_SUMMARY)
        return sp_pool_print(r->pool, format[which], collect, c);
    return sp_runtime_print(r->rt, format[which], collect, c);
}

/* What each report must hold besides: the stream's label, the pool's name, its counter. */
static const char *const holds[] = {
    [OOM_JSON] = "\"stream_name\":\"worker-1\"",
    [POOL_SUMMARY] = "chat",
    [PROMETHEUS] = "streampool_allocs_total{device=\"0\",pool=\"chat\"} 1\n",
};

/* The report named in the test's name prints the text of its buffer form (main). */
static void prints_as_its_buffer_form(void **state)
{
    report which = *(const report *)*state;
    reporting_runtime *r = busy_runtime();
    size_t needed = buffer_form(which, r);
    printed_the_buffer_forms_text(print(which, r), needed);
    if (which < sizeof holds / sizeof *holds && holds[which])
        assert_non_null(strstr(got.text, holds[which]));
    end_busy_runtime(r);
}

static void a_writer_that_stops_ends_the_print_with_sp_err_io(void **state)
{
    (void)state;
    reporting_runtime *r = busy_runtime();
    fresh(&got)->stop_after = 1;
    assert_int_equal(sp_runtime_print(r->rt, SP_TEXT_PROMETHEUS, collect, &got), SP_ERR_IO);
    assert_int_equal(got.calls, 1);
    fresh(&got)->stop_after = 1;
    assert_int_equal(sp_stats_print(&r->stats, SP_TEXT_JSON, collect, &got), SP_ERR_IO);
    assert_int_equal(got.calls, 1);
    end_busy_runtime(r);
}

static void a_format_the_subject_has_not_is_refused_before_any_write(void **state)
{
    (void)state;
    reporting_runtime *r = busy_runtime();
    fresh(&got);
    assert_int_equal(sp_stats_print(&r->stats, SP_TEXT_PROMETHEUS, collect, &got),
                     SP_ERR_INVALID);
    assert_int_equal(sp_oom_report_print(&r->oom, SP_TEXT_SUMMARY, collect, &got),
                     SP_ERR_INVALID);
    assert_int_equal(sp_pool_print(r->pool, SP_TEXT_JSON, collect, &got), SP_ERR_INVALID);
    assert_int_equal(sp_runtime_print(r->rt, SP_TEXT_JSON, collect, &got), SP_ERR_INVALID);
    assert_int_equal(sp_runtime_print(r->rt, (sp_text_format)0, collect, &got), SP_ERR_INVALID);
    /* and missing arguments */
    assert_int_equal(sp_runtime_print(r->rt, SP_TEXT_SUMMARY, NULL, &got), SP_ERR_INVALID);
    assert_int_equal(sp_runtime_print(NULL, SP_TEXT_SUMMARY, collect, &got), SP_ERR_INVALID);
    assert_int_equal(sp_pool_print(NULL, SP_TEXT_SUMMARY, collect, &got), SP_ERR_INVALID);
    assert_int_equal(sp_stats_print(NULL, SP_TEXT_JSON, collect, &got), SP_ERR_INVALID);
    assert_int_equal(sp_oom_report_print(NULL, SP_TEXT_JSON, collect, &got), SP_ERR_INVALID);
    assert_int_equal(got.calls, 0);
    end_busy_runtime(r);
}

/* Each one-call form is its print collected into a string. */
static void one_call_forms_give_the_text_their_print_writes(void **state)
{
    (void)state;
    reporting_runtime *r = busy_runtime();
    char *text = NULL;
#define SAME_AS_PRINT(alloc_call, print_call)                                                  \
    do {                                                                                       \
        fresh(&got);                                                                           \
        SP(print_call);                                                                        \
        SP(alloc_call);                                                                        \
        assert_string_equal(text, got.text);                                                   \
        sp_text_free(text);                                                                    \
    } while (0)
    SAME_AS_PRINT(sp_stats_json_alloc(&r->stats, &text),
                  sp_stats_print(&r->stats, SP_TEXT_JSON, collect, &got));
    SAME_AS_PRINT(sp_stats_summary_alloc(&r->stats, &text),
                  sp_stats_print(&r->stats, SP_TEXT_SUMMARY, collect, &got));
    SAME_AS_PRINT(sp_oom_report_json_alloc(&r->oom, &text),
                  sp_oom_report_print(&r->oom, SP_TEXT_JSON, collect, &got));
    SAME_AS_PRINT(sp_pool_summary_alloc(r->pool, &text),
                  sp_pool_print(r->pool, SP_TEXT_SUMMARY, collect, &got));
    SAME_AS_PRINT(sp_runtime_summary_alloc(r->rt, &text),
                  sp_runtime_print(r->rt, SP_TEXT_SUMMARY, collect, &got));
    SAME_AS_PRINT(sp_runtime_metrics_prometheus_alloc(r->rt, &text),
                  sp_runtime_print(r->rt, SP_TEXT_PROMETHEUS, collect, &got));
#undef SAME_AS_PRINT
    text = (char *)1;
    assert_int_equal(sp_pool_summary_alloc(NULL, &text), SP_ERR_INVALID);
    assert_null(text);
    end_busy_runtime(r);
}

#define PRINTS(name, which)                                                                    \
    {#name, prints_as_its_buffer_form, NULL, teardown_runtimes, &(report){which}}
TEST_MAIN("tests",
    PRINTS(stats_json_prints_as_its_buffer_form, STATS_JSON),
    PRINTS(stats_summary_prints_as_its_buffer_form, STATS_SUMMARY),
    PRINTS(oom_report_json_prints_as_its_buffer_form, OOM_JSON),
    PRINTS(pool_summary_prints_as_its_buffer_form, POOL_SUMMARY),
    PRINTS(runtime_summary_prints_as_its_buffer_form, RUNTIME_SUMMARY),
    PRINTS(prometheus_text_prints_as_its_buffer_form, PROMETHEUS),
    TRACKED(a_writer_that_stops_ends_the_print_with_sp_err_io),
    TRACKED(a_format_the_subject_has_not_is_refused_before_any_write),
    TRACKED(one_call_forms_give_the_text_their_print_writes)
)
