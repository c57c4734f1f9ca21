/* Issue 27 item 2: a reservation holds under a flood of random sizes. Two pools, one with
 * priority 5, flood a 512 MiB device with random 1-16 MiB blocks (seeded) from two threads while
 * a pool with a 128 MiB reservation cycles 16 x 8 MiB: every one of its blocks is granted, in
 * every run. The figures are printed as TAP comments ("# ..."). cudasim only. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "support/sp_test_support.h"
#include "support/flooder.h"

static const uint64_t MiB = 1024 * 1024;

enum { LOOPS = 4000, BLOCKS = 16, FLOODERS = 2, FLOOD_LIVE = 40, FLOOD_STEP = 0, RUNS = 3 };

/* One run: the reserved pool's loops under the flood, with the flood's seeds from `seed`. */
static void one_run(unsigned seed)
{
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.reserve = 128 * MiB;
    sp_pool *reserved, *noisy[FLOODERS];
    SP(sp_pool_create(rt, "reserved", &cfg, &reserved));
    sp_pool_config high = SP_POOL_CONFIG_INIT;
    high.priority = 5;
    SP(sp_pool_create(rt, "noisy-a", &high, &noisy[0]));
    SP(sp_pool_create(rt, "noisy-b", NULL, &noisy[1]));
    atomic_bool done = false;
    atomic_uint_least64_t ops = 0, flood_refused = 0;
    flooder f[FLOODERS];
    pthread_t th[FLOODERS];
    for (int i = 0; i < FLOODERS; i++) {
        f[i] = (flooder){.rt = rt, .pool = noisy[i], .done = &done, .ops = &ops,
                            .refused = &flood_refused, .unit = 1, .count = 16 * MiB, .live = FLOOD_LIVE,
                            .seed = seed * 31u + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, flood, &f[i]), 0);
    }
    cudaStream_t s = new_stream();
    uint64_t refused = 0, granted = 0;
    int other = SP_OK;
    /* the device full before the reserved pool starts: the flood has been refused once (a
     * condition, not a duration; its loops do not wait on the flood after that) */
    while (atomic_load(&flood_refused) == 0)
        sched_yield();
    for (int loop = 0; loop < LOOPS; loop++) {
        /* each loop runs while the flood makes FLOOD_STEP more requests: not a timing, a count */
        while (atomic_load(&ops) < (uint64_t)loop * FLOOD_STEP)
            sched_yield();
        void *blk[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
            int rc = sp_alloc(reserved, &blk[i], 8 * MiB, s);
            if (rc == SP_OK)
                granted++;
            else if (rc == SP_ERR_OUT_OF_MEMORY)
                refused++;
            else if (other == SP_OK)
                other = rc;
            if (rc != SP_OK && refused + (other != SP_OK) == 1)
                print_message("# run %u, loop %d, block %d: %s\n", seed, loop, i,
                              sp_status_name(rc));
            if (rc != SP_OK)
                blk[i] = NULL;
        }
        for (int i = 0; i < BLOCKS; i++)
            if (blk[i])
                SP(sp_free(reserved, blk[i], s));
    }
    atomic_store(&done, true);
    uint64_t flood_allocs = 0, flood_refusals = 0;
    for (int i = 0; i < FLOODERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(f[i].errors, 0);
        flood_allocs += f[i].allocs;
        flood_refusals += f[i].refusals;
    }
    print_message("# run %u: reservation 128 MiB under %d flooding pools (one priority 5) on a "
                  "512 MiB device: %d loops x %d blocks of 8 MiB, %llu granted, %llu refused; the "
                  "flood (1 B-16 MiB): %llu allocations, %llu refused\n",
                  seed, FLOODERS, LOOPS, BLOCKS, (unsigned long long)granted,
                  (unsigned long long)refused, (unsigned long long)flood_allocs,
                  (unsigned long long)flood_refusals);
    sp_stats rs = stats_of(reserved);
    assert_int_equal(rs.ooms, 0);
    assert_int_equal(rs.reclaims, 0); /* never reclaimed from while within its reservation */
    assert_true(rs.held.peak <= 128 * MiB);
    assert_int_equal(other, SP_OK);
    assert_int_equal(refused, 0);
    assert_int_equal(granted, (uint64_t)LOOPS * BLOCKS);
    assert_true(flood_refusals > 0); /* the device was full: the flood was refused, not it */
    drop_stream(rt, s);
    destroy_runtime(rt);
}

static void reservation_holds_under_random_floods(void **state)
{
    (void)state;
    for (unsigned run = 1; run <= RUNS; run++)
        one_run(run);
}

TEST_MAIN("tests",
    TRACKED(reservation_holds_under_random_floods)
)
