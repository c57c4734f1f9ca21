/* A stats read while an allocation takes a fresh slab or segment from the driver: the driver's
 * bytes become held and the request's block live in one step, as every read sees them, so no
 * read shows the whole new slab or segment as cached and no later read shows a lower cached
 * peak. The allocating thread is held right after the first mutex it unlocks once the driver
 * granted the allocation (an interposed cudaMallocFromPoolAsync arms an interposed
 * pthread_mutex_unlock): the lock of the heap (slabs or segments) that got the fresh range and
 * gave the block. The test thread reads the pool's and the runtime's stats meanwhile. */
#include <stdlib.h>

#include "support/sp_test_support.h"
#include "support/unlock_hold.h"

#define MiB ((uint64_t)1 << 20)

static _Thread_local bool watch_malloc;  /* armed in the allocating thread only */

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t mem_pool,
                                    cudaStream_t stream)
{
    static cudaError_t (*real)(void **, size_t, cudaMemPool_t, cudaStream_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "cudaMallocFromPoolAsync");
    cudaError_t err = real(ptr, size, mem_pool, stream);
    if (watch_malloc && err == cudaSuccess) {
        watch_malloc = false;
        unlock_hold_arm(1);
    }
    return err;
}

static int teardown(void **state)
{
    (void)state;
    unlock_hold_let_go(); /* a failed assertion left the allocating thread held */
    return destroy_tracked_runtimes() ? -1 : 0;
}


static void *alloc_held_after_grow(void *arg)
{
    thread_call *a = arg;
    watch_malloc = true;
    a->rc = sp_alloc(a->pool, &a->ptr, a->bytes, a->stream);
    watch_malloc = false;
    unlock_hold_arm(0);
    return NULL;
}

static sp_stats runtime_stats_of(sp_runtime *rt)
{
    sp_stats st = {.size = sizeof st};
    SP(sp_runtime_stats(rt, &st));
    return st;
}

/* The figures of one pool (or of a runtime whose only memory is that pool's) holding one fresh
 * driver allocation of `held` bytes with one live block of `active` bytes asked as `requested`:
 * the rest cached, and every peak where that state put it. (The requested and active totals
 * are counted with the miss's other counters, after the figures: asserted once it returned.) */
static void assert_one_block(const sp_stats *st, uint64_t requested, uint64_t active,
                             uint64_t held)
{
    assert_int_equal(st->held.current, held);
    assert_int_equal(st->active.current, active);
    assert_int_equal(st->requested.current, requested);
    assert_int_equal(st->cached.current, held - active);
    assert_int_equal(st->held.peak, held);
    assert_int_equal(st->active.peak, active);
    assert_int_equal(st->requested.peak, requested);
    assert_int_equal(st->cached.peak, held - active);
    assert_int_equal(st->held.total, held);
}

/* One allocation of `bytes` (a block of `active` bytes) that takes a fresh driver allocation of
 * `held` bytes on a new runtime, read while the allocating thread is held past the heap's lock,
 * and again once it returned. */
static void read_while_growing(size_t bytes, uint64_t active, uint64_t held)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    sp_runtime *rt = track_runtime(0, &cfg);
    sp_pool *pool;
    SP(sp_pool_create(rt, "growing", NULL, &pool));
    cudaStream_t s = new_stream();

    thread_call a = {.pool = pool, .stream = s, .bytes = bytes, .rc = -1};
    unlock_hold_reset();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, alloc_held_after_grow, &a), 0);
    unlock_hold_wait();

    /* the driver granted the allocation and the block is carved: both are counted, or neither */
    sp_stats during = stats_of(pool), rt_during = runtime_stats_of(rt);
    assert_one_block(&during, bytes, active, held);
    assert_one_block(&rt_during, bytes, active, held);

    unlock_hold_let_go();
    assert_int_equal(pthread_join(t, NULL), 0);
    SP(a.rc);
    sp_stats after = stats_of(pool), rt_after = runtime_stats_of(rt);
    assert_one_block(&after, bytes, active, held);
    assert_one_block(&rt_after, bytes, active, held);
    assert_int_equal(after.requested.total, bytes);
    assert_int_equal(after.active.total, active);
    assert_int_equal(rt_after.requested.total, bytes);
    assert_int_equal(rt_after.active.total, active);
    assert_true(after.cached.peak >= during.cached.peak); /* a peak never goes down */
    assert_true(rt_after.cached.peak >= rt_during.cached.peak);

    SP(sp_free(pool, a.ptr, s));
    drop_stream(rt, s);
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

/* A small request: a 2 MiB slab, 256 bytes of it live. Before, the read showed the slab held
 * with nothing live (2 MiB cached, the cached peak too) and the read after it a cached peak of
 * 2 MiB - 256. */
static void a_fresh_slab_is_held_with_its_first_block_live(void **state)
{
    (void)state;
    read_while_growing(256, 256, 2 * MiB);
}

/* A medium request of 3 MiB: a 4 MiB segment (whole driver pages), 1 MiB of it cached. Before,
 * the read showed 4 MiB cached (the cached peak too) and the read after it a cached peak of
 * 1 MiB. */
static void a_fresh_segment_is_held_with_its_first_block_live(void **state)
{
    (void)state;
    read_while_growing(3 * MiB, 3 * MiB, 4 * MiB);
}

TEST_MAIN("grow_stats",
    cmocka_unit_test_teardown(a_fresh_slab_is_held_with_its_first_block_live, teardown),
    cmocka_unit_test_teardown(a_fresh_segment_is_held_with_its_first_block_live, teardown)
)
