/* What a newcomer meets first (issue 22, items 7-14): zero-initialised structs, one-call text,
 * runtime-wide trim and pool listing, the unused default pool in reports, limits as a share of
 * the device, SP_ALLOC_CONF's edge cases, double frees after the memory went back to the driver,
 * a busy runtime that says why, and a trace file name the start-up probe must refuse. Portable:
 * figures that depend on the device are read from it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "support/fixtures.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

#include "support/stderr_capture.h"

/* ---- item 7: zero-initialised structs ---- */

static void zero_size_structs_name_the_missing_size(void **state)
{
    (void)state;
    sp_pool *pool;
    sp_pool_config c = {0};
    assert_int_equal(sp_pool_create(fx.rt, "chat", &c, &pool), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_pool_create: the sp_pool_config's .size is 0");
    contains(sp_config_error(), "sizeof(sp_pool_config)");
    SP(sp_pool_create(fx.rt, "chat", NULL, &pool));

    sp_stats st = {0};
    assert_int_equal(sp_pool_stats(pool, &st), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_pool_stats: the sp_stats's .size is 0, not set");
    assert_int_equal(sp_runtime_stats(fx.rt, &st), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_runtime_stats: the sp_stats's .size");
    assert_int_equal(sp_pool_get_config(pool, &c), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_pool_get_config: the sp_pool_config's .size");
    assert_int_equal(sp_config_apply(&c, NULL, "limit:1G", NULL, 0), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_config_apply: the sp_pool_config's .size");
    sp_stream_usage u = {0};
    assert_int_equal(sp_stream_stats(pool, cudaStreamPerThread, &u), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_stream_stats: the sp_stream_usage's .size");
    sp_ptr_info info = {0};
    assert_int_equal(sp_pointer_info(fx.rt, &info, &info), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_pointer_info: the sp_ptr_info's .size");
    sp_oom_report r = {0};
    assert_int_equal(sp_runtime_last_oom(fx.rt, &r), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_runtime_last_oom: the sp_oom_report's .size");
    sp_runtime_config rc = {0};
    sp_runtime *other = NULL;
    assert_int_equal(sp_runtime_create(0, &rc, &other), SP_ERR_INVALID);
    contains(sp_config_error(), "sp_runtime_create: the sp_runtime_config's .size");
    assert_null(other);
    sp_stats short_one = {.size = 4};
    assert_int_equal(sp_pool_stats(pool, &short_one), SP_ERR_INVALID);
    contains(sp_config_error(), ".size is 4, smaller than any version of it");
}

/* ---- item 8: one call per text ---- */

static void one_call_text_equals_the_two_call_form(void **state)
{
    (void)state;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "chat", NULL, &pool));
    void *p;
    SP(sp_alloc(pool, &p, 3000, cudaStreamPerThread));
    char two[16384];
    char *one = NULL;
    size_t needed = 0;

    SP(sp_runtime_summary(fx.rt, two, sizeof two, &needed));
    SP(sp_runtime_summary_alloc(fx.rt, &one));
    assert_string_equal(one, two);
    assert_int_equal(strlen(one), needed);
    sp_text_free(one);
    SP(sp_pool_summary(pool, two, sizeof two, &needed));
    SP(sp_pool_summary_alloc(pool, &one));
    assert_string_equal(one, two);
    sp_text_free(one);
    SP(sp_runtime_metrics_prometheus(fx.rt, two, sizeof two, &needed));
    SP(sp_runtime_metrics_prometheus_alloc(fx.rt, &one));
    assert_string_equal(one, two);
    sp_text_free(one);
    sp_stats st = stats_of(pool);
    sp_stats_json(&st, two, sizeof two);
    SP(sp_stats_json_alloc(&st, &one));
    assert_string_equal(one, two);
    sp_text_free(one);
    sp_stats_summary(&st, two, sizeof two);
    SP(sp_stats_summary_alloc(&st, &one));
    assert_string_equal(one, two);
    sp_text_free(one);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(fx.rt, &r));
    sp_oom_report_json(&r, two, sizeof two);
    SP(sp_oom_report_json_alloc(&r, &one));
    assert_string_equal(one, two);
    sp_text_free(one);

    one = (char *)1;
    assert_int_equal(sp_runtime_summary_alloc(NULL, &one), SP_ERR_INVALID);
    assert_int_equal(sp_stats_json_alloc(&st, NULL), SP_ERR_INVALID);
    sp_text_free(NULL);
    SP(sp_free(pool, p, cudaStreamPerThread));
    SP(sp_stream_release(fx.rt, cudaStreamPerThread));
}

/* ---- item 9: runtime-wide trim, the pools of a runtime, the default pool in reports ---- */

typedef struct {
    const char *names[8];
    int n, stop_after;
} pool_list;

static int list_pool(sp_pool *pool, void *user)
{
    pool_list *l = user;
    l->names[l->n++] = sp_pool_name(pool);
    return l->n == l->stop_after;
}

static void runtime_trim_lists_and_reports_only_used_pools(void **state)
{
    (void)state;
    sp_pool *a, *b, *def;
    SP(sp_pool_create(fx.rt, "a", NULL, &a));
    SP(sp_pool_create(fx.rt, "b", NULL, &b));
    pool_list l = {.n = 0};
    assert_int_equal(sp_runtime_pools(fx.rt, list_pool, &l), 3);
    assert_string_equal(l.names[0], "default"); /* oldest first */
    assert_string_equal(l.names[1], "a");
    assert_string_equal(l.names[2], "b");
    l = (pool_list){.n = 0, .stop_after = 2};
    assert_int_equal(sp_runtime_pools(fx.rt, list_pool, &l), 2);
    assert_int_equal(sp_runtime_pools(fx.rt, NULL, NULL), SP_ERR_INVALID);

    cudaStream_t s = new_stream();
    void *p, *q;
    SP(sp_alloc(a, &p, 4 * MiB, s));
    SP(sp_alloc(b, &q, 64 * KiB, s));
    SP(sp_free(a, p, s));
    SP(sp_free(b, q, s));
    assert_true(stats_of(a).held.current > 0);
    assert_true(stats_of(b).held.current > 0);

    /* the default pool was never used: two pools, as the program made */
    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(fx.rt, &rst));
    assert_int_equal(rst.pools, 2);
    char *text;
    SP(sp_runtime_summary_alloc(fx.rt, &text));
    contains(text, "used by 2 pools");
    assert_null(strstr(text, "\ndefault "));
    sp_text_free(text);
    SP(sp_runtime_metrics_prometheus_alloc(fx.rt, &text));
    contains(text, "streampool_pools{device=\"0\"} 2");
    assert_null(strstr(text, "pool=\"default\""));
    sp_text_free(text);

    SP(sp_runtime_trim(fx.rt));
    assert_int_equal(stats_of(a).held.current, 0);
    assert_int_equal(stats_of(b).held.current, 0);
    assert_int_equal(stats_of(a).trims, 1);
    assert_int_equal(sp_runtime_trim(NULL), SP_ERR_INVALID);

    /* once used, the default pool is reported like any other */
    SP(sp_runtime_default_pool(fx.rt, &def));
    SP(sp_alloc(def, &p, 512, s));
    SP(sp_free(def, p, s));
    SP(sp_runtime_stats(fx.rt, &rst));
    assert_int_equal(rst.pools, 3);
    SP(sp_runtime_summary_alloc(fx.rt, &text));
    contains(text, "used by 3 pools");
    contains(text, "\ndefault ");
    sp_text_free(text);
    drop_stream(fx.rt, s);
}

/* ---- item 10: a limit as a share of the device ---- */

static void limit_as_a_share_of_the_device(void **state)
{
    (void)state;
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    SP(sp_config_apply(&c, NULL, "limit:80%,cache_limit:12.5%", NULL, 0));
    assert_int_equal(c.limit, total / 1000000 * 800000 + total % 1000000 * 800000 / 1000000);
    assert_int_equal(c.cache_limit, total / 8);
    SP(sp_config_apply(&c, NULL, "limit: 100 %", NULL, 0));
    assert_int_equal(c.limit, total);
    char err[256];
    /* above 100% it parses, as 100G does: the pool clamps either to the device */
    const char *bad[] = {"limit:0%", "limit:1001%", "limit:%", "limit:80%%", "limit:8.%",
                         "limit:-5%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sp_config_apply(&c, NULL, bad[i], err, sizeof err), SP_ERR_CONFIG);
        contains(err, "a share of the device like 80%");
    }

    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = "chat.limit:50%";
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *chat;
    SP(sp_pool_create(rt, "chat", NULL, &chat));
    sp_pool_config got = {.size = sizeof got};
    SP(sp_pool_get_config(chat, &got));
    assert_int_equal(got.limit, total / 2);
    destroy_runtime(rt);
}

/* ---- item 11: SP_ALLOC_CONF's edge cases ---- */

static sp_pool_config applied(const char *pool, const char *conf)
{
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    char err[256] = "";
    if (sp_config_apply(&c, pool, conf, err, sizeof err) != SP_OK)
        fail_msg("'%s' rejected: %s", conf, err);
    return c;
}

static void refused(const char *pool, const char *conf, const char *words)
{
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    char err[256] = "";
    if (sp_config_apply(&c, pool, conf, err, sizeof err) != SP_ERR_CONFIG)
        fail_msg("'%s' accepted", conf);
    contains(err, words);
}

static void conf_keywords_spaces_duplicates_and_prefixes(void **state)
{
    (void)state;
    /* keywords and suffixes in any case, as sizes already were */
    assert_int_equal(applied(NULL, "release_threshold:MAX").release_threshold, UINT64_MAX);
    assert_int_equal(applied(NULL, "cache_limit:Max").cache_limit, UINT64_MAX);
    assert_int_equal(applied(NULL, "cross_stream:WAIT").cross_stream, SP_CROSS_STREAM_WAIT);
    assert_int_equal(applied(NULL, "limit:4kib").limit, 4 * KiB);
    /* blanks around the value and before the suffix alike */
    assert_int_equal(applied(NULL, "limit: 1G").limit, GiB);
    assert_int_equal(applied(NULL, "limit:1 G").limit, GiB);
    assert_int_equal(applied(NULL, "limit:1 GiB").limit, GiB);
    refused(NULL, "limit:1 G B", "bad value '1 G B' for limit");
    /* a key set twice in one string */
    refused(NULL, "limit:1G,limit:2G", "'limit' is set twice");
    refused("chat", "chat.limit:1G,priority:2,chat.limit:2G", "'chat.limit' is set twice");
    assert_int_equal(applied("chat", "chat.limit:1G,limit:2G").limit, GiB); /* not a duplicate */
    assert_int_equal(applied("chat", "chat.limit:1G,other.limit:2G").limit, GiB);
    refused(NULL, "trace:a,trace:b", "'trace' is set twice");
    /* prefixes no pool can have */
    refused(NULL, "chat..limit:1G", "pool name 'chat.' ends with a dot before '.limit'");
    refused(NULL, "chat..limit:1G", "'chat.limit'");
    char err[256] = "";
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    assert_int_equal(sp_config_apply(&c, NULL, "ch\xff\xfe" "at.limit:1G", err, sizeof err),
                     SP_ERR_CONFIG);
    contains(err, "the pool name before '.limit' is not UTF-8");
    assert_null(strchr(err, '\xff')); /* the raw bytes are not echoed */
    refused(NULL, "a\tb.limit:1G", "not UTF-8 without control characters");
    refused(NULL,
            "a123456789012345678901234567890123456789012345678901234567890123.limit:1G",
            "longer than 63 bytes");
}

static void conf_case_hint_reserve_and_default_pool_keys(void **state)
{
    (void)state;
    /* pool names are case-sensitive: the warning hints at the pool meant */
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = "CHAT.limit:1G,lama.limit:1G";
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *chat;
    SP(sp_pool_create(rt, "chat", NULL, &chat));
    unsetenv("SP_ALLOC_CONF_QUIET");
    char out[2048];
    capture_begin();
    destroy_runtime(rt);
    capture_end(out, sizeof out);
    contains(out, "pool 'CHAT', but no pool of that name was created (pool names are "
                  "case-sensitive: did you mean 'chat'?)");
    contains(out, "pool 'lama', but no pool of that name was created (a typo?)");

    /* a reservation the device cannot give says so */
    rcfg.alloc_conf = "reserve:100T";
    sp_runtime *none = NULL;
    int rc = sp_runtime_create(0, &rcfg, &none);
    assert_true(rc == SP_ERR_OUT_OF_MEMORY || rc == SP_ERR_CUDA); /* cudasim: out of memory */
    contains(sp_config_error(), sp_strerror(rc));
    assert_null(none);
    contains(sp_config_error(), "pool 'default': its reserve of 109951162777600 bytes could not "
                                "be taken from the device");

    /* an unprefixed reserve is the default pool's: other pools, with smaller limits, start */
    rcfg.alloc_conf = "reserve:16M";
    rt = track_runtime(0, &rcfg);
    sp_pool *def, *small;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT, got = {.size = sizeof got};
    cfg.limit = 3 * MiB;
    SP(sp_pool_create(rt, "small", &cfg, &small));
    SP(sp_pool_get_config(small, &got));
    assert_int_equal(got.reserve, 0);
    assert_int_equal(got.limit, 2 * MiB); /* in force: whole pages */
    SP(sp_runtime_default_pool(rt, &def));
    SP(sp_pool_get_config(def, &got));
    assert_int_equal(got.reserve, 16 * MiB);
    destroy_runtime(rt);
}

/* ---- item 12: a double free once the memory went back to the driver ---- */

static void double_free_after_the_driver_took_it_back(void **state)
{
    (void)state;
    /* every free gives its slab or segment back */
    sp_pool *pool = pool_of(fx.rt, "nocache", 0, 0, 0);
    for (size_t size = 4 * KiB; size <= 16 * MiB; size *= 2) {
        void *p;
        SP(sp_alloc(pool, &p, size, fx.a));
        SP(sp_free(pool, p, fx.a));
        CK(cudaStreamSynchronize(fx.a));
        SP(sp_pool_trim(pool, 0)); /* whatever the cache limit left, the driver has it now */
        sp_ptr_info info = {.size = sizeof info};
        SP(sp_pointer_info(fx.rt, p, &info));
        assert_int_equal(info.state, SP_POINTER_UNKNOWN);
        if (sp_free(pool, p, fx.a) != SP_ERR_DOUBLE_FREE)
            fail_msg("a second free of %zu bytes is not SP_ERR_DOUBLE_FREE", size);
    }
    assert_int_equal(stats_of(pool).bad_frees, 13);
    int never;
    assert_int_equal(sp_free(pool, &never, fx.a), SP_ERR_BAD_POINTER); /* never allocated */
}

/* ---- item 13: a busy runtime says which pool holds what ---- */

static void busy_runtime_names_the_pool(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *chat;
    SP(sp_pool_create(rt, "chat", NULL, &chat));
    void *p[2];
    SP(sp_alloc(chat, &p[0], 1000, cudaStreamPerThread));
    SP(sp_alloc(chat, &p[1], 3000, cudaStreamPerThread));
    assert_int_equal(sp_runtime_destroy(rt), SP_ERR_BUSY);
    contains(sp_config_error(), "sp_runtime_destroy: pool 'chat' still has 2 live allocations "
                                "(4000 bytes requested)");
    assert_int_equal(sp_pool_destroy(chat), SP_ERR_BUSY);
    contains(sp_config_error(), "sp_pool_destroy: pool 'chat' still has 2 live allocations");
    SP(sp_free(chat, p[0], cudaStreamPerThread));
    assert_int_equal(sp_runtime_destroy(rt), SP_ERR_BUSY);
    contains(sp_config_error(), "still has 1 live allocation (3000 bytes requested)");
    SP(sp_free(chat, p[1], cudaStreamPerThread));
    SP(sp_stream_release(rt, cudaStreamPerThread));
    destroy_runtime(rt);
}

/* ---- item 14: a trace name too long for FILE.json ---- */

static void trace_name_too_long_for_json_is_refused_at_start(void **state)
{
    (void)state;
    char dir[] = "/tmp/sp-newcomer-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char conf[600], path[512];
    int n = snprintf(path, sizeof path, "%s/", dir);
    memset(path + n, 'x', 251); /* NAME_MAX 255: FILE fits, FILE.json does not */
    path[n + 251] = '\0';
    snprintf(conf, sizeof conf, "trace:%s", path);
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = conf;
    char out[2048];
    capture_begin();
    sp_runtime *rt = track_runtime(0, &rcfg);
    capture_end(out, sizeof out);
    contains(out, "streampool: warning: cannot trace to");
    contains(out, ".json cannot be created");
    assert_int_equal(sp_runtime_trace_stop(rt), SP_ERR_INVALID); /* never started */
    assert_int_equal(access(path, F_OK), -1);                    /* the probe left nothing */
    destroy_runtime(rt);
    assert_int_equal(rmdir(dir), 0);
}

/* A failed assertion leaves its runtimes behind: destroyed here, so the next test starts clean. */
static int teardown(void **state)
{
    (void)destroy_tracked_runtimes();
    return reset_device(state);
}

#define T(fn) cmocka_unit_test_teardown(fn, teardown)
TEST_MAIN_WITHOUT_ALLOC_CONF("newcomer",
    FX(zero_size_structs_name_the_missing_size),
    FX(one_call_text_equals_the_two_call_form),
    FX(runtime_trim_lists_and_reports_only_used_pools),
    T(limit_as_a_share_of_the_device),
    T(conf_keywords_spaces_duplicates_and_prefixes),
    T(conf_case_hint_reserve_and_default_pool_keys),
    FX(double_free_after_the_driver_took_it_back),
    T(busy_runtime_names_the_pool),
    T(trace_name_too_long_for_json_is_refused_at_start)
)
#undef T
