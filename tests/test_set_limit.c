/* Issue 27 item 3: sp_pool_set_limit. Lowering gives the cache above the new limit back at
 * once, keeps live allocations valid and refuses new driver memory until the pool is under
 * it; a limit below the reservation (or a page) is refused with words; raising lets the pool
 * grow past the limit it was created with (a new cudaMemPool past the old one's cap); 0 is no
 * limit; under threads held never passes the highest limit in force. cudasim only: a device of
 * known size. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const uint64_t MiB = 1024 * 1024;

/* 4 x 8 MiB live and 3 x 8 MiB cached under a 64 MiB limit; lowered to 16 MiB: the cache goes
 * back at once, the live blocks stay, new driver memory is refused until the
 * frees bring the pool under the limit. */
static void lowering_gives_the_cache_back_and_refuses_until_under(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(512 * MiB);
    sp_pool *pool = pool_of(rt, "lower", 64 * MiB, 0, UINT64_MAX);
    cudaStream_t s = new_stream();
    void *live[4], *cached[3];
    for (int i = 0; i < 4; i++) {
        SP(sp_alloc(pool, &live[i], 8 * MiB, s));
        CK(cudaMemsetAsync(live[i], 0x40 + i, 8 * MiB, s));
    }
    for (int i = 0; i < 3; i++)
        SP(sp_alloc(pool, &cached[i], 8 * MiB, s));
    for (int i = 0; i < 3; i++)
        SP(sp_free(pool, cached[i], s));
    assert_int_equal(stats_of(pool).held.current, 56 * MiB);
    SP(sp_pool_set_limit(pool, 16 * MiB));
    assert_int_equal(limit_of(pool), 16 * MiB);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 32 * MiB); /* the cache went back, the live blocks stay */
    assert_int_equal(st.active.current, 32 * MiB);
    void *p = (void *)1;
    assert_int_equal(sp_alloc(pool, &p, 8 * MiB, s), SP_ERR_LIMIT);
    assert_int_equal(sp_alloc(pool, &p, 2 * MiB, s), SP_ERR_LIMIT);
    for (int i = 0; i < 4; i++) { /* the live blocks are still the pool's, and live */
        sp_ptr_info info = {.size = sizeof info};
        SP(sp_pointer_info(rt, live[i], &info));
        assert_int_equal(info.state, SP_POINTER_LIVE);
        assert_int_equal(info.requested, 8 * MiB);
    }
    for (int i = 0; i < 3; i++)
        SP(sp_free(pool, live[i], s));
    /* 8 MiB live: usage is under the limit again, and an 8 MiB block is served */
    SP(sp_alloc(pool, &p, 8 * MiB, s));
    SP(sp_free(pool, p, s));
    SP(sp_free(pool, live[3], s));
    /* a size no cached range holds needs the driver: the cache over the limit goes back first */
    SP(sp_alloc(pool, &p, 12 * MiB, s));
    st = stats_of(pool);
    assert_true(st.held.current <= 16 * MiB);
    assert_int_equal(st.active.current, 12 * MiB);
    SP(sp_free(pool, p, s));
    drop_stream(rt, s);
    destroy_leaving_the_device_empty(rt, pool);
}

/* Below the reservation, or below a page: refused with a message, nothing changed. */
static void a_limit_below_the_reservation_is_refused(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(512 * MiB);
    sp_pool *pool = pool_of(rt, "reserved", 64 * MiB, 32 * MiB, UINT64_MAX);
    assert_int_equal(sp_pool_set_limit(pool, 30 * MiB), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "reserve"));
    assert_int_equal(limit_of(pool), 64 * MiB);
    assert_int_equal(sp_pool_set_limit(pool, 1000), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "granularity"));
    assert_int_equal(limit_of(pool), 64 * MiB);
    assert_int_equal(sp_pool_set_limit(NULL, 64 * MiB), SP_ERR_INVALID);
    SP(sp_pool_set_limit(pool, 32 * MiB)); /* at the reservation: fine */
    assert_int_equal(limit_of(pool), 32 * MiB);
    destroy_leaving_the_device_empty(rt, pool);
}

/* Created at 16 MiB with an 8 MiB reservation; raised to 64 MiB it holds 64 MiB (past its
 * first cudaMemPool's cap), its reservation still its own; 0 lifts the limit; destroyed, every
 * byte is back. */
static void raising_grows_past_the_creation_limit(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(512 * MiB);
    sp_pool *pool = pool_of(rt, "raise", 16 * MiB, 8 * MiB, UINT64_MAX);
    cudaStream_t s = new_stream();
    void *p[24];
    int n = 0;
    SP(sp_alloc(pool, &p[n++], 8 * MiB, s));
    SP(sp_alloc(pool, &p[n++], 8 * MiB, s));
    void *x = (void *)1;
    assert_int_equal(sp_alloc(pool, &x, 8 * MiB, s), SP_ERR_LIMIT);
    SP(sp_pool_set_limit(pool, 64 * MiB));
    assert_int_equal(limit_of(pool), 64 * MiB);
    while (n < 8)
        SP(sp_alloc(pool, &p[n++], 8 * MiB, s));
    assert_int_equal(stats_of(pool).held.current, 64 * MiB);
    assert_int_equal(sp_alloc(pool, &x, 8 * MiB, s), SP_ERR_LIMIT);
    /* the new cudaMemPool is capped at the new limit: the driver holds it there too */
    assert_true(pool_attr(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemHigh) <= 64 * MiB);
    SP(sp_pool_set_limit(pool, 0));
    while (n < 20)
        SP(sp_alloc(pool, &p[n++], 8 * MiB, s));
    assert_int_equal(stats_of(pool).held.current, 160 * MiB);
    assert_int_equal(limit_of(pool), 0);
    for (int i = 0; i < n; i++)
        SP(sp_free(pool, p[i], s));
    /* back to 16 MiB: the cache over it goes back at once (the reservation stays) */
    SP(sp_pool_set_limit(pool, 16 * MiB));
    assert_true(stats_of(pool).held.current <= 16 * MiB);
    drop_stream(rt, s);
    destroy_leaving_the_device_empty(rt, pool);
}

/* ---- threads allocating while another moves the limit ---- */

enum { WORKERS = 4, LIVE = 6, ITERATIONS = 4000 };

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    unsigned seed;
    uint64_t allocs, refusals, errors;
    int first_error;
} worker;

static atomic_int finished;
static const uint64_t limits[] = {48, 96, 32, 64, 16, 80}; /* MiB; 96 the highest */

static void *allocate(void *arg)
{
    worker *w = arg;
    cudaStream_t s = w->stream;
    void *live[LIVE] = {0};
    for (int i = 0; i < ITERATIONS; i++) {
        int slot = rand_r(&w->seed) % LIVE;
        if (live[slot]) {
            if (sp_free(w->pool, live[slot], s) != SP_OK)
                w->errors++;
            live[slot] = NULL;
            continue;
        }
        size_t size = 1 + (size_t)rand_r(&w->seed) % (6 * MiB);
        int rc = sp_alloc(w->pool, &live[slot], size, s);
        if (rc == SP_OK)
            w->allocs++;
        else if (rc == SP_ERR_LIMIT)
            w->refusals++;
        else if (!w->errors++)
            w->first_error = rc;
        if (rc != SP_OK)
            live[slot] = NULL;
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i] && sp_free(w->pool, live[i], s) != SP_OK)
            w->errors++;
    atomic_fetch_add(&finished, 1);
    return NULL;
}

static void threads_allocate_while_the_limit_moves(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(512 * MiB);
    sp_pool *pool = pool_of(rt, "moving", 48 * MiB, 0, UINT64_MAX);
    worker w[WORKERS];
    pthread_t th[WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++) {
        w[i].pool = pool;
        w[i].stream = new_stream();
        w[i].seed = 2700u + (unsigned)i;
        assert_int_equal(pthread_create(&th[i], NULL, allocate, &w[i]), 0);
    }
    /* the limit moves while they allocate; every read: held within the highest limit */
    uint64_t moves = 0, reads = 0, max_held = 0;
    atomic_store(&finished, 0);
    for (;;) {
        uint64_t next = limits[moves % (sizeof limits / sizeof *limits)] * MiB;
        int rc = sp_pool_set_limit(pool, next);
        assert_true(rc == SP_OK);
        moves++;
        for (int k = 0; k < 20; k++) {
            sp_stats st = stats_of(pool);
            reads++;
            assert_true(st.held.current <= 96 * MiB);
            assert_true(st.held.peak <= 96 * MiB);
            if (st.held.current > max_held)
                max_held = st.held.current;
        }
        if (atomic_load(&finished) == WORKERS)
            break;
    }
    uint64_t allocs = 0, refusals = 0;
    for (int i = 0; i < WORKERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        drop_stream(rt, w[i].stream);
        assert_no_worker_errors("worker", i, w[i].errors, w[i].first_error);
        allocs += w[i].allocs;
        refusals += w[i].refusals;
    }
    assert_true(pool_attr(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemHigh) <= 96 * MiB);
    assert_int_equal(stats_of(pool).active.current, 0);
    printf("# %d threads, %llu limit moves (16-96 MiB), %llu allocations, %llu refusals "
           "(SP_ERR_LIMIT), %llu reads, held at most %llu MiB\n",
           WORKERS, (unsigned long long)moves, (unsigned long long)allocs,
           (unsigned long long)refusals, (unsigned long long)reads,
           (unsigned long long)(max_held / MiB));
    SP(sp_pool_destroy(pool));
    destroy_runtime_reporting_bytes_left(rt);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(lowering_gives_the_cache_back_and_refuses_until_under,
                              teardown_runtimes),
    cmocka_unit_test_teardown(a_limit_below_the_reservation_is_refused, teardown_runtimes),
    cmocka_unit_test_teardown(raising_grows_past_the_creation_limit, teardown_runtimes),
    cmocka_unit_test_teardown(threads_allocate_while_the_limit_moves, teardown_runtimes)
)
