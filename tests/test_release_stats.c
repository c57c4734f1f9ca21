/* A stats read while sp_stream_release is under way: the released stream's counters are found
 * either in its cache or in the pool's figures, never in neither.
 * The release is held right after the first mutex it unlocks (an interposed
 * pthread_mutex_unlock: with the fix, the pool's lock once the cache is detached and its
 * figures moved; before it, the same lock when the cache had left the pool's list and its
 * figures had not moved yet). The test thread reads the stats meanwhile, then lets it go. */
#include <stdlib.h>

#include "support/sp_test_support.h"
#include "support/unlock_hold.h"


static void *release_held(void *p)
{
    thread_call *a = p;
    unlock_hold_arm(1);
    a->rc = sp_stream_release(a->rt, a->stream);
    unlock_hold_arm(0);
    return NULL;
}

static int teardown(void **state)
{
    (void)state;
    unlock_hold_let_go(); /* a failed assertion left the release held, with the runtime's lock */
    return destroy_tracked_runtimes() ? -1 : 0;
}

static void stats_during_release_count_every_pair(void **state)
{
    (void)state;
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    sp_runtime *rt = track_runtime(0, &cfg);
    sp_pool *pool;
    SP(sp_pool_create(rt, "released", NULL, &pool));
    cudaStream_t s = new_stream();
    void *p;
    for (int i = 0; i < 10; i++) { /* one miss, then nine hits on the stream's own bin */
        SP(sp_alloc(pool, &p, 256, s));
        SP(sp_free(pool, p, s));
    }
    sp_stats before = stats_of(pool);
    assert_int_equal(before.allocs, 10);
    assert_int_equal(before.same_stream_hits, 9);
    assert_int_equal(before.frees, 10);
    assert_int_equal(before.requested.total, 2560);
    assert_int_equal(before.streams, 1);
    assert_int_equal(before.released_streams, 0);

    thread_call a = {.rt = rt, .stream = s, .rc = -1};
    unlock_hold_reset();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_held, &a), 0);
    unlock_hold_wait();

    sp_stats during = stats_of(pool); /* the release is held inside sp_stream_release */
    assert_int_equal(during.allocs, 10);
    assert_int_equal(during.same_stream_hits, 9);
    assert_int_equal(during.frees, 10);
    assert_int_equal(during.requested.total, 2560);
    assert_int_equal(during.streams + during.released_streams, 1);

    unlock_hold_let_go();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(a.rc);
    sp_stats after = stats_of(pool);
    assert_int_equal(after.allocs, 10);
    assert_int_equal(after.frees, 10);
    assert_int_equal(after.streams, 0);
    assert_int_equal(after.released_streams, 1);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

TEST_MAIN("release_stats",
    cmocka_unit_test_teardown(stats_during_release_count_every_pair, teardown)
)
