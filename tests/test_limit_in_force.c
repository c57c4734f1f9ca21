/* Issue 27, item 4: the limit in force everywhere. A limit is held in whole driver pages and at
 * most the device's memory; sp_pool_get_config, the runtime summary, the OOM report and the
 * streampool_limit_bytes gauge all show that figure; a limit above the device is clamped alike
 * (with a warning) whether written in bytes, with a suffix, as a share or in code; a request
 * larger than the device in such a pool is SP_ERR_NEVER_FITS; fractional suffixes parse.
 * Emulator-only: the device's size is set with cudasimSetDeviceMemory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

#include "support/stderr_capture.h"

/* A 3 MiB limit holds 2 MiB: every report says 2 MiB. */
static void a_3_mib_limit_shows_2_mib_everywhere(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(1 * GiB);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 3 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "three", &cfg, &pool));
    assert_int_equal(limit_of(pool), 2 * MiB);
    cudaStream_t s = new_stream();
    void *a, *b;
    SP(sp_alloc(pool, &a, 2 * MiB, s));
    assert_int_equal(sp_alloc(pool, &b, 1 * MiB, s), SP_ERR_LIMIT);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(rt, &r));
    assert_int_equal(r.npools, 1);
    assert_string_equal(r.pools[0].name, "three");
    assert_int_equal(r.pools[0].limit, 2 * MiB);
    char *text;
    SP(sp_oom_report_json_alloc(&r, &text));
    contains(text, "\"limit\":2097152,");
    sp_text_free(text);
    SP(sp_runtime_summary_alloc(rt, &text));
    contains(text, "2.0 MiB\n"); /* the limit column, last on its row */
    assert_null(strstr(text, "3.0 MiB"));
    sp_text_free(text);
    SP(sp_runtime_metrics_prometheus_alloc(rt, &text));
    contains(text, "# TYPE streampool_limit_bytes gauge\n"
                   "streampool_limit_bytes{device=\"0\",pool=\"three\"} 2097152\n");
    sp_text_free(text);
    SP(sp_free(pool, a, s));
    drop_stream(rt, s);
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

/* 100G, 150% and a 1 TiB cfg.limit on a 1 GiB device are one case: each pool is held to the
 * device, says so on stderr, and a request larger than the device never fits. */
static void limits_above_the_device_are_clamped_alike(void **state)
{
    (void)state;
    unsetenv("SP_ALLOC_CONF_QUIET");
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.stats_flush_bytes = 0;
    rcfg.alloc_conf = "bytes.limit:100G,share.limit:150%,whole.limit:100%";
    CK(cudasimSetDeviceMemory(0, 1 * GiB));
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool_config code = SP_POOL_CONFIG_INIT;
    code.limit = 1024 * GiB;
    sp_pool *bytes, *share, *in_code, *whole;
    char out[4096];
    capture_begin();
    int rc1 = sp_pool_create(rt, "bytes", NULL, &bytes);
    int rc2 = sp_pool_create(rt, "share", NULL, &share);
    int rc3 = sp_pool_create(rt, "code", &code, &in_code);
    int rc4 = sp_pool_create(rt, "whole", NULL, &whole);
    capture_end(out, sizeof out);
    SP(rc1);
    SP(rc2);
    SP(rc3);
    SP(rc4);
    assert_int_equal(limit_of(bytes), 1 * GiB);
    assert_int_equal(limit_of(share), 1 * GiB);
    assert_int_equal(limit_of(in_code), 1 * GiB);
    assert_int_equal(limit_of(whole), 1 * GiB);
    contains(out, "streampool: warning: pool 'bytes': its limit of 100 GiB is more than device "
                  "0's memory; clamped to 1 GiB");
    contains(out, "pool 'share': its limit of 1536 MiB is more than device 0's memory");
    contains(out, "pool 'code': its limit of 1 TiB is more than device 0's memory");
    assert_null(strstr(out, "'whole'")); /* 100% is the device: nothing to say */
    cudaStream_t s = new_stream();
    void *p = (void *)0x9;
    assert_int_equal(sp_alloc(bytes, &p, 2 * GiB, s), SP_ERR_NEVER_FITS);
    assert_ptr_equal(p, (void *)0x9);
    sp_request req;
    sp_request_config rq = SP_REQUEST_CONFIG_INIT;
    rq.expected_bytes = 2 * GiB;
    assert_int_equal(sp_request_begin_with(share, s, &rq, &req), SP_ERR_NEVER_FITS);
    sp_oom_report r = {.size = sizeof r};
    SP(sp_runtime_last_oom(rt, &r));
    assert_int_equal(r.status, SP_ERR_NEVER_FITS);
    drop_stream(rt, s);
    destroy_runtime(rt);

    /* SP_ALLOC_CONF_QUIET=1 silences the warning; the clamp stays */
    setenv("SP_ALLOC_CONF_QUIET", "1", 1);
    rcfg.alloc_conf = "bytes.limit:100G";
    rt = track_runtime(0, &rcfg);
    capture_begin();
    SP(sp_pool_create(rt, "bytes", NULL, &bytes));
    capture_end(out, sizeof out);
    assert_string_equal(out, "");
    assert_int_equal(limit_of(bytes), 1 * GiB);
    unsetenv("SP_ALLOC_CONF_QUIET");
    destroy_runtime(rt);
}

static uint64_t applied_limit(const char *conf)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    char err[256] = "";
    if (sp_config_apply(&cfg, NULL, conf, err, sizeof err) != SP_OK)
        fail_msg("'%s' refused: %s", conf, err);
    return cfg.limit;
}

/* 0.5G and 1.5G parse as 12.5% does; a fraction of a byte does not. */
static void fractional_suffixes_are_accepted(void **state)
{
    (void)state;
    assert_int_equal(applied_limit("limit:0.5G"), 512 * MiB);
    assert_int_equal(applied_limit("limit:1.5G"), 1536 * MiB);
    assert_int_equal(applied_limit("limit:1.5 GiB"), 1536 * MiB);
    assert_int_equal(applied_limit("limit:0.25M"), 256 * KiB);
    assert_int_equal(applied_limit("limit:2.5T"), 2560 * GiB);
    assert_int_equal(applied_limit("limit:1.1K"), 1126); /* rounded down to bytes */
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    char err[256];
    const char *bad[] = {"limit:1.5", "limit:1.G", "limit:.5G", "limit:1.5.5G", "limit:1,5G"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (sp_config_apply(&cfg, NULL, bad[i], err, sizeof err) != SP_ERR_CONFIG)
            fail_msg("'%s' accepted", bad[i]);
    /* and in a pool: the limit in force is whole pages of the fraction */
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = "half.limit:0.5G,odd.limit:2.9M";
    CK(cudasimSetDeviceMemory(0, 1 * GiB));
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *half, *odd;
    SP(sp_pool_create(rt, "half", NULL, &half));
    SP(sp_pool_create(rt, "odd", NULL, &odd));
    assert_int_equal(limit_of(half), 512 * MiB);
    assert_int_equal(limit_of(odd), 2 * MiB);
    destroy_runtime(rt);
}

TEST_MAIN_WITHOUT_ALLOC_CONF("limit_in_force",
    TRACKED(a_3_mib_limit_shows_2_mib_everywhere),
    TRACKED(limits_above_the_device_are_clamped_alike),
    TRACKED(fractional_suffixes_are_accepted)
)
