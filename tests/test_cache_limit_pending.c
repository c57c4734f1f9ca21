/* The cache limit holds with work pending (issue 20, item 4): a free that leaves the pool over
 * its cache limit gives the memory back at once with cudaFreeAsync on the freeing stream,
 * whose own order puts it after the block's work, even while that work is still queued (held
 * by a host-function gate here). cudasim only: a device of known size. */
#include <stdlib.h>

#include "support/fixtures.h"

static const uint64_t MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

/* With cache_limit 0, blocks freed on a stream held by a gate (a huge one, small ones filling
 * a slab, a medium one in its own segment) leave the pool holding only what is live, before the
 * gate opens; the live block's data survives the frees, and once the stream gets past them
 * their memory serves another stream. */
static void free_over_the_cache_limit_goes_back_behind_pending_work(void **state)
{
    (void)state;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cache_limit = 0;
    sp_pool *pool;
    SP(sp_pool_create(fx.rt, "strict", &cfg, &pool));
    void *live, *huge, *medium, *small[4];
    SP(sp_alloc(pool, &live, 4 * MiB, fx.a));
    CK(cudaMemsetAsync(live, 0x5a, 4 * MiB, fx.a));
    CK(cudaStreamSynchronize(fx.a));
    uint64_t held_live = stats_of(pool).held.current;
    assert_int_equal(held_live, 4 * MiB);

    gate *g = gate_new();
    gate_hold(g, fx.a); /* everything after this on s waits for the test thread */
    SP(sp_alloc(pool, &huge, 600 * MiB, fx.a));
    SP(sp_alloc(pool, &medium, 6 * MiB, fx.a));
    for (int i = 0; i < 4; i++)
        SP(sp_alloc(pool, &small[i], 512 * 1024, fx.a));
    CK(cudaMemsetAsync(huge, 0x11, 600 * MiB, fx.a));
    CK(cudaMemsetAsync(medium, 0x22, 6 * MiB, fx.a));
    for (int i = 0; i < 4; i++)
        CK(cudaMemsetAsync(small[i], 0x33, 512 * 1024, fx.a));

    SP(sp_free(pool, huge, fx.a));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.active.current, 4 * MiB + 6 * MiB + 4 * 512 * 1024);
    assert_int_equal(st.held.current, held_live + 6 * MiB + 2 * MiB); /* the 600 MiB went */
    /* the small blocks' slab stays until the last of them is freed, and a pass that found it
     * partly live is tried again once the cache grew by a slab: at the medium block's free */
    for (int i = 0; i < 4; i++)
        SP(sp_free(pool, small[i], fx.a));
    SP(sp_free(pool, medium, fx.a));
    st = stats_of(pool);
    assert_int_equal(st.active.current, 4 * MiB);
    assert_int_equal(st.held.current, 4 * MiB); /* what is live, with the gate still closed */
    assert_int_equal(st.cached.current, 0);
    assert_true(st.driver_frees >= 3);

    gate_open(g);
    CK(cudaStreamSynchronize(fx.a));
    assert_true(device_bytes_are(live, 4 * MiB, 0x5a, fx.a));
    /* the memory went back to the driver in s's order: another stream gets it */
    void *again;
    SP(sp_alloc(pool, &again, 600 * MiB, fx.b));
    CK(cudaMemsetAsync(again, 0x44, 600 * MiB, fx.b));
    assert_true(device_bytes_are(again, 1 * MiB, 0x44, fx.b));
    SP(sp_free(pool, again, fx.b));
    SP(sp_free(pool, live, fx.a));
    st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.ooms, 0);
    SP(sp_pool_destroy(pool));
}

TEST_MAIN("tests",
    FX_DEVICE(free_over_the_cache_limit_goes_back_behind_pending_work, 1 * GiB)
)
