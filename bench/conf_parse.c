/* conf-parse: how long a large SP_ALLOC_CONF takes to apply (issue 29: parsing linear in the
 * input). Builds a string of distinct pool keys ("t000001.limit:4M,t000002.limit:4M,...") of the
 * size asked for, then times sp_runtime_create (which parses and checks it whole), the creation
 * of three of its pools (first, middle, last: each finds its keys), sp_runtime_check_config and
 * sp_runtime_destroy. Not a test: figures for the closing note.
 *   conf-parse [KIB...]     default: 64 256 1024 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "streampool.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run(size_t kib)
{
    size_t cap = kib * 1024, used = 0, n = 0;
    char *conf = malloc(cap + 64);
    if (!conf)
        return 1;
    conf[0] = '\0';
    while (used + 32 < cap) {
        int w = snprintf(conf + used, cap + 64 - used, "%st%06zu.limit:4M", n ? "," : "", n);
        used += (size_t)w;
        n++;
    }
    setenv("SP_ALLOC_CONF", conf, 1);
    setenv("SP_ALLOC_CONF_QUIET", "1", 1);
    double t0 = now();
    sp_runtime *rt;
    int rc = sp_runtime_create(0, NULL, &rt);
    double t1 = now();
    if (rc != SP_OK) {
        fprintf(stderr, "conf-parse: sp_runtime_create: %s %s\n", sp_status_name(rc),
                sp_config_error());
        return 1;
    }
    printf("%5zu KiB  %6zu keys  create %8.3f s", kib, n, t1 - t0);
    fflush(stdout); /* the figure that matters first: a slow library may be stopped after it */
    size_t pick[3] = {0, n / 2, n - 1};
    sp_pool *pools[3];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%06zu", pick[i]);
        if ((rc = sp_pool_create(rt, name, NULL, &pools[i])) != SP_OK) {
            fprintf(stderr, "conf-parse: sp_pool_create %s: %s\n", name, sp_status_name(rc));
            return 1;
        }
    }
    double t2 = now();
    int unused = sp_runtime_check_config(rt, NULL, 0);
    double t3 = now();
    for (int i = 0; i < 3; i++)
        (void)sp_pool_destroy(pools[i]);
    rc = sp_runtime_destroy(rt);
    double t4 = now();
    printf("  3 pools %8.3f s  check_config %8.3f s (%d unused)  destroy %8.3f s  total %8.3f s\n",
           t2 - t1, t3 - t2, unused, t4 - t3, t4 - t0);
    free(conf);
    unsetenv("SP_ALLOC_CONF");
    return rc != SP_OK;
}

int main(int argc, char **argv)
{
    size_t def[] = {64, 256, 1024};
    int err = 0;
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            err |= run((size_t)strtoull(argv[i], NULL, 10));
    else
        for (size_t i = 0; i < sizeof def / sizeof *def; i++)
            err |= run(def[i]);
    return err;
}
