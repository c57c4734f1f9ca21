/* A reservation holds (issue 20, item 2): whatever other pools do, a pool gets every request
 * that fits inside its reservation; the others are reclaimed from or refused first, never it.
 * The figures are printed as TAP comments ("# ..."). cudasim only: a device of known size. */
#include "support/sp_test_support.h"
#include "support/flooder.h"

enum { LOOPS = 150, FLOOD_LIVE = 12, FLOOD_STEP = 16 };

/* The reproduction: a pool reserving 128 MiB allocates 16 blocks of exactly 8 MiB and
 * frees them, in a loop on one stream, while two other pools flood a 512 MiB device (the issue
 * saw 22-32 blocks refused over 4 s). Every one of its blocks must succeed, the flood being
 * refused instead; the pool is never reclaimed from and never holds past its reservation. Its
 * reservation is pages of its own cudaMemPool that no trim releases (floored at the reserve),
 * which no other pool can take. */
static void reservation_holds_under_a_flood(void **state)
{
    (void)state;
    reservation_figures r = reservation_under_flood(&(reservation_case){
        .loops = LOOPS, .step = FLOOD_STEP, .live = FLOOD_LIVE, .unit = (size_t)1 << 20,
        .count = 64, .seed0 = 17, .run = 1});
    print_message("# reservation 128 MiB under %d flooding pools on a 512 MiB device: %d loops x "
                  "%d blocks of 8 MiB, %llu granted, %llu refused; the flood: %llu allocations, "
                  "%llu refused\n",
                  RESERVED_FLOODERS, LOOPS, RESERVED_BLOCKS, (unsigned long long)r.granted,
                  (unsigned long long)r.refused, (unsigned long long)r.flood_allocs,
                  (unsigned long long)r.flood_refusals);
    reservation_held(&r, LOOPS);
}

TEST_MAIN("tests",
    TRACKED(reservation_holds_under_a_flood)
)
