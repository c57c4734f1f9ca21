/* Issue 27, item 5: footprints a server can compute. sp_pool_footprint says what a list of
 * allocation sizes may take from a pool's limit; a request admitted with that figure as its
 * expected_bytes never fails on the limit for those allocations, even when another stream fills
 * every byte of the pool's room the moment the request is admitted. With the plain sum of the
 * sizes (what issue 27 found 26-28 failures with), the same workload fails. Emulator-only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

/* The rounding the pool applies, size by size. */
static void footprint_rounds_as_the_pool_does(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool = pool_of(rt, "tenant", 64 * MiB + 12345, 0, UINT64_MAX);
    uint64_t f = 7;
    size_t one[] = {1};
    SP(sp_pool_footprint(pool, one, 1, &f));
    assert_int_equal(f, 2 * MiB); /* a small request takes a whole slab when fresh */
    size_t sizes[] = {0, 256, 1 * MiB, 1 * MiB + 1, 2 * MiB, 3 * MiB, 9 * MiB + 7};
    SP(sp_pool_footprint(pool, sizes, 7, &f));
    assert_int_equal(f, 0 + 2 * MiB + 2 * MiB + 2 * MiB + 2 * MiB + 4 * MiB + 10 * MiB);
    SP(sp_pool_footprint(pool, NULL, 0, &f));
    assert_int_equal(f, 0);
    size_t too_big[] = {4 * MiB, 64 * MiB + 1}; /* over the 64 MiB in force */
    f = 7;
    assert_int_equal(sp_pool_footprint(pool, too_big, 2, &f), SP_ERR_NEVER_FITS);
    assert_int_equal(f, 7);
    size_t huge[] = {SP_MAX_ALLOC + 1};
    assert_int_equal(sp_pool_footprint(pool, huge, 1, &f), SP_ERR_TOO_LARGE);
    assert_int_equal(sp_pool_footprint(NULL, sizes, 1, &f), SP_ERR_INVALID);
    assert_int_equal(sp_pool_footprint(pool, NULL, 1, &f), SP_ERR_INVALID);
    assert_int_equal(sp_pool_footprint(pool, sizes, 1, NULL), SP_ERR_INVALID);
    destroy_runtime(rt);
}

/* One request: admitted for `expected`, then a filler on another stream takes every 2 MiB of
 * room the limit has left, then the request allocates `sizes`. Returns how many of them failed
 * (SP_ERR_LIMIT; any other error fails the test). */
static int run_request(sp_runtime *rt, sp_pool *pool, cudaStream_t s, cudaStream_t other,
                       const size_t *sizes, int n, uint64_t expected)
{
    SP(sp_pool_trim(pool, 0)); /* nothing cached: every allocation is fresh */
    sp_request req;
    sp_request_config rq = SP_REQUEST_CONFIG_INIT;
    rq.expected_bytes = expected;
    SP(sp_request_begin_with(pool, s, &rq, &req));
    void *fill[64];
    int nfill = 0, rc;
    while (nfill < 64 && (rc = sp_alloc(pool, &fill[nfill], 2 * MiB, other)) == SP_OK)
        nfill++;
    assert_int_equal(rc, SP_ERR_LIMIT); /* the pool is full but for the claim */
    int failures = 0;
    for (int i = 0; i < n; i++) {
        void *p;
        rc = sp_request_alloc(pool, req, &p, sizes[i]);
        if (rc == SP_ERR_LIMIT)
            failures++;
        else
            SP(rc);
    }
    SP(sp_request_end(pool, req, 0, NULL));
    for (int i = 0; i < nfill; i++)
        SP(sp_free(pool, fill[i], other));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamSynchronize(other));
    (void)rt;
    return failures;
}

/* Issue 27's case: buffers of a decoder step's mix of sizes, declared as their sum, fail on the
 * limit; declared with sp_pool_footprint, none does, over 200 seeded requests. */
static void footprint_admitted_requests_never_fail(void **state)
{
    (void)state;
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.stats_flush_bytes = 0;
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *pool = pool_of(rt, "embed", 96 * MiB, 0, UINT64_MAX);
    cudaStream_t s = new_stream(), other = new_stream();
    const size_t mix[] = {4 * KiB, 96 * KiB, 700 * KiB, 1 * MiB, 1536 * KiB, 3 * MiB + 100,
                          5 * MiB, 8 * MiB + 512};
    unsigned seed = 27;
    int fail_sum = 0, fail_footprint = 0, requests = 200, allocations = 0;
    for (int r = 0; r < requests; r++) {
        size_t sizes[8];
        int n = 1 + (int)(rand_r(&seed) % 8);
        uint64_t sum = 0, footprint = 0;
        for (int i = 0; i < n; i++) {
            sizes[i] = mix[rand_r(&seed) % 8];
            sum += sizes[i];
        }
        allocations += n;
        SP(sp_pool_footprint(pool, sizes, (size_t)n, &footprint));
        assert_true(footprint >= sum);
        fail_sum += run_request(rt, pool, s, other, sizes, n, sum);
        fail_footprint += run_request(rt, pool, s, other, sizes, n, footprint);
    }
    print_message("# %d requests, %d allocations each way: %d failed declared as the sum of "
                  "their sizes, %d declared with sp_pool_footprint\n",
                  requests, allocations, fail_sum, fail_footprint);
    assert_int_equal(fail_footprint, 0);
    assert_true(fail_sum > 0); /* the workload does tell the two apart */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.active.current, 0);
    drop_streams_and_runtime(rt, s, other);
}

TEST_MAIN("footprint",
    TRACKED(footprint_rounds_as_the_pool_does),
    TRACKED(footprint_admitted_requests_never_fail)
)
