/* sp_stats_summary, sp_pool_summary and sp_runtime_summary: the exact text for a known
 * workload. Emulator-only: the driver's reserved figure is cudasim's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const size_t KiB = 1024, MiB = 1024 * 1024;

static void summaries_show_the_stats(void **state)
{
    (void)state;
    sp_runtime *rt;
    sp_pool *def, *llama;
    SP(sp_runtime_create(0, NULL, &rt));
    SP(sp_runtime_default_pool(rt, &def));
    llama = pool_of(rt, "llama \xe6\xa8\xa1\xe5\x9e\x8b", 64 * MiB, 0, UINT64_MAX);
    cudaStream_t s = new_stream();
    void *p[4];
    SP(sp_alloc(llama, &p[0], 3 * MiB, s));
    SP(sp_alloc(llama, &p[1], 1000, s));
    SP(sp_free(llama, p[1], s));
    SP(sp_alloc(llama, &p[1], 900, s)); /* a same-stream hit */
    SP(sp_alloc(def, &p[2], 100 * KiB, s));
    assert_int_equal(sp_alloc(llama, &p[3], 65 * MiB, s), SP_ERR_NEVER_FITS);
    CK(cudaStreamSynchronize(s));
    SP(sp_stream_set_name(rt, s, "decode"));

    char buf[8192];
    size_t needed = 0;
    SP(sp_pool_summary(llama, buf, sizeof buf, &needed));
    assert_int_equal(needed, strlen(buf));

    /* one row per stream: the 1000-byte block came back to the same stream (a hit); the rest of
     * the fresh slab is still tagged with the stream that allocated it: its cached bytes */
    char streams[512], expect[8192];
    snprintf(streams, sizeof streams,
             "%s%-18p%s", "stream             label             requested     active     cached   allocs     hits    taken    given\n", (void *)s,
             " decode              3.0 MiB    3.0 MiB    3.0 MiB        3        1        0        0\n");
    snprintf(expect, sizeof expect,
        "streampool pool \"llama \xe6\xa8\xa1\xe5\x9e\x8b\" on device 0\n"
        "bytes           current         peak        total\n"
        "requested       3.0 MiB      3.0 MiB      3.0 MiB\n"
        "active          3.0 MiB      3.0 MiB      3.0 MiB\n"
        "cached          3.0 MiB      3.0 MiB      1.0 KiB\n" /* free in the slab and segment */
        "held            6.0 MiB      6.0 MiB      6.0 MiB\n" /* a 2 MiB slab, a 4 MiB segment */
        "driver: 6.0 MiB reserved, 6.0 MiB used by 1 pool\n"   /* in 2 MiB pages */
        "reservation: 0 B, 0 B of it idle (reserved, not held)\n"
        "allocations: 3, 33.3%% from a cache (33.3%% same stream), 2 from the driver\n"
        "layout: 1 slab (2.0 MiB), 1 segment (4.0 MiB), 3.0 MiB free inside them, largest free "
        "range 2.0 MiB\n"
        "counters:\n"
        "  allocs                          3  successful sp_alloc calls (size > 0)\n"
        "  frees                           1  successful sp_free calls (ptr != NULL)\n"
        "  same_stream_hits                1  allocations served from the stream's own cache\n"
        "  cross_stream_reuses             0  blocks taken from another stream behind a completed fence\n"
        "  cross_stream_waits              0  blocks taken from another stream by waiting on a pending fence\n"
        "  fences_recorded                 0  fence events recorded\n"
        "  driver_allocs                   2  cudaMallocFromPoolAsync calls that succeeded\n"
        "  driver_frees                    0  cudaFreeAsync calls for cached or bypassed blocks\n"
        "  bad_frees                       0  frees rejected: unknown pointer, double free or wrong pool\n"
        "  capture_bypasses                0  allocations passed straight to the driver during graph capture\n"
        "  oom_retries                     0  driver allocations retried after the driver ran out of memory\n"
        "  ooms                            0  allocations that failed with SP_ERR_OUT_OF_MEMORY\n"
        "  limit_rejections                1  allocations that failed with SP_ERR_LIMIT or SP_ERR_NEVER_FITS\n"
        "  reclaims                        0  times this pool gave cached memory back for another pool's out-of-memory\n"
        "  reclaimed_bytes                 0  bytes this pool gave back for another pool's out-of-memory\n"
        "  trims                           0  sp_pool_trim calls (sp_runtime_trim: one per pool)\n"
        "  skipped_steps                   0  best-effort steps skipped after a CUDA error (probe, fence, give-back)\n"
        "  give_back_failures              0  segments the driver refused to take back (kept, counted as held)\n"
        "  limit_retries                   0  driver allocations retried after the pool's limit refused them\n"
        "  trimmed_bytes                   0  bytes sp_pool_trim gave back to the device\n"
        "  cache_limit_releases            0  times freed memory over the cache limit went back to the driver\n"
        "  cache_released_bytes            0  bytes given back over the cache limit\n"
        "  admissions                      0  requests admitted with an expected footprint (sp_request_begin_with)\n"
        "  admitted_bytes                  0  bytes claimed under the limit by admitted requests\n"
        "  admission_refusals              0  requests refused at their begin: SP_ERR_LIMIT or SP_ERR_NEVER_FITS\n"
        "%s", streams);
    assert_string_equal(buf, expect);
    assert_int_equal(sp_pool_summary(llama, buf, 20, &needed), SP_OK); /* truncated */
    assert_int_equal(strlen(buf), 19);
    assert_true(needed > 1000);

    SP(sp_runtime_summary(rt, buf, sizeof buf, &needed));
    assert_int_equal(needed, strlen(buf));

    const char *table = strstr(buf, "pool                      requested");
    assert_non_null(table);
    assert_string_equal(table,
        "pool                      requested     active     cached       held   reserved      limit\n"
        "default                   100.0 KiB  100.0 KiB    1.9 MiB    2.0 MiB    2.0 MiB       none\n"
        "llama \xe6\xa8\xa1\xe5\x9e\x8b" "                    3.0 MiB    3.0 MiB    3.0 MiB    6.0 MiB    6.0 MiB   64.0 MiB\n");
    assert_non_null(strstr(buf, "streampool runtime on device 0\n"
                                "bytes           current         peak        total\n"
                                "requested       3.1 MiB      3.1 MiB      3.1 MiB\n"));
    assert_non_null(strstr(buf, "driver: 8.0 MiB reserved, 8.0 MiB used by 2 pools\n"));

    sp_stats empty;
    memset(&empty, 0, sizeof empty);
    size_t n = sp_stats_summary(&empty, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    assert_non_null(strstr(buf, "allocations: 0, 0.0% from a cache (0.0% same stream), 0 from the driver\n"));
    assert_int_equal(sp_stats_summary(NULL, buf, sizeof buf), 0);
    assert_int_equal(sp_runtime_summary(NULL, buf, sizeof buf, &needed), SP_ERR_INVALID);

    SP(sp_free(llama, p[0], s));
    SP(sp_free(llama, p[1], s));
    SP(sp_free(def, p[2], s));
    drop_stream(rt, s);
    SP(sp_pool_destroy(llama));
    SP(sp_runtime_destroy(rt));
}

TEST_MAIN("tests",
    RESET(summaries_show_the_stats)
)
