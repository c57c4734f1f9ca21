/* The trace records the outcome the allocator took, decided where the stats count it: under
 * threads that steal, wait and grow in the same pools, the trace's counts of each outcome equal
 * the stats' counters exactly (issue 25: the trace used to guess from pool-wide counters that
 * other threads moved, and said hit 6,951 where the stats said 6,785). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/sp_test_support.h"

enum { THREADS = 4, ROUNDS = 300, LIVE = 6 };
static const size_t KiB = 1024, MiB = (size_t)1 << 20;

typedef struct {
    sp_runtime *rt;
    sp_pool *pools[2];
    unsigned seed;
    int failures;
} worker;

/* A seeded mix on the thread's own stream: small blocks, medium ranges and huge segments, a
 * few live at once, freed on the stream that allocated them; now and then the host waits for
 * the stream (so that other threads' misses may find its frees settled) and hands a block to
 * the next round's other pool. */
static void work(void *arg, cudaStream_t s)
{
    worker *w = arg;
    void *live[LIVE] = {0};
    sp_pool *owner[LIVE] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        int i = rand_r(&w->seed) % LIVE;
        if (live[i] && sp_free(owner[i], live[i], s) != SP_OK)
            w->failures++;
        unsigned kind = (unsigned)rand_r(&w->seed) % 10;
        size_t bytes = kind < 6   ? KiB + (size_t)rand_r(&w->seed) % (64 * KiB)
                       : kind < 9 ? MiB + (size_t)rand_r(&w->seed) % (7 * MiB)
                                  : 16 * MiB + (size_t)rand_r(&w->seed) % (16 * MiB);
        owner[i] = w->pools[rand_r(&w->seed) % 2];
        if (sp_alloc(owner[i], &live[i], bytes, s) != SP_OK) {
            w->failures++;
            live[i] = NULL;
        }
        if (r % 16 == 15 && cudaStreamSynchronize(s) != cudaSuccess)
            w->failures++;
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i] && sp_free(owner[i], live[i], s) != SP_OK)
            w->failures++;
    if (cudaStreamSynchronize(s) != cudaSuccess)
        w->failures++;
    if (sp_stream_release(w->rt, s) != SP_OK)
        w->failures++;
    (void)cudaStreamDestroy(s);
}

typedef struct {
    uint64_t hit, reuse, steal, wait, fresh, bypass, fail;
} tally;

/* Counts the allocate rows of the CSV by outcome, for the pool named `pool`. */
static tally count_outcomes(const char *path, const char *pool)
{
    tally t = {0};
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024], quoted[96];
    snprintf(quoted, sizeof quoted, ",\"%s\",", pool);
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, ",allocate,") || !strstr(line, quoted))
            continue;
        /* Pool,ClassSize,Outcome,StreamName: the outcome follows the class size */
        const char *p = strstr(line, quoted) + strlen(quoted);
        p = strchr(p, ',');
        assert_non_null(p);
        p++;
        const struct {
            const char *field; /* the outcome and the comma after it */
            uint64_t *count;
        } outcomes[] = {{"hit,", &t.hit},     {"reuse,", &t.reuse},   {"steal,", &t.steal},
                        {"wait,", &t.wait},   {"fresh,", &t.fresh},   {"bypass,", &t.bypass},
                        {"fail,", &t.fail}};
        size_t k = 0, n = sizeof outcomes / sizeof outcomes[0];
        while (k < n && strncmp(p, outcomes[k].field, strlen(outcomes[k].field)) != 0)
            k++;
        if (k == n)
            fail_msg("an outcome the trace should not write: %s", line);
        (*outcomes[k].count)++;
    }
    fclose(f);
    return t;
}

static void trace_outcomes_equal_the_counters_under_threads(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    sp_pool *pools[2];
    SP(sp_pool_create(rt, "balanced", &cfg, &pools[0]));
    cfg.cross_stream = SP_CROSS_STREAM_WAIT; /* misses may wait on other streams' fences */
    SP(sp_pool_create(rt, "waiting", &cfg, &pools[1]));
    char dir[] = "/tmp/sp-trace-outcomes-XXXXXX", path[96];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.csv", dir);
    SP(sp_runtime_trace_start(rt, path));
    worker w[THREADS];
    stream_thread t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){rt, {pools[0], pools[1]}, 7919u * (unsigned)(i + 1), 0};
        stream_thread_start(&t[i], work, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        stream_thread_join(&t[i]);
        assert_int_equal(w[i].failures, 0);
    }
    SP(sp_runtime_trace_stop(rt));
    uint64_t all = 0, others = 0;
    for (int k = 0; k < 2; k++) {
        sp_stats st = stats_of(pools[k]);
        tally n = count_outcomes(path, sp_pool_name(pools[k]));
        assert_int_equal(n.fail, 0);
        assert_int_equal(n.hit, st.same_stream_hits);
        assert_int_equal(n.steal, st.cross_stream_reuses);
        assert_int_equal(n.wait, st.cross_stream_waits);
        assert_int_equal(n.bypass, st.capture_bypasses); /* none: no capture here */
        assert_int_equal(n.fresh, st.driver_allocs);     /* no reservation, no bypass */
        assert_int_equal(n.hit + n.reuse + n.steal + n.wait + n.fresh + n.bypass, st.allocs);
        all += st.allocs;
        others += n.steal + n.wait;
    }
    assert_int_equal(all, (uint64_t)THREADS * ROUNDS);
    print_message("# %llu allocations, %llu served by another stream's memory\n",
                  (unsigned long long)all, (unsigned long long)others);
    unlink(path);
    rmdir(dir);
    destroy_runtime(rt);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(trace_outcomes_equal_the_counters_under_threads,
                              teardown_runtimes)
)
