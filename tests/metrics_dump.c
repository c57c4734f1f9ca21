/* Helper of test_metrics.py: runs a small workload on three pools (one with a name that needs
 * escaping), then writes sp_runtime_metrics_prometheus's text to argv[1] and, to argv[2], one
 * line per pool: its name, a tab, and sp_stats_json of sp_pool_stats, read right after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streampool.h"
#include "support/exit_check.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: metrics_dump METRICS_FILE STATS_FILE\n");
        return 2;
    }
    sp_runtime *rt;
    sp_pool *pools[3];
    CHECK(sp_runtime_create(0, NULL, &rt));
    CHECK(sp_runtime_default_pool(rt, &pools[0]));
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 65 << 20; /* 64 MiB in force: whole driver pages */
    CHECK(sp_pool_create(rt, "llama", &cfg, &pools[1]));
    CHECK(sp_pool_create(rt, "we\"ird\\pool \xe6\xa8\xa1\xe5\x9e\x8b", NULL, &pools[2]));
    cudaStream_t s[2];
    for (int i = 0; i < 2; i++)
        CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    void *live[3][8];
    for (int p = 0; p < 3; p++) {
        for (int i = 0; i < 8; i++)
            CHECK(sp_alloc(pools[p], &live[p][i], (size_t)(p + 1) * 1000 * (size_t)(i + 1), s[i % 2]));
        for (int i = 0; i < 8; i += 2)
            CHECK(sp_free(pools[p], live[p][i], s[i % 2]));
        for (int i = 0; i < 8; i += 2) /* hits on the same stream */
            CHECK(sp_alloc(pools[p], &live[p][i], (size_t)(p + 1) * 1000 * (size_t)(i + 1), s[i % 2]));
    }
    void *too_big;
    if (sp_alloc(pools[1], &too_big, (size_t)128 << 20, s[0]) != SP_ERR_NEVER_FITS)
        return 1;
    CHECK(cudaDeviceSynchronize());
    size_t needed = 0;
    CHECK(sp_runtime_metrics_prometheus(rt, NULL, 0, &needed));
    char *text = malloc(needed + 1);
    size_t again = 0;
    CHECK(sp_runtime_metrics_prometheus(rt, text, needed + 1, &again));
    if (again != needed || strlen(text) != needed)
        return 1;
    FILE *m = fopen(argv[1], "w"), *st = fopen(argv[2], "w");
    if (!m || !st)
        return 1;
    fputs(text, m);
    for (int p = 0; p < 3; p++) {
        sp_stats stats = {.size = sizeof stats};
        char json[4096];
        CHECK(sp_pool_stats(pools[p], &stats));
        sp_stats_json(&stats, json, sizeof json);
        fprintf(st, "%s\t%s\n", sp_pool_name(pools[p]), json);
    }
    fclose(m);
    fclose(st);
    free(text);
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < 8; i++)
            CHECK(sp_free(pools[p], live[p][i], s[i % 2]));
    for (int i = 0; i < 2; i++) {
        CHECK(sp_stream_release(rt, s[i]));
        CHECK(cudaStreamDestroy(s[i]));
    }
    CHECK(sp_runtime_destroy(rt));
    return 0;
}
