/* A reservation holds (issue 20, item 2): whatever other pools do, a pool gets every request
 * that fits inside its reservation; the others are reclaimed from or refused first, never it.
 * The figures are printed as TAP comments ("# ..."). cudasim only: a device of known size. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "support/sp_test_support.h"
#include "support/flooder.h"

static const uint64_t MiB = 1024 * 1024;

enum { LOOPS = 150, BLOCKS = 16, FLOODERS = 2, FLOOD_LIVE = 12, FLOOD_STEP = 16 };

/* The reproduction: a pool reserving 128 MiB allocates 16 blocks of exactly 8 MiB and
 * frees them, in a loop on one stream, while two other pools flood a 512 MiB device (the issue
 * saw 22-32 blocks refused over 4 s). Every one of its blocks must succeed, the flood being
 * refused instead; the pool is never reclaimed from and never holds past its reservation. Its
 * reservation is pages of its own cudaMemPool that no trim releases (floored at the reserve),
 * which no other pool can take. */
static void reservation_holds_under_a_flood(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.reserve = 128 * MiB;
    sp_pool *reserved, *noisy[FLOODERS];
    SP(sp_pool_create(rt, "reserved", &cfg, &reserved));
    SP(sp_pool_create(rt, "noisy-a", NULL, &noisy[0]));
    SP(sp_pool_create(rt, "noisy-b", NULL, &noisy[1]));
    atomic_bool done = false;
    atomic_uint_least64_t ops = 0;
    flooder f[FLOODERS];
    pthread_t th[FLOODERS];
    for (int i = 0; i < FLOODERS; i++) {
        f[i] = (flooder){.rt = rt, .pool = noisy[i], .done = &done, .ops = &ops,
                            .unit = MiB, .count = 64, .live = FLOOD_LIVE,
                            .seed = 17u + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, flood, &f[i]), 0);
    }
    cudaStream_t s = new_stream();
    uint64_t refused = 0, granted = 0;
    int other = SP_OK;
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
    print_message("# reservation 128 MiB under %d flooding pools on a 512 MiB device: %d loops x "
                  "%d blocks of 8 MiB, %llu granted, %llu refused; the flood: %llu allocations, "
                  "%llu refused\n",
                  FLOODERS, LOOPS, BLOCKS, (unsigned long long)granted,
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

TEST_MAIN("tests",
    TRACKED(reservation_holds_under_a_flood)
)
