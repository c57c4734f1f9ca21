/* Helper of test_trace.py: a fixed pseudo-random workload on three pools and four streams from
 * one thread, traced to argv[1] (sp_runtime_trace_start); prints the runtime's requested.peak
 * (exact: stats_flush_bytes 0) for the test to compare with a replay of the trace. With a second
 * argument N, N MiB are allocated before the trace starts and freed after it stops: a trace
 * started mid-run, whose Perfetto file must show them held from its start. */
#include <stdio.h>
#include <stdlib.h>

#include "streampool.h"
#include "support/exit_check.h"

enum { SLOTS = 64, STEPS = 3000 };

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: trace_workload TRACE_FILE [MiB_HELD_BEFORE]\n");
        return 2;
    }
    sp_runtime_config rc = SP_RUNTIME_CONFIG_INIT;
    rc.stats_flush_bytes = 0;
    sp_runtime *rt;
    sp_pool *pools[3];
    CHECK(sp_runtime_create(0, &rc, &rt));
    CHECK(sp_runtime_default_pool(rt, &pools[0]));
    CHECK(sp_pool_create(rt, "kv, \"cache\"", NULL, &pools[1]));
    CHECK(sp_pool_create(rt, "weights", NULL, &pools[2]));
    cudaStream_t s[4];
    for (int i = 0; i < 4; i++)
        CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    void *before = NULL;
    if (argc == 3)
        CHECK(sp_alloc(pools[0], &before, (size_t)atoi(argv[2]) << 20, s[0]));
    CHECK(sp_runtime_trace_start(rt, argv[1]));
    void *ptr[SLOTS] = {0};
    int where[SLOTS];
    unsigned x = 12345;
    for (int step = 0; step < STEPS; step++) {
        x = x * 1103515245u + 12345u;
        int slot = (int)((x >> 8) % SLOTS), si = (int)((x >> 20) % 4);
        if (ptr[slot]) {
            CHECK(sp_free(pools[where[slot]], ptr[slot], s[si]));
            ptr[slot] = NULL;
        } else {
            where[slot] = (int)((x >> 4) % 3);
            size_t size = 256 + (size_t)((x >> 12) % 4096) * ((x >> 28) % 2 ? 1024 : 16);
            CHECK(sp_alloc(pools[where[slot]], &ptr[slot], size, s[si]));
        }
    }
    for (int slot = 0; slot < SLOTS; slot++)
        if (ptr[slot])
            CHECK(sp_free(pools[where[slot]], ptr[slot], s[0]));
    CHECK(sp_runtime_trace_stop(rt));
    if (before)
        CHECK(sp_free(pools[0], before, s[0]));
    sp_stats st = {.size = sizeof st};
    CHECK(sp_runtime_stats(rt, &st));
    printf("%llu\n", (unsigned long long)st.requested.peak);
    for (int i = 0; i < 4; i++) {
        CHECK(sp_stream_release(rt, s[i]));
        CHECK(cudaStreamDestroy(s[i]));
    }
    CHECK(sp_pool_destroy(pools[1]));
    CHECK(sp_pool_destroy(pools[2]));
    CHECK(sp_runtime_destroy(rt));
    return 0;
}
