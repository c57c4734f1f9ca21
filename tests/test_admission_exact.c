/* Issue 27 item 1: admission decides from exact figures. A request that fits once the pool's
 * own idle memory goes back is admitted, whatever the stream caches hold and whatever their
 * unflushed deltas say; the newcomer's two-tenant server (4 threads, 1000 requests each,
 * admission with expected bytes, retry on SP_ERR_LIMIT, SP_ALLOC_CONF "embed.limit:16M", a
 * 16 MiB reservation) finishes, with a bound on its retries instead of a hang. The runtime
 * keeps the shipped stats_flush_bytes: the figures a read would flush are the point. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024;

/* One thread allocates and frees one block of 1 MiB or less on a stream of a 16 MiB-limit
 * pool, then asks to be admitted for the whole limit: its own cache is all that stands in the
 * way, so it is admitted, at every size and every try. */
static void only_the_pools_cache_in_the_way_is_admitted(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT; /* stats_flush_bytes as shipped */
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool_config c = SP_POOL_CONFIG_INIT;
    c.limit = 16 * MiB;
    sp_pool *pool;
    SP(sp_pool_create(rt, "one", &c, &pool));
    cudaStream_t s = new_stream();
    const size_t sizes[] = {1 * MiB, 512 * KiB, 4000, 100, 1 * MiB - 1};
    int admitted = 0, tries = 0;
    for (int round = 0; round < 10; round++) {
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            void *p;
            SP(sp_alloc(pool, &p, sizes[k], s));
            SP(sp_free(pool, p, s));
            sp_request_config rc = SP_REQUEST_CONFIG_INIT;
            rc.expected_bytes = 16 * MiB;
            sp_request req = 0;
            tries++;
            int got = sp_request_begin_with(pool, s, &rc, &req);
            if (got != SP_OK)
                fprintf(stderr, "round %d, size %zu: %s\n", round, sizes[k], sp_status_name(got));
            assert_int_equal(got, SP_OK);
            admitted++;
            void *big;
            SP(sp_request_alloc(pool, req, &big, 16 * MiB)); /* what it was admitted for */
            SP(sp_request_end(pool, req, 0, NULL));
        }
    }
    printf("# one thread: %d of %d admissions for the whole 16 MiB limit after a small "
           "alloc+free\n",
           admitted, tries);
    drop_stream(rt, s);
    destroy_leaving_the_device_empty(rt, pool);
}

/* ---- the newcomer's two-tenant server ---- */

enum { SERVER_THREADS = 4, REQUESTS = 1000, MAX_TRIES = 200000 };

typedef struct {
    sp_pool *tenant[2];
    unsigned seed;
    uint64_t served, refusals, errors, max_tries;
    int first_error;
    cudaStream_t stream; /* the thread's, synchronized, for the test to drop */
} server;

static void serve(void *arg, cudaStream_t s)
{
    server *w = arg;
    for (int i = 0; i < REQUESTS; i++) {
        sp_pool *pool = w->tenant[i % 2];
        /* 1-3 buffers of 64 KiB to 3 MiB; the footprint declared as README says: each rounded
         * to what the pool holds for it (a 2 MiB slab up to 1 MiB, whole 2 MiB pages above) */
        int n = 1 + rand_r(&w->seed) % 3;
        size_t sizes[3];
        sp_request_config rc = SP_REQUEST_CONFIG_INIT;
        for (int k = 0; k < n; k++) {
            sizes[k] = 64 * KiB + (size_t)rand_r(&w->seed) % (3 * MiB);
            rc.expected_bytes += sizes[k] <= 1 * MiB ? 2 * MiB : (sizes[k] + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
        }
        sp_request req = 0;
        uint64_t tries = 0;
        int got;
        while ((got = sp_request_begin_with(pool, s, &rc, &req)) == SP_ERR_LIMIT &&
               ++tries < MAX_TRIES) {
            w->refusals++;
            sched_yield(); /* another thread's request ends meanwhile; no sleep */
        }
        if (tries > w->max_tries)
            w->max_tries = tries;
        if (got != SP_OK) {
            if (!w->errors++)
                w->first_error = got;
            continue;
        }
        for (int k = 0; k < n; k++) {
            void *p;
            int arc = sp_request_alloc(pool, req, &p, sizes[k]);
            if (arc != SP_OK && !w->errors++)
                w->first_error = arc;
        }
        if (sp_request_end(pool, req, 0, NULL) != SP_OK)
            w->errors++;
        w->served++;
    }
    (void)cudaStreamSynchronize(s);
    w->stream = s;
}

static void two_tenant_server_finishes(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.alloc_conf = "embed.limit:16M";
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool_config ec = SP_POOL_CONFIG_INIT;
    ec.reserve = 16 * MiB;
    server w[SERVER_THREADS];
    memset(w, 0, sizeof w);
    sp_pool *embed, *chat;
    SP(sp_pool_create(rt, "embed", &ec, &embed));
    SP(sp_pool_create(rt, "chat", NULL, &chat));
    stream_thread th[SERVER_THREADS];
    for (int i = 0; i < SERVER_THREADS; i++) {
        w[i].tenant[0] = i % 2 ? chat : embed;
        w[i].tenant[1] = i % 2 ? embed : chat;
        w[i].seed = 27001u + (unsigned)i;
        stream_thread_start(&th[i], serve, &w[i]);
    }
    uint64_t served = 0, refusals = 0, max_tries = 0;
    for (int i = 0; i < SERVER_THREADS; i++) {
        stream_thread_join(&th[i]);
        assert_no_worker_errors("server", i, w[i].errors, w[i].first_error);
        served += w[i].served;
        refusals += w[i].refusals;
        max_tries = w[i].max_tries > max_tries ? w[i].max_tries : max_tries;
        drop_stream(rt, w[i].stream);
    }
    assert_int_equal(served, SERVER_THREADS * REQUESTS);
    printf("# two-tenant server: %d threads, %llu requests served, %llu refusals retried, at "
           "most %llu retries for one request\n",
           SERVER_THREADS, (unsigned long long)served, (unsigned long long)refusals,
           (unsigned long long)max_tries);
    SP(sp_pool_destroy(embed));
    SP(sp_pool_destroy(chat));
    destroy_runtime_reporting_bytes_left(rt);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(only_the_pools_cache_in_the_way_is_admitted, teardown_runtimes),
    cmocka_unit_test_teardown(two_tenant_server_finishes, teardown_runtimes)
)
