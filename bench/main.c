/* sp-bench: streampool's benchmarks in one executable.
 *
 *   sp-bench serve   [--streams 1,4,16,64] [--requests N] [--buffers K] [--work-us U]
 *                    [--memset-bytes B] [--seed S] [--allocators LIST]
 *   sp-bench hotpath [--seconds X] [--quick]
 *   sp-bench replay  LOG [--max-streams N]
 *   sp-bench gen-log FILE [--requests N] [--streams S] [--seed S]
 *   sp-bench all     [--quick]        serve, hotpath and a replay of a generated log
 * Every command takes --json FILE and --plot FILE.svg (the serve rows). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: sp-bench serve|hotpath|replay LOG|gen-log FILE|all [options]\n"
            "  serve:   --streams 1,4,16,64 --requests 1024 --buffers 8 --work-us 50\n"
            "           --memset-bytes 65536 (0: whole buffers) --seed 1\n"
            "           --allocators cudaMalloc,cudaMallocAsync,cudaMallocAsync-max,streampool\n"
            "  hotpath: --seconds 0.1 --quick\n"
            "  replay:  --max-streams 64\n"
            "  gen-log: --requests 2000 --streams 8 --seed 1\n"
            "  all:     --quick\n"
            "  every command: --json FILE --plot FILE.svg\n");
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > 4096)
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static int parse_allocators(const char *s, bool *on)
{
    static const char *const names[ALLOC_KIND_COUNT] = {"cudaMalloc", "cudaMallocAsync",
                                                        "cudaMallocAsync-max", "streampool"};
    memset(on, 0, sizeof(bool) * ALLOC_KIND_COUNT);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < ALLOC_KIND_COUNT && strcmp(names[k], tok) != 0)
            k++;
        if (k == ALLOC_KIND_COUNT) {
            fprintf(stderr, "sp-bench: unknown allocator '%s'\n", tok);
            return -1;
        }
        on[k] = true;
    }
    return 0;
}

static void describe_device(char *device, size_t dlen, char *runtime, size_t rlen)
{
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(device, dlen, "%s", prop.name);
    else
        snprintf(device, dlen, "unknown");
#ifdef SP_CUDASIM
    snprintf(runtime, rlen, "cudasim");
#else
    int v = 0;
    cudaRuntimeGetVersion(&v);
    snprintf(runtime, rlen, "cuda %d.%d", v / 1000, (v % 1000) / 10);
#endif
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1], *json = NULL, *plot = NULL, *file = NULL;
    serve_options so = {.stream_counts = {1, 4, 16, 64}, .n_stream_counts = 4, .requests = 1024,
                        .buffers = 8, .work_us = 50, .memset_bytes = 65536, .seed = 1,
                        .allocators = {true, true, true, true}};
    hotpath_options ho = {.seconds_per_cell = 0.1, .quick = false};
    long gen_requests = 2000;
    int gen_streams = 8, max_streams = 64;
    int i = 2;
    if ((strcmp(cmd, "replay") == 0 || strcmp(cmd, "gen-log") == 0) && argc > 2 && argv[2][0] != '-')
        file = argv[i++];
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (strcmp(a, "--quick") == 0) {
            ho.quick = true;
            takes = false;
        } else if (!v) {
            fprintf(stderr, "sp-bench: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--json") == 0) {
            json = v;
        } else if (strcmp(a, "--plot") == 0) {
            plot = v;
        } else if (strcmp(a, "--streams") == 0 && strcmp(cmd, "gen-log") == 0) {
            gen_streams = atoi(v);
        } else if (strcmp(a, "--streams") == 0) {
            if ((so.n_stream_counts = parse_list(v, so.stream_counts, 8)) <= 0) {
                fprintf(stderr, "sp-bench: bad --streams '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--requests") == 0) {
            so.requests = gen_requests = atol(v);
        } else if (strcmp(a, "--buffers") == 0) {
            so.buffers = atoi(v);
        } else if (strcmp(a, "--work-us") == 0) {
            so.work_us = atoi(v);
        } else if (strcmp(a, "--memset-bytes") == 0) {
            so.memset_bytes = (size_t)atoll(v);
        } else if (strcmp(a, "--seed") == 0) {
            so.seed = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--allocators") == 0) {
            if (parse_allocators(v, so.allocators) != 0)
                return 2;
        } else if (strcmp(a, "--seconds") == 0) {
            ho.seconds_per_cell = atof(v);
        } else if (strcmp(a, "--max-streams") == 0) {
            max_streams = atoi(v);
        } else {
            fprintf(stderr, "sp-bench: unknown option %s\n", a);
            usage();
            return 2;
        }
        i += takes;
    }
    if (so.requests <= 0 || so.buffers <= 0 || so.buffers > 64 || so.work_us < 0 ||
        ho.seconds_per_cell <= 0 || max_streams <= 0 || gen_streams <= 0 || gen_requests <= 0) {
        fprintf(stderr, "sp-bench: an option is out of range\n");
        return 2;
    }

    char device[256], runtime[64];
    describe_device(device, sizeof device, runtime, sizeof runtime);
    static bench_results results;
    int rc = 0;
    if (strcmp(cmd, "serve") == 0) {
        rc = bench_serve(&so, &results);
    } else if (strcmp(cmd, "hotpath") == 0) {
        rc = bench_hotpath(&ho, &results);
    } else if (strcmp(cmd, "replay") == 0) {
        if (!file) {
            usage();
            return 2;
        }
        rc = bench_replay(file, max_streams, &results);
        if (rc == 2)
            return 2; /* a malformed log: the message names the line */
    } else if (strcmp(cmd, "gen-log") == 0) {
        if (!file) {
            usage();
            return 2;
        }
        return bench_generate_log(file, gen_requests, gen_streams, so.seed);
    } else if (strcmp(cmd, "all") == 0) {
        if (ho.quick) {
            so.requests = 256;
            so.n_stream_counts = 3;
            ho.seconds_per_cell = 0.02;
        }
        rc |= bench_serve(&so, &results);
        rc |= bench_hotpath(&ho, &results);
        const char *log = "sp-bench-generated.csv";
        rc |= bench_generate_log(log, ho.quick ? 300 : 3000, 8, so.seed);
        rc |= bench_replay(log, max_streams, &results);
    } else {
        usage();
        return 2;
    }
    report_table(&results, device, runtime);
    if (json && report_json(&results, device, runtime, json) != 0) {
        fprintf(stderr, "sp-bench: cannot write %s\n", json);
        rc = 1;
    }
    if (plot && report_svg(&results, device, plot) != 0) {
        fprintf(stderr, "sp-bench: cannot write %s\n", plot);
        rc = 1;
    }
    return rc ? 1 : 0;
}
