/* Issue 27 item 8: requests under any interleaving. One thread ends requests while others
 * allocate into them, free their own blocks of other requests and read the stats: every
 * allocation either joins its request (SP_OK, and the end frees it) or gets
 * SP_ERR_REQUEST_ENDED (and holds nothing); the figures add up exactly and nothing is left
 * live. Ids that no pool gave get SP_ERR_NO_REQUEST. Run under ASan and TSan as well. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

enum { ROUNDS = 400, ALLOCATORS = 3, PER_ROUND = 6 };

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    int index;
    /* per round: how many allocations joined, and their requested bytes */
    uint64_t joined[ROUNDS], joined_bytes[ROUNDS];
    uint64_t ended, errors, own_frees;
    int first_error;
} worker;

static atomic_uint_least64_t current_req; /* the request of the round; 0 between rounds */
static pthread_barrier_t start_round, end_round;

static size_t size_of(int index, int round, int k)
{
    /* small, medium and large sizes, different on each thread and round */
    static const size_t sizes[] = {100, 4096, 70000, 1 << 20, (1 << 20) + 512, 3 << 20};
    return sizes[(index * 7 + round * 3 + k) % 6] + (size_t)index;
}

static void *allocator(void *arg)
{
    worker *w = arg;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&start_round);
        sp_request req = atomic_load(&current_req);
        /* a block of this thread's own, outside the request, freed while the end runs */
        void *own = NULL;
        int rc = sp_alloc(w->pool, &own, 5000 + (size_t)w->index, w->stream);
        if (rc != SP_OK) {
            w->errors++;
            w->first_error = w->first_error ? w->first_error : rc;
        }
        for (int k = 0; k < PER_ROUND; k++) {
            void *p = (void *)1;
            size_t bytes = size_of(w->index, round, k);
            rc = sp_request_alloc(w->pool, req, &p, bytes);
            if (rc == SP_OK) {
                if (!p) {
                    w->errors++;
                    w->first_error = w->first_error ? w->first_error : -1000;
                }
                w->joined[round]++;
                w->joined_bytes[round] += bytes;
            } else if (rc == SP_ERR_REQUEST_ENDED) {
                if (p != (void *)1 && p != NULL) { /* an ended request hands out nothing */
                    w->errors++;
                    w->first_error = w->first_error ? w->first_error : -1001;
                }
                w->ended++;
            } else {
                w->errors++;
                w->first_error = w->first_error ? w->first_error : rc;
            }
            sp_stats st = {.size = sizeof st};
            if (k == 2 && sp_pool_stats(w->pool, &st) != SP_OK)
                w->errors++;
        }
        if (own) {
            if (sp_free(w->pool, own, w->stream) != SP_OK)
                w->errors++;
            w->own_frees++;
        }
        pthread_barrier_wait(&end_round);
    }
    return NULL;
}

/* ALLOCATORS threads allocate into the round's request while the main thread ends it, each
 * round; the end's figures are exactly the allocations that joined. */
static void allocations_racing_the_end_join_or_are_refused(void **state)
{
    (void)state;
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    sp_runtime *rt = track_runtime(0, &rcfg); /* stats_flush as shipped: the fast path */
    sp_pool *pool;
    SP(sp_pool_create(rt, "race", NULL, &pool));
    cudaStream_t s = new_stream();
    worker w[ALLOCATORS];
    pthread_t th[ALLOCATORS];
    memset(w, 0, sizeof w);
    pthread_barrier_init(&start_round, NULL, ALLOCATORS + 1);
    pthread_barrier_init(&end_round, NULL, ALLOCATORS + 1);
    for (int i = 0; i < ALLOCATORS; i++) {
        w[i].pool = pool;
        w[i].stream = s;
        w[i].index = i;
        assert_int_equal(pthread_create(&th[i], NULL, allocator, &w[i]), 0);
    }
    uint64_t freed_total = 0, joined_total = 0, ended_total = 0, refused = 0;
    sp_request_stats st[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        sp_request req;
        SP(sp_request_begin(pool, s, NULL, &req));
        atomic_store(&current_req, req);
        pthread_barrier_wait(&start_round);
        /* the end races the allocations; which of them join depends on the schedule */
        st[round] = (sp_request_stats){.size = sizeof st[round]};
        SP(sp_request_end(pool, req, 0, &st[round]));
        pthread_barrier_wait(&end_round);
        assert_int_equal(sp_request_end(pool, req, 0, NULL), SP_ERR_REQUEST_ENDED);
    }
    for (int i = 0; i < ALLOCATORS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t joined = 0, bytes = 0;
        for (int i = 0; i < ALLOCATORS; i++) {
            joined += w[i].joined[round];
            bytes += w[i].joined_bytes[round];
        }
        /* every allocation that joined was freed by the end, and nothing else */
        assert_int_equal(st[round].allocs, joined);
        assert_int_equal(st[round].freed_at_end, joined);
        assert_int_equal(st[round].freed_at_end_bytes, bytes);
        assert_int_equal(st[round].requested_total, bytes);
        assert_int_equal(st[round].frees, 0);
        freed_total += st[round].freed_at_end;
        joined_total += joined;
    }
    for (int i = 0; i < ALLOCATORS; i++) {
        assert_no_worker_errors("worker", i, w[i].errors, w[i].first_error);
        assert_int_equal(w[i].own_frees, ROUNDS);
        ended_total += w[i].ended;
    }
    refused = ended_total;
    assert_int_equal(freed_total, joined_total);
    assert_int_equal(joined_total + refused, (uint64_t)ROUNDS * ALLOCATORS * PER_ROUND);
    CK(cudaStreamSynchronize(s));
    sp_stats ps = stats_of(pool);
    assert_int_equal(ps.requested.current, 0);
    assert_int_equal(ps.active.current, 0);
    printf("# %d rounds, %d allocating threads + 1 ending: %llu allocations joined and freed at "
           "the end, %llu refused (SP_ERR_REQUEST_ENDED)\n",
           ROUNDS, ALLOCATORS, (unsigned long long)joined_total, (unsigned long long)refused);
    drop_stream(rt, s);
    SP(sp_pool_destroy(pool)); /* nothing live: no block kept a request */
    size_t free_b = 0, total = 0;
    destroy_runtime(rt);
    CK(cudaMemGetInfo(&free_b, &total));
    printf("# bytes left on the device after destroy: %llu\n",
           (unsigned long long)(total - free_b));
    assert_int_equal(total - free_b, 0);
    pthread_barrier_destroy(&start_round);
    pthread_barrier_destroy(&end_round);
}

/* Ids that no pool gave are SP_ERR_NO_REQUEST, whatever their high bits; an id another live
 * pool gave is SP_ERR_WRONG_POOL. */
static void ids_no_pool_gave_are_no_request(void **state)
{
    (void)state;
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *pool, *other;
    SP(sp_pool_create(rt, "a", NULL, &pool));
    SP(sp_pool_create(rt, "b", NULL, &other));
    cudaStream_t s = new_stream();
    sp_request theirs;
    SP(sp_request_begin(other, s, NULL, &theirs));
    /* the tag of a pool that never existed: far above any pool id given so far */
    sp_request never = ((theirs >> 40) + 100000) << 40 | 1;
    const sp_request bogus[] = {12345, UINT64_MAX, never, (uint64_t)1 << 63 | 7};
    for (size_t i = 0; i < sizeof bogus / sizeof *bogus; i++) {
        void *p = (void *)1;
        assert_int_equal(sp_request_alloc(pool, bogus[i], &p, 64), SP_ERR_NO_REQUEST);
        assert_ptr_equal(p, (void *)1);
        assert_int_equal(sp_request_end(pool, bogus[i], 0, NULL), SP_ERR_NO_REQUEST);
    }
    void *p = (void *)1;
    assert_int_equal(sp_request_alloc(pool, theirs, &p, 64), SP_ERR_WRONG_POOL);
    assert_int_equal(sp_request_end(pool, theirs, 0, NULL), SP_ERR_WRONG_POOL);
    SP(sp_request_end(other, theirs, 0, NULL));
    CK(cudaStreamSynchronize(s));
    drop_stream(rt, s);
    destroy_runtime(rt);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(allocations_racing_the_end_join_or_are_refused,
                              teardown_runtimes),
    cmocka_unit_test_teardown(ids_no_pool_gave_are_no_request, teardown_runtimes)
)
