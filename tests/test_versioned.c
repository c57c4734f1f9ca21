/* The one rule for versioned structs (streampool.h, "versioned structs"), struct by struct: every
 * _INIT macro sets the size; every call accepts a struct of an older, shorter version, fills it
 * and writes nothing past its size (bytes past it keep a canary), or reads defaults for what it
 * lacks; a program built against an older header, whose configs began with a size_t size,
 * keeps working unrebuilt (the old layouts are spelled out here and checked field by field). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"

static const size_t MiB = 1024 * 1024;
#define CANARY 0xAB

/* Fills the struct at s with the canary, then sets its size (its first four bytes). */
static void canary_with_size(void *s, size_t whole, size_t size)
{
    memset(s, CANARY, whole);
    uint32_t n = (uint32_t)size;
    memcpy(s, &n, sizeof n);
}

/* Every byte of s from `from` to `to` still holds the canary. */
static void untouched_past(const void *s, size_t from, size_t to)
{
    const unsigned char *b = s;
    for (size_t i = from; i < to; i++)
        if (b[i] != CANARY)
            fail_msg("byte %zu (of %zu) written past the caller's size %zu", i, to, from);
}

static void every_init_macro_sets_its_structs_size(void **state)
{
    (void)state;
    sp_runtime_config rc = SP_RUNTIME_CONFIG_INIT;
    sp_pool_config pc = SP_POOL_CONFIG_INIT;
    sp_request_config qc = SP_REQUEST_CONFIG_INIT;
    sp_stats st = SP_STATS_INIT;
    sp_stream_usage su = SP_STREAM_USAGE_INIT;
    sp_ptr_info pi = SP_PTR_INFO_INIT;
    sp_oom_report oom = SP_OOM_REPORT_INIT;
    sp_request_stats rs = SP_REQUEST_STATS_INIT;
    assert_int_equal(rc.size, sizeof rc);
    assert_int_equal(pc.size, sizeof pc);
    assert_int_equal(qc.size, sizeof qc);
    assert_int_equal(st.size, sizeof st);
    assert_int_equal(su.size, sizeof su);
    assert_int_equal(pi.size, sizeof pi);
    assert_int_equal(oom.size, sizeof oom);
    assert_int_equal(rs.size, sizeof rs);
    /* and every call takes them as they are */
    sp_runtime *rt = track_runtime(0, &rc);
    sp_pool *pool;
    SP(sp_pool_create(rt, "p", &pc, &pool));
    cudaStream_t s = new_stream();
    sp_request req;
    SP(sp_request_begin_with(pool, s, &qc, &req));
    void *p;
    SP(sp_request_alloc(pool, req, &p, 4096));
    SP(sp_pool_stats(pool, &st));
    SP(sp_stream_stats(pool, s, &su));
    SP(sp_pointer_info(rt, p, &pi));
    assert_int_equal(pi.state, SP_POINTER_LIVE);
    SP(sp_runtime_last_oom(rt, &oom));
    assert_int_equal(oom.failures, 0);
    SP(sp_request_end(pool, req, 0, &rs));
    assert_int_equal(rs.freed_at_end, 1);
    drop_stream(rt, s);
    destroy_runtime(rt);
}

/* sp_stats of version 3 (before the reservations) and of version 4 (before the peers and
 * processes, SP_STATS_MULTI): each filled up to its end, not a byte after. */
static void stats_of_the_previous_version_are_filled_and_nothing_past_them(void **state)
{
    (void)state;
    void *p;
    SP(sp_alloc(fx.pool, &p, 4096, cudaStreamPerThread));
    const size_t versions[] = {offsetof(sp_stats, reserve), offsetof(sp_stats, peers_read_write)};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        const size_t v = versions[i];
        sp_stats st;
        canary_with_size(&st, sizeof st, v);
        SP(sp_pool_stats(fx.pool, &st));
        assert_int_equal(st.size, v);
        assert_int_equal(st.version, SP_STATS_VERSION);
        assert_int_equal(st.allocs, 1);
        assert_int_equal(st.requested.current, 4096);
        assert_int_equal(st.streams, 1);
        untouched_past(&st, v, sizeof st);
        canary_with_size(&st, sizeof st, v);
        SP(sp_runtime_stats(fx.rt, &st));
        assert_int_equal(st.size, v);
        assert_int_equal(st.allocs, 1);
        untouched_past(&st, v, sizeof st);
    }
    SP(sp_free(fx.pool, p, cudaStreamPerThread));
}

/* An sp_stream_usage without its label, and an sp_ptr_info without the stream. */
static void stream_usage_and_ptr_info_shorter_than_today_are_filled_up_to_their_size(void **state)
{
    (void)state;
    void *p;
    SP(sp_alloc(fx.pool, &p, 4096, fx.a));
    const size_t nameless = offsetof(sp_stream_usage, name);
    sp_stream_usage u;
    canary_with_size(&u, sizeof u, nameless);
    SP(sp_stream_stats(fx.pool, fx.a, &u));
    assert_int_equal(u.size, nameless);
    assert_int_equal(u.version, SP_STREAM_STATS_VERSION);
    assert_int_equal(u.requested, 4096);
    assert_int_equal(u.allocs, 1);
    untouched_past(&u, nameless, sizeof u);

    const size_t streamless = offsetof(sp_ptr_info, stream);
    sp_ptr_info info;
    canary_with_size(&info, sizeof info, streamless);
    SP(sp_pointer_info(fx.rt, p, &info));
    assert_int_equal(info.size, streamless);
    assert_int_equal(info.state, SP_POINTER_LIVE);
    assert_ptr_equal(info.pool, fx.pool);
    assert_int_equal(info.requested, 4096);
    untouched_past(&info, streamless, sizeof info);
    SP(sp_free(fx.pool, p, fx.a));
}

/* sp_oom_report from before the status and the stream name: filled up to the pools, and its
 * JSON says only what that version holds. */
static void oom_report_of_the_previous_version_is_filled_and_nothing_past_it(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "small", 2 * MiB, 0, UINT64_MAX);
    void *p = NULL;
    assert_int_equal(sp_alloc(pool, &p, 4 * MiB, cudaStreamPerThread), SP_ERR_NEVER_FITS);
    const size_t before_status = offsetof(sp_oom_report, status);
    sp_oom_report r;
    canary_with_size(&r, sizeof r, before_status);
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.size, before_status);
    assert_int_equal(r.failures, 1);
    assert_string_equal(r.pool, "small");
    assert_int_equal(r.bytes, 4 * MiB);
    untouched_past(&r, before_status, sizeof r);
    char json[4096];
    sp_oom_report_json(&r, json, sizeof json);
    assert_non_null(strstr(json, "\"pool\":\"small\""));
    assert_null(strstr(json, "\"rounded\""));
    assert_null(strstr(json, "\"stream_name\""));
}

/* sp_request_end took only the whole struct; it now takes one without the last counter (down
 * to its id), and a size below the id is still refused, naming the size. */
static void request_end_fills_a_shorter_request_stats_up_to_its_size(void **state)
{
    (void)state;
    sp_request req;
    SP(sp_request_begin(fx.pool, cudaStreamPerThread, NULL, &req));
    void *p;
    SP(sp_request_alloc(fx.pool, req, &p, 4096));
    sp_request_stats tiny = {.size = 8};
    assert_int_equal(sp_request_end(fx.pool, req, 0, &tiny), SP_ERR_INVALID);
    assert_non_null(strstr(sp_config_error(), "sp_request_end: the sp_request_stats's .size is 8"));
    const size_t older = offsetof(sp_request_stats, fences_recorded);
    sp_request_stats st;
    canary_with_size(&st, sizeof st, older);
    SP(sp_request_end(fx.pool, req, 0, &st));
    assert_int_equal(st.size, older);
    assert_int_equal(st.id, req);
    assert_int_equal(st.allocs, 1);
    assert_int_equal(st.freed_at_end, 1);
    assert_int_equal(st.requested_peak, 4096);
    untouched_past(&st, older, sizeof st);
}

/* A config of an older, shorter version: what it lacks takes the default, whatever stands in
 * the caller's memory past its size (here the canary, which as a pointer would crash). */
static void configs_shorter_than_today_get_the_defaults_for_what_they_lack(void **state)
{
    (void)state;
    sp_runtime_config rc;
    canary_with_size(&rc, sizeof rc, offsetof(sp_runtime_config, stats_flush_bytes));
    rc.reserved_ = 0;
    rc.capture_check = SP_CAPTURE_DECLARED;
    sp_runtime *rt = track_runtime(0, &rc);
    sp_pool_config pc;
    canary_with_size(&pc, sizeof pc, offsetof(sp_pool_config, limit));
    pc.release_threshold = 0;
    pc.cross_stream = SP_CROSS_STREAM_WAIT;
    sp_pool *pool;
    SP(sp_pool_create(rt, "p", &pc, &pool));
    sp_pool_config got = SP_POOL_CONFIG_INIT;
    SP(sp_pool_get_config(pool, &got));
    assert_int_equal(got.cross_stream, SP_CROSS_STREAM_WAIT);
    assert_int_equal(got.limit, 0);
    assert_int_equal(got.reserve, 0);
    assert_true(got.cache_limit == UINT64_MAX);
    assert_int_equal(got.priority, 0);
    /* sp_config_apply reads and writes the same shorter struct */
    assert_int_equal(sp_config_apply(&pc, NULL, "cross_stream:no_wait", NULL, 0), SP_OK);
    assert_int_equal(pc.size, offsetof(sp_pool_config, limit));
    assert_int_equal(pc.cross_stream, SP_CROSS_STREAM_NO_WAIT);
    untouched_past(&pc, offsetof(sp_pool_config, limit), sizeof pc);
    /* and sp_pool_get_config writes a shorter one only up to its size */
    canary_with_size(&got, sizeof got, offsetof(sp_pool_config, limit));
    SP(sp_pool_get_config(pool, &got));
    assert_int_equal(got.cross_stream, SP_CROSS_STREAM_WAIT);
    untouched_past(&got, offsetof(sp_pool_config, limit), sizeof got);
    destroy_runtime(rt);
}

/* ---- the structs as an older header laid them out: `size_t size` first ---- */

typedef struct {
    size_t size;
    sp_capture_check capture_check;
    size_t stats_flush_bytes;
    const char *alloc_conf;
} old_runtime_config;

typedef struct {
    size_t size;
    uint64_t release_threshold;
    sp_cross_stream_policy cross_stream;
    uint64_t limit, reserve, cache_limit;
    int priority;
} old_pool_config;

typedef struct {
    size_t size;
    sp_request id;
    uint64_t allocs, misses, frees, freed_at_end, freed_at_end_bytes, requested_total,
        requested_peak, fences_recorded;
} old_request_stats;

typedef struct {
    size_t size;
    const char *label;
    uint64_t expected_bytes;
} old_request_config;

/* Every field of the old layout stands where it stood, and the struct is as long. */
#define SAME_PLACE(old, now, field)                                                           \
    _Static_assert(offsetof(old, field) == offsetof(now, field), #now "." #field " moved");
#define RUNTIME_CONFIG_PLACE(f) SAME_PLACE(old_runtime_config, sp_runtime_config, f)
#define POOL_CONFIG_PLACE(f) SAME_PLACE(old_pool_config, sp_pool_config, f)
#define REQUEST_STATS_PLACE(f) SAME_PLACE(old_request_stats, sp_request_stats, f)
#define REQUEST_CONFIG_PLACE(f) SAME_PLACE(old_request_config, sp_request_config, f)
#define FIELDS_old_runtime_config(X) X(capture_check) X(stats_flush_bytes) X(alloc_conf)
#define FIELDS_old_pool_config(X)                                                             \
    X(release_threshold) X(cross_stream) X(limit) X(reserve) X(cache_limit) X(priority)
#define FIELDS_old_request_stats(X)                                                           \
    X(id) X(allocs) X(misses) X(frees) X(freed_at_end) X(freed_at_end_bytes)                  \
    X(requested_total) X(requested_peak) X(fences_recorded)
#define FIELDS_old_request_config(X) X(label) X(expected_bytes)
FIELDS_old_runtime_config(RUNTIME_CONFIG_PLACE)
FIELDS_old_pool_config(POOL_CONFIG_PLACE)
FIELDS_old_request_stats(REQUEST_STATS_PLACE)
FIELDS_old_request_config(REQUEST_CONFIG_PLACE)
_Static_assert(sizeof(old_runtime_config) == sizeof(sp_runtime_config) &&
                   sizeof(old_request_stats) == sizeof(sp_request_stats) &&
                   sizeof(old_request_config) == sizeof(sp_request_config),
               "a struct's size changed");
/* sp_pool_config grew at its end since (peers and sharing, issue 28): the 0.1 layout is the
 * current one up to its first new field, an older version that every call accepts */
_Static_assert(sizeof(old_pool_config) == offsetof(sp_pool_config, peers_read_write),
               "sp_pool_config's old layout is not its prefix");

/* A program built against an older header passes its structs as they were: every call reads them right, and
 * its size_t size reads back whole (the library wrote only the low four bytes, the same value). */
static void structs_laid_out_by_an_older_header_keep_working(void **state)
{
    (void)state;
    old_runtime_config rc = {sizeof rc, SP_CAPTURE_DECLARED, 0, "priority:3"};
    sp_runtime *rt = track_runtime(0, (const sp_runtime_config *)&rc);
    old_pool_config pc = {sizeof pc, UINT64_MAX, SP_CROSS_STREAM_NO_WAIT, 4 * MiB, 0, UINT64_MAX,
                          0};
    sp_pool *pool;
    SP(sp_pool_create(rt, "old", (const sp_pool_config *)&pc, &pool));
    old_pool_config got;
    memset(&got, 0, sizeof got);
    got.size = sizeof got;
    SP(sp_pool_get_config(pool, (sp_pool_config *)&got));
    assert_int_equal(got.size, sizeof got);
    assert_int_equal(got.cross_stream, SP_CROSS_STREAM_NO_WAIT);
    assert_int_equal(got.limit, 4 * MiB);
    assert_int_equal(got.priority, 3); /* the runtime's alloc_conf, read from the old struct */

    old_request_config qc = {sizeof qc, "old-request", 2 * MiB};
    sp_request req;
    SP(sp_request_begin_with(pool, cudaStreamPerThread, (const sp_request_config *)&qc, &req));
    void *p;
    SP(sp_request_alloc(pool, req, &p, 4096));
    assert_int_equal(stats_of(pool).admitted_bytes, 2 * MiB);
    old_request_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    SP(sp_request_end(pool, req, 0, (sp_request_stats *)&st));
    assert_int_equal(st.size, sizeof st);
    assert_int_equal(st.id, req);
    assert_int_equal(st.allocs, 1);
    assert_int_equal(st.freed_at_end, 1);
    destroy_runtime(rt);
}

TEST_MAIN("tests",
    TRACKED(every_init_macro_sets_its_structs_size),
    FX(stats_of_the_previous_version_are_filled_and_nothing_past_them),
    FX(stream_usage_and_ptr_info_shorter_than_today_are_filled_up_to_their_size),
    FX(oom_report_of_the_previous_version_is_filled_and_nothing_past_it),
    FX(request_end_fills_a_shorter_request_stats_up_to_its_size),
    cmocka_unit_test_teardown(configs_shorter_than_today_get_the_defaults_for_what_they_lack,
                              teardown_runtimes),
    cmocka_unit_test_teardown(structs_laid_out_by_an_older_header_keep_working,
                              teardown_runtimes)
)
