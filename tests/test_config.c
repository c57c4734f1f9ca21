/* Pool configuration: SP_ALLOC_CONF and the same keys from code, every key and every malformed
 * form; run-time settings (release threshold within [reserve, limit], cache limit). Portable. */
#include <stdio.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

static sp_pool_config apply(const char *pool, const char *conf)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    char err[256] = "";
    int rc = sp_config_apply(&cfg, pool, conf, err, sizeof err);
    if (rc != SP_OK)
        fail_msg("'%s' rejected: %s", conf, err);
    return cfg;
}

static void every_key(void **state)
{
    (void)state;
    sp_pool_config c = apply(NULL, "release_threshold:4G,cache_limit:1G,limit:40G,reserve:8G,"
                                   "priority:-3,cross_stream:wait");
    assert_int_equal(c.release_threshold, 4 * GiB);
    assert_int_equal(c.cache_limit, 1 * GiB);
    assert_int_equal(c.limit, 40 * GiB);
    assert_int_equal(c.reserve, 8 * GiB);
    assert_int_equal(c.priority, -3);
    assert_int_equal(c.cross_stream, SP_CROSS_STREAM_WAIT);
    assert_int_equal(apply(NULL, "cross_stream:no_wait").cross_stream, SP_CROSS_STREAM_NO_WAIT);
    assert_int_equal(apply(NULL, "cross_stream:balanced").cross_stream, SP_CROSS_STREAM_BALANCED);
    assert_int_equal(apply(NULL, "release_threshold:max").release_threshold, UINT64_MAX);
    assert_int_equal(apply(NULL, "cache_limit:max").cache_limit, UINT64_MAX);
    assert_int_equal(apply(NULL, "limit:0").limit, 0);
    assert_int_equal(apply(NULL, "priority:7").priority, 7);
}

static void size_forms(void **state)
{
    (void)state;
    assert_int_equal(apply(NULL, "limit:512").limit, 512);
    assert_int_equal(apply(NULL, "limit:512B").limit, 512);
    assert_int_equal(apply(NULL, "limit:4K").limit, 4 * KiB);
    assert_int_equal(apply(NULL, "limit:4k").limit, 4 * KiB);
    assert_int_equal(apply(NULL, "limit:4KB").limit, 4 * KiB);
    assert_int_equal(apply(NULL, "limit:4KiB").limit, 4 * KiB);
    assert_int_equal(apply(NULL, "limit:3M").limit, 3 * MiB);
    assert_int_equal(apply(NULL, "limit:2G").limit, 2 * GiB);
    assert_int_equal(apply(NULL, "limit:1T").limit, 1024 * GiB);
    assert_int_equal(apply(NULL, " limit : 2G , priority : 1 ").limit, 2 * GiB); /* spaces */
    assert_int_equal(apply(NULL, "").limit, 0);
    assert_int_equal(apply(NULL, "limit:1G,").limit, 1 * GiB); /* a trailing comma */
}

static void per_pool_overrides_win(void **state)
{
    (void)state;
    const char *conf = "llama.limit:2G,limit:1G,mistral.v2.reserve:64M,priority:3";
    sp_pool_config llama = apply("llama", conf), other = apply("other", conf);
    sp_pool_config dotted = apply("mistral.v2", conf);
    assert_int_equal(llama.limit, 2 * GiB);   /* the pool's key wins wherever it stands */
    assert_int_equal(other.limit, 1 * GiB);
    assert_int_equal(llama.priority, 3);
    assert_int_equal(dotted.reserve, 64 * MiB); /* the last dot separates pool and key */
    assert_int_equal(dotted.limit, 1 * GiB);
    assert_int_equal(other.reserve, 0);
    assert_int_equal(apply(NULL, conf).limit, 1 * GiB);
}

static void rejected(const char *conf, const char *words)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.priority = 42;
    char err[256] = "";
    int rc = sp_config_apply(&cfg, "llama", conf, err, sizeof err);
    if (rc != SP_ERR_CONFIG)
        fail_msg("'%s' accepted", conf);
    if (!strstr(err, words))
        fail_msg("'%s': message '%s' does not name '%s'", conf, err, words);
    assert_string_equal(sp_config_error(), err);
    assert_int_equal(cfg.priority, 42); /* unchanged */
    assert_int_equal(cfg.limit, 0);
}

static void malformed_forms(void **state)
{
    (void)state;
    rejected("limit", "'limit' is not key:value");
    rejected("foo:1", "unknown key 'foo'");
    rejected("llama.foo:1", "unknown key 'foo'");
    rejected("other.foo:1", "unknown key 'foo'"); /* another pool's typo fails too */
    rejected("limit:abc", "bad value 'abc' for limit");
    rejected("limit:-1", "bad value '-1' for limit");
    rejected("limit:4X", "bad value '4X' for limit");
    rejected("limit:", "bad value '' for limit");
    rejected("limit:max", "bad value 'max' for limit");
    rejected("reserve:99999999999T", "bad value '99999999999T' for reserve");
    rejected("release_threshold:4Gx", "release_threshold");
    rejected("cache_limit:lots", "cache_limit");
    rejected("priority:x", "bad value 'x' for priority");
    rejected("priority:99999999999", "priority");
    rejected("cross_stream:sometimes", "bad value 'sometimes' for cross_stream");
    rejected("limit:1G,,priority:1", "empty setting");
    rejected(".limit:1G", "empty pool name");
    rejected("limit:1G,llama.reserve:2G",
             "reserve (2147483648 bytes) exceeds limit (1073741824 bytes)");
    rejected("priority:1,limit:1G,llama.limit:bad", "bad value 'bad' for limit");
    sp_pool_config small = {.size = 4};
    assert_int_equal(sp_config_apply(&small, NULL, "limit:1G", NULL, 0), SP_ERR_INVALID);
}

/* The environment and the runtime's alloc_conf reach the pools; a bad string stops the
 * runtime from starting, naming the key. */
static void environment_and_code_reach_pools(void **state)
{
    (void)state;
    setenv("SP_ALLOC_CONF", "priority:5,tenant.limit:256M,tenant.cache_limit:8M", 1);
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = "tenant.limit:128M,tenant.cross_stream:no_wait,release_threshold:64M";
    sp_runtime *rt;
    SP(sp_runtime_create(0, &rcfg, &rt));
    sp_pool *tenant, *def;
    sp_pool_config code = SP_POOL_CONFIG_INIT;
    code.limit = 32 * MiB;
    code.priority = 1;
    SP(sp_pool_create(rt, "tenant", &code, &tenant));
    sp_pool_config got = {.size = sizeof got};
    SP(sp_pool_get_config(tenant, &got));
    assert_int_equal(got.limit, 256 * MiB);          /* environment over code and alloc_conf */
    assert_int_equal(got.cache_limit, 8 * MiB);
    assert_int_equal(got.priority, 5);
    assert_int_equal(got.cross_stream, SP_CROSS_STREAM_NO_WAIT); /* alloc_conf over code */
    assert_int_equal(got.release_threshold, 64 * MiB);
    SP(sp_runtime_default_pool(rt, &def));
    SP(sp_pool_get_config(def, &got));
    assert_int_equal(got.limit, 0);
    assert_int_equal(got.priority, 5);
    SP(sp_runtime_destroy(rt));

    setenv("SP_ALLOC_CONF", "limit:1G,chache_limit:1G", 1);
    sp_runtime *bad = NULL;
    assert_int_equal(sp_runtime_create(0, NULL, &bad), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "unknown key 'chache_limit'"));
    assert_null(bad);
    unsetenv("SP_ALLOC_CONF");
    rcfg.alloc_conf = "reserve:1G,limit:1M";
    assert_int_equal(sp_runtime_create(0, &rcfg, &bad), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "exceeds limit"));
}

static uint64_t threshold_of(sp_pool *pool)
{
    uint64_t v = 0;
    CK(cudaMemPoolGetAttribute(sp_pool_cuda_pool(pool), cudaMemPoolAttrReleaseThreshold, &v));
    return v;
}

static void release_threshold_stays_within_reserve_and_limit(void **state)
{
    (void)state;
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt));
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.reserve = 16 * MiB;
    cfg.limit = 64 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "bounded", &cfg, &pool));
    assert_int_equal(threshold_of(pool), 64 * MiB); /* UINT64_MAX, held to the limit */
    SP(sp_pool_set_release_threshold(pool, 0));
    assert_int_equal(threshold_of(pool), 16 * MiB); /* never below the reservation */
    SP(sp_pool_set_release_threshold(pool, 32 * MiB));
    assert_int_equal(threshold_of(pool), 32 * MiB);
    sp_stats st = {.size = sizeof st};
    SP(sp_pool_stats(pool, &st));
    assert_true(st.pool_reserved >= 16 * MiB); /* the reservation is held */
    SP(sp_pool_trim(pool, 0));
    SP(sp_pool_stats(pool, &st));
    assert_true(st.pool_reserved >= 16 * MiB); /* and trim keeps it */
    cfg.reserve = 128 * MiB;
    sp_pool *bad = NULL;
    assert_int_equal(sp_pool_create(rt, "bad", &cfg, &bad), SP_ERR_CONFIG);
    assert_null(bad);
    assert_int_equal(sp_pool_set_release_threshold(NULL, 0), SP_ERR_INVALID);
    SP(sp_runtime_destroy(rt));
}

static void cache_limit_gives_blocks_back(void **state)
{
    (void)state;
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.stats_flush_bytes = 0;
    sp_runtime *rt;
    SP(sp_runtime_create(0, &rcfg, &rt));
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cache_limit = 2 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "capped", &cfg, &pool));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p[4];
    for (int i = 0; i < 4; i++)
        SP(sp_alloc(pool, &p[i], MiB, s));
    for (int i = 0; i < 4; i++)
        SP(sp_free(pool, p[i], s));
    sp_stats st = {.size = sizeof st};
    SP(sp_pool_stats(pool, &st));
    /* the four 1 MiB blocks share two 2 MiB slabs: the third free passes the cap and gives
     * back the first slab, whose blocks are both free */
    assert_int_equal(st.cached.current, 2 * MiB);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.cache_released_bytes, 2 * MiB);
    assert_int_equal(st.cache_limit_releases, 1);
    assert_int_equal(st.reclaimed_bytes, 0); /* no other pool asked */
    assert_int_equal(st.trims, 0);           /* nor sp_pool_trim */
    SP(sp_pool_set_cache_limit(pool, 0));
    SP(sp_pool_stats(pool, &st));
    assert_int_equal(st.cached.current, 0);
    SP(sp_pool_set_cache_limit(pool, UINT64_MAX));
    SP(sp_alloc(pool, &p[0], MiB, s));
    SP(sp_free(pool, p[0], s));
    SP(sp_pool_stats(pool, &st));
    assert_int_equal(st.cached.current, 2 * MiB); /* no cap any more: the block and its slab */
    SP(sp_stream_release(rt, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    SP(sp_runtime_destroy(rt));
}

/* Issue 29: a mebibyte of distinct pool keys (a fleet with tens of thousands of tenants) applies,
 * each pool gets its own value wherever its key stands, and a key set twice at the two ends of
 * the string is still found. Parsing is linear (bench/conf_parse.c measures it); this checks
 * what it gives, not how fast. */
static void a_mebibyte_of_pool_keys_applies(void **state)
{
    (void)state;
    size_t cap = 1 << 20, used = 0, n = 0;
    char *conf = malloc(cap + 64);
    assert_non_null(conf);
    while (used + 40 < cap) {
        used += (size_t)snprintf(conf + used, cap + 64 - used, "%st%06zu.priority:%zu",
                                 n ? "," : "", n, n % 1000);
        n++;
    }
    setenv("SP_ALLOC_CONF", conf, 1);
    setenv("SP_ALLOC_CONF_QUIET", "1", 1);
    sp_runtime *rt;
    SP(sp_runtime_create(0, NULL, &rt));
    assert_int_equal(sp_runtime_check_config(rt, NULL, 0), (int)n);
    size_t pick[] = {0, 1, n / 2, n - 2, n - 1};
    for (size_t i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%06zu", pick[i]);
        sp_pool *pool;
        SP(sp_pool_create(rt, name, NULL, &pool));
        sp_pool_config got = {.size = sizeof got};
        SP(sp_pool_get_config(pool, &got));
        assert_int_equal(got.priority, (int)(pick[i] % 1000));
        SP(sp_pool_destroy(pool));
    }
    assert_int_equal(sp_runtime_check_config(rt, NULL, 0), (int)n - 5);
    SP(sp_runtime_destroy(rt));
    /* the first pool's key again at the very end: refused, naming it */
    snprintf(conf + used, cap + 64 - used, ",t000000.priority:3");
    setenv("SP_ALLOC_CONF", conf, 1);
    sp_runtime *bad = NULL;
    assert_int_equal(sp_runtime_create(0, NULL, &bad), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "'t000000.priority' is set twice"));
    unsetenv("SP_ALLOC_CONF");
    unsetenv("SP_ALLOC_CONF_QUIET");
    free(conf);
}

TEST_MAIN_WITHOUT_ALLOC_CONF("config",
    RESET(every_key),
    RESET(size_forms),
    RESET(per_pool_overrides_win),
    RESET(malformed_forms),
    RESET(environment_and_code_reach_pools),
    RESET(release_threshold_stays_within_reserve_and_limit),
    RESET(cache_limit_gives_blocks_back),
    RESET(a_mebibyte_of_pool_keys_applies)
)
