/* Issue 27 item 2: a reservation holds under a flood of random sizes. Two pools, one with
 * priority 5, flood a 512 MiB device with random 1-16 MiB blocks (seeded) from two threads while
 * a pool with a 128 MiB reservation cycles 16 x 8 MiB: every one of its blocks is granted, in
 * every run. The figures are printed as TAP comments ("# ..."). cudasim only. */
#include "support/sp_test_support.h"
#include "support/flooder.h"

enum { LOOPS = 4000, FLOOD_LIVE = 40, FLOOD_STEP = 0, RUNS = 3 };

/* One run: the reserved pool's loops under the flood, with the flood's seeds from `seed`; its
 * loops start once the flood has been refused (the device full). */
static void one_run(unsigned seed)
{
    reservation_figures r = reservation_under_flood(&(reservation_case){
        .loops = LOOPS, .step = FLOOD_STEP, .live = FLOOD_LIVE, .noisy_priority = 5,
        .wait_full = true, .unit = 1, .count = (size_t)16 << 20, .seed0 = seed * 31u,
        .run = seed});
    print_message("# run %u: reservation 128 MiB under %d flooding pools (one priority 5) on a "
                  "512 MiB device: %d loops x %d blocks of 8 MiB, %llu granted, %llu refused; the "
                  "flood (1 B-16 MiB): %llu allocations, %llu refused\n",
                  seed, RESERVED_FLOODERS, LOOPS, RESERVED_BLOCKS, (unsigned long long)r.granted,
                  (unsigned long long)r.refused, (unsigned long long)r.flood_allocs,
                  (unsigned long long)r.flood_refusals);
    reservation_held(&r, LOOPS);
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
