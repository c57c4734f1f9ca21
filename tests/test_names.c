/* Bad input (issue 10): pool names that are not printable UTF-8 are refused; every JSON report
 * stays valid whatever bytes a name or a hand-filled report holds; SP_ALLOC_CONF keys for pools
 * that never exist are reported; a device that does not exist has its own status, and
 * sp_last_cuda_error never describes an older call. Portable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"

static void pool_names_must_be_printable_utf8(void **state)
{
    (void)state;
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt));
    static const char *const refused[] = {
        "",                      /* empty */
        "tab\there", "new\nline", "cr\r", "esc\x1b[31m", "del\x7f",
        "c1\xc2\x85next",        /* U+0085 NEXT LINE, a C1 control */
        "stray\xff", "cut\xe2\x82", "overlong\xc0\xaf", "surrogate\xed\xa0\x80",
        "past\xf4\x90\x80\x80",  /* U+110000 */
        "0123456789012345678901234567890123456789012345678901234567890123", /* 64 bytes */
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        sp_pool *pool = NULL;
        assert_int_equal(sp_pool_create(rt, refused[i], NULL, &pool), SP_ERR_INVALID);
        assert_null(pool);
    }
    static const char *const accepted[] = {
        "llama-70b.v2", "a b", "\xe6\xa8\xa1\xe5\x9e\x8b", /* 模型 */
        "emoji\xf0\x9f\x9a\x80", "quote\"back\\slash",
        "012345678901234567890123456789012345678901234567890123456789012", /* 63 bytes */
    };
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        sp_pool *pool = NULL;
        SP(sp_pool_create(rt, accepted[i], NULL, &pool));
        assert_string_equal(sp_pool_name(pool), accepted[i]);
        SP(sp_pool_destroy(pool));
    }
    SP(sp_runtime_destroy(rt));
}

/* A report filled in by hand (or by an older library) may hold any bytes: the JSON still has
 * every control character escaped and no byte that is not UTF-8. */
static void oom_report_json_escapes_every_byte(void **state)
{
    (void)state;
    sp_oom_report r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.failures = 1;
    snprintf(r.pool, sizeof r.pool, "a\"b\\c\td\ne\x01\x7f\xc2\x85\xff\xe6\xa8\xa1");
    r.bytes = 1000;
    r.npools = 1;
    snprintf(r.pools[0].name, sizeof r.pools[0].name, "x\ry\b");
    char json[2048];
    size_t n = sp_oom_report_json(&r, json, sizeof json);
    assert_int_equal(n, strlen(json));
    assert_string_equal(json,
        "{\"failures\":1,\"pool\":\"a\\\"b\\\\c\\td\\ne\\u0001\\u007f\\u0085\\ufffd\xe6\xa8\xa1\","
        "\"bytes\":1000,\"stream\":\"(nil)\",\"device_free\":0,\"device_total\":0,\"pools\":["
        "{\"name\":\"x\\ry\\u0008\",\"requested\":0,\"active\":0,\"cached\":0,\"reserved\":0,"
        "\"limit\":0,\"reservation\":0,\"priority\":0}],\"pools_omitted\":0,"
        "\"status\":\"SP_ERR_OK\",\"reason\":\"success\",\"rounded\":0,\"stream_name\":\"\"}");
    assert_int_equal(sp_oom_report_json(&r, json, 10), n); /* truncated: the full length */
    assert_int_equal(strlen(json), 9);
}

static void unknown_pool_names_in_config_are_reported(void **state)
{
    (void)state;
    setenv("SP_ALLOC_CONF", "lama.limit:1G,llama.priority:2,default.priority:1,lama.reserve:0,"
                            "gone.priority:4,ghost.v2.cache_limit:8M", 1);
    setenv("SP_ALLOC_CONF_QUIET", "1", 1);
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.alloc_conf = "mistral.priority:1,encoder.limit:1G";
    sp_runtime *rt;
    SP(sp_runtime_create(0, &cfg, &rt));
    char names[128];
    assert_int_equal(sp_runtime_check_config(rt, names, sizeof names), 6);
    assert_string_equal(names, "mistral,encoder,lama,llama,gone,ghost.v2");
    sp_pool *llama, *gone, *mistral;
    SP(sp_pool_create(rt, "llama", NULL, &llama));
    SP(sp_pool_create(rt, "gone", NULL, &gone));
    SP(sp_pool_create(rt, "mistral", NULL, &mistral));
    sp_pool_config got;
    got.size = sizeof got;
    SP(sp_pool_get_config(gone, &got));
    assert_int_equal(got.priority, 4);
    SP(sp_pool_destroy(gone)); /* it existed: its keys were not a typo */
    assert_int_equal(sp_runtime_check_config(rt, names, sizeof names), 3);
    assert_string_equal(names, "encoder,lama,ghost.v2");
    assert_int_equal(sp_runtime_check_config(rt, names, 9), 3); /* truncated */
    assert_string_equal(names, "encoder,");
    assert_int_equal(sp_runtime_check_config(rt, NULL, 0), 3);
    assert_int_equal(sp_runtime_check_config(NULL, names, sizeof names), SP_ERR_INVALID);
    SP(sp_pool_destroy(llama));
    SP(sp_pool_destroy(mistral));
    /* the documented channel: one stderr line per name at sp_runtime_destroy */
    unsetenv("SP_ALLOC_CONF_QUIET");
    char path[] = "/tmp/sp-names-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int rc = sp_runtime_destroy(rt);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    SP(rc);
    char text[1024] = "";
    lseek(fd, 0, SEEK_SET);
    ssize_t nread = read(fd, text, sizeof text - 1);
    close(fd);
    unlink(path);
    assert_true(nread > 0);
    assert_string_equal(text,
        "streampool: warning: the configuration sets keys for pool 'encoder', but no pool of that "
        "name was created (a typo?)\n"
        "streampool: warning: the configuration sets keys for pool 'lama', but no pool of that "
        "name was created (a typo?)\n"
        "streampool: warning: the configuration sets keys for pool 'ghost.v2', but no pool of that "
        "name was created (a typo?)\n");
    unsetenv("SP_ALLOC_CONF");
}

static void bad_device_has_its_own_status(void **state)
{
    (void)state;
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    sp_runtime *rt = NULL;
    assert_int_equal(sp_runtime_create(count, NULL, &rt), SP_ERR_NO_DEVICE);
    assert_null(rt);
    assert_int_equal(sp_last_cuda_error(), cudaErrorInvalidDevice);
    assert_string_equal(sp_status_name(SP_ERR_NO_DEVICE), "SP_ERR_NO_DEVICE");
    assert_string_equal(sp_strerror(SP_ERR_NO_DEVICE), "no CUDA device with that number");
    assert_int_equal(sp_runtime_create(-1, NULL, &rt), SP_ERR_NO_DEVICE);
    assert_int_equal(sp_last_cuda_error(), cudaErrorInvalidDevice);
    SP(sp_runtime_create(0, NULL, &rt)); /* succeeds: the old error is gone */
    assert_int_equal(sp_last_cuda_error(), 0);
    sp_pool *pool;
    SP(sp_runtime_default_pool(rt, &pool));
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    void *p;
    SP(sp_alloc(pool, &p, 4096, 0)); /* a call that succeeds clears it, the hot path too */
    assert_int_equal(sp_last_cuda_error(), 0);
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    SP(sp_free(pool, p, 0));
    assert_int_equal(sp_last_cuda_error(), 0);
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.allocs, 1);
    assert_int_equal(sp_last_cuda_error(), 0);
    SP(sp_runtime_destroy(rt));
}

/* A caller built against an older header passes a shorter sp_stats: sp_stats_json reads only
 * what its size covers, never the bytes past it (here poisoned), as sp_pool_stats fills only
 * that much. */
static void stats_json_reads_only_the_callers_struct(void **state)
{
    (void)state;
    sp_stats st;
    memset(&st, 0xab, sizeof st);
    st.size = offsetof(sp_stats, pool_reserved); /* byte figures only */
    SP(sp_pool_stats(fx.pool, &st));
    char json[4096];
    size_t n = sp_stats_json(&st, json, sizeof json);
    assert_int_equal(n, strlen(json));
    assert_string_equal(json, "{\"version\":5,"
                              "\"requested\":{\"current\":0,\"peak\":0,\"total\":0},"
                              "\"active\":{\"current\":0,\"peak\":0,\"total\":0},"
                              "\"cached\":{\"current\":0,\"peak\":0,\"total\":0},"
                              "\"held\":{\"current\":0,\"peak\":0,\"total\":0}}");
    memset(&st, 0xab, sizeof st);
    st.size = offsetof(sp_stats, inactive_split); /* version 1: no layout, no streams */
    SP(sp_pool_stats(fx.pool, &st));
    sp_stats_json(&st, json, sizeof json);
    assert_non_null(strstr(json, "\"give_back_failures\":0}"));
    assert_null(strstr(json, "inactive_split"));
    assert_null(strstr(json, "12370169555311111083")); /* 0xabab...: no byte past the size */
}

/* The summary of an older caller's shorter sp_stats reads nothing past its size: it is the
 * summary of the same figures with every later field 0. */
static void stats_summary_reads_only_the_callers_struct(void **state)
{
    (void)state;
    void *p;
    SP(sp_alloc(fx.pool, &p, 4096, NULL));
    sp_stats st, full;
    memset(&st, 0xab, sizeof st);
    st.size = offsetof(sp_stats, pool_reserved); /* byte figures only */
    SP(sp_pool_stats(fx.pool, &st));
    memset(&full, 0, sizeof full);
    memcpy(&full, &st, st.size);
    full.size = sizeof full;
    char got[4096], want[4096];
    size_t n = sp_stats_summary(&st, got, sizeof got);
    assert_int_equal(n, strlen(got));
    assert_int_equal(sp_stats_summary(&full, want, sizeof want), n);
    assert_string_equal(got, want);
    SP(sp_free(fx.pool, p, NULL));
}

/* The header's promise: every call clears sp_last_cuda_error on entry, so that an error a call
 * returns is never explained by an older call's CUDA error; the calls that never reach CUDA
 * too. */
static void calls_without_cuda_clear_the_last_cuda_error(void **state)
{
    (void)state;
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt));
    sp_pool *pool = NULL;
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    assert_int_equal(sp_pool_find(rt, "nope", &pool), SP_ERR_NOT_FOUND);
    assert_int_equal(sp_last_cuda_error(), 0);
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    SP(sp_runtime_default_pool(rt, &pool));
    assert_int_equal(sp_last_cuda_error(), 0);
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    assert_int_equal(sp_pool_adopt(rt, "adopted", NULL, NULL, &pool), SP_ERR_INVALID);
    assert_int_equal(sp_last_cuda_error(), 0);
    assert_int_equal(sp_runtime_create(count, NULL, &(sp_runtime *){NULL}), SP_ERR_NO_DEVICE);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    assert_int_equal(sp_config_apply(&cfg, NULL, "limit:lots", NULL, 0), SP_ERR_CONFIG);
    assert_int_equal(sp_last_cuda_error(), 0);
    SP(sp_runtime_destroy(rt));
}

/* A server with many tenants sets many pool-prefixed keys: a pool that existed and was then
 * destroyed (a tenant unloaded) is no typo, however far down the string its keys stand. */
static void many_pool_keys_are_all_remembered(void **state)
{
    (void)state;
    char conf[4096] = "";
    size_t used = 0;
    for (int i = 0; i < 70; i++)
        used += (size_t)snprintf(conf + used, sizeof conf - used, "%stenant%d.priority:%d",
                                 i ? "," : "", i, i);
    setenv("SP_ALLOC_CONF", conf, 1);
    setenv("SP_ALLOC_CONF_QUIET", "1", 1);
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt));
    unsetenv("SP_ALLOC_CONF");
    assert_int_equal(sp_runtime_check_config(rt, NULL, 0), 70);
    for (int i = 0; i < 70; i++) {
        char name[32];
        snprintf(name, sizeof name, "tenant%d", i);
        sp_pool *pool;
        SP(sp_pool_create(rt, name, NULL, &pool));
        sp_pool_config got = {.size = sizeof got};
        SP(sp_pool_get_config(pool, &got));
        assert_int_equal(got.priority, i);
        SP(sp_pool_destroy(pool));
    }
    char names[256] = "unchanged";
    assert_int_equal(sp_runtime_check_config(rt, names, sizeof names), 0);
    assert_string_equal(names, "");
    unsetenv("SP_ALLOC_CONF_QUIET");
    SP(sp_runtime_destroy(rt));
}

TEST_MAIN("tests",
    RESET(pool_names_must_be_printable_utf8),
    RESET(oom_report_json_escapes_every_byte),
    RESET(unknown_pool_names_in_config_are_reported),
    RESET(bad_device_has_its_own_status),
    FX(stats_json_reads_only_the_callers_struct),
    FX(stats_summary_reads_only_the_callers_struct),
    RESET(calls_without_cuda_clear_the_last_cuda_error),
    RESET(many_pool_keys_are_all_remembered)
)
