/* sp-bench: streampool's benchmarks in one executable.
 *
 *   sp-bench serve   [--streams 1,4,16,64] [--requests N] [--warmup W] [--repeat R]
 *                    [--buffers K] [--work-us U] [--memset-bytes B] [--seed S] [--allocators LIST]
 *   sp-bench hotpath [--seconds X] [--repeat R] [--quick]
 *   sp-bench replay  LOG [--max-streams N] [--allocators LIST] [--capacity BYTES] [--repeat R]
 *                    [--no-capacity] [--workload NAME]
 *   sp-bench gen-log FILE [--shape serving|training|forward|llm|tenants] [shape options]
 *                    [--seed S]
 *   sp-bench all     [--quick] [--log-dir DIR]  serve, hotpath, replay of every shape
 * Every command takes --json FILE and --plot FILE.svg. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: sp-bench serve|hotpath|replay LOG|gen-log FILE|all [options]\n"
            "  serve:   --streams 1,4,16,64  stream counts, one row each per allocator\n"
            "           --requests 32        measured requests per stream\n"
            "           --warmup W           unmeasured requests per stream before them\n"
            "                                (default: 64, and at least 512 over all streams)\n"
            "           --repeat 3           runs per row: median and min-max\n"
            "           --buffers 8 --work-us 50 --memset-bytes 65536 (0: whole buffers) --seed 1\n"
            "           --allocators cudaMalloc,cudaMallocAsync,cudaMallocAsync-max,streampool,\n"
            "                        preallocated (the rows; preallocated: each stream's\n"
            "                        buffers allocated once before measuring, the ceiling)\n"
            "  hotpath: --seconds 0.1 (per measurement) --repeat 5 (rounds per cell, each\n"
            "           streampool and malloc back to back: medians, the ratio's min-max)\n"
            "           --quick (smaller scaling sweeps)\n"
            "  replay:  --max-streams 64 --allocators LIST (as serve, less preallocated)\n"
            "           --repeat 3 (runs per allocator, and clean runs a capacity needs)\n"
            "           --capacity BYTES (K/M/G: one run per allocator at that device capacity)\n"
            "           --no-capacity (skip the capacity search) --workload NAME (row label)\n"
            "  gen-log: --shape serving|training|forward|llm|tenants (default serving) --seed 1\n"
            "           serving:  --requests 2000 --streams 8\n"
            "           training: --layers 12 --hidden 1024 --batch 8 --seq 1024 --steps 3\n"
            "           forward:  training's options; forward only (activations kept to the\n"
            "                     step's end, no backward, no optimizer)\n"
            "           llm:      --requests 256 --max-batch 32 --block-tokens 16 (0: whole-\n"
            "                     sequence buffers) --max-prompt 2048 --max-output 1024\n"
            "           tenants:  --tenants 4 --requests 500 (per tenant) --streams 2 (per\n"
            "                     tenant) --noisy-factor 4 (tenant 0's sizes and bursts)\n"
            "  all:     serve, hotpath and replay of a generated log of every shape;\n"
            "           --quick (small, for CI) --log-dir DIR (where the logs go; default .)\n"
            "  every command: --json FILE --plot FILE.svg\n");
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    size_t mult = 1;
    switch (*end) {
    case 'K': case 'k': mult = (size_t)1 << 10; end++; break;
    case 'M': case 'm': mult = (size_t)1 << 20; end++; break;
    case 'G': case 'g': mult = (size_t)1 << 30; end++; break;
    case 'T': case 't': mult = (size_t)1 << 40; end++; break;
    default: break;
    }
    if (end == s || *end || v <= 0)
        return -1;
    *out = (size_t)(v * (double)mult);
    return 0;
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

/* --allocators: serve's rows by their option names; replay (and all's replays) takes the rows
 * that are an allocator alone, and refuses the others by name when the command is replay. */
static int parse_allocators(const char *s, const char *cmd, bool *rows, bool *kinds)
{
    memset(rows, 0, sizeof(bool) * SERVE_MAX_VARIANTS);
    memset(kinds, 0, sizeof(bool) * ALLOC_KIND_COUNT);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < serve_variant_count() && strcmp(serve_variant_option(k), tok) != 0)
            k++;
        if (k == serve_variant_count()) {
            fprintf(stderr, "sp-bench: unknown allocator '%s'\n", tok);
            return -1;
        }
        rows[k] = true;
        alloc_kind kind;
        if (serve_variant_plain(k, &kind)) {
            kinds[kind] = true;
        } else if (strcmp(cmd, "replay") == 0) {
            fprintf(stderr, "sp-bench: '%s' is a serve row, not an allocator replay can run\n",
                    tok);
            return -1;
        }
    }
    return 0;
}

static void describe_env(bench_env *env)
{
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(env->device, sizeof env->device, "%s", prop.name);
    else
        snprintf(env->device, sizeof env->device, "unknown");
#ifdef SP_CUDASIM
    snprintf(env->runtime, sizeof env->runtime, "cudasim");
#else
    int v = 0;
    cudaRuntimeGetVersion(&v);
    snprintf(env->runtime, sizeof env->runtime, "cuda %d.%d", v / 1000, (v % 1000) / 10);
#endif
    char host[64] = "?", cpu[128] = "unknown CPU", line[256];
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = '\0';
            break;
        }
    }
    if (f)
        fclose(f);
    snprintf(env->machine, sizeof env->machine, "%s, %s, %ld cores", host, cpu,
             sysconf(_SC_NPROCESSORS_ONLN));
}

/* `all`: a log of every shape, each replayed by every allocator. */
static int replay_every_shape(const genlog_options *base, const replay_options *ro,
                              const char *dir, bench_results *r)
{
    int rc = 0;
    for (int sh = 0; sh < SHAPE_COUNT; sh++) {
        genlog_options g = *base;
        g.shape = (log_shape)sh;
        if (sh == SHAPE_TENANTS) {
            g.requests = g.requests / 4 > 0 ? g.requests / 4 : 1;
            g.streams = 2;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/sp-bench-%s.csv", dir, genlog_shape_name(g.shape));
        if (bench_generate_log(path, &g) != 0)
            return 2;
        replay_options o = *ro;
        o.workload = genlog_shape_name(g.shape);
        rc |= bench_replay(path, &o, r);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        return 0;
    }
    const char *cmd = argv[1], *json = NULL, *plot = NULL, *file = NULL, *log_dir = ".";
    serve_options so = {.stream_counts = {1, 4, 16, 64}, .n_stream_counts = 4, .requests = 32,
                        .warmup = -1, .repeats = 3, .buffers = 8, .work_us = 50,
                        .memset_bytes = 65536, .seed = 1};
    for (int k = 0; k < serve_variant_count(); k++)
        so.rows[k] = true;
    hotpath_options ho = {.seconds_per_cell = 0.1, .repeats = 5, .quick = false};
    replay_options ro = {.max_streams = 64, .allocators = {true, true, true, true},
                         .find_capacity = true, .repeats = 3};
    genlog_options go;
    genlog_defaults(&go);
    long requests = -1;
    int streams = -1;
    int i = 2;
    if ((strcmp(cmd, "replay") == 0 || strcmp(cmd, "gen-log") == 0) && argc > 2 && argv[2][0] != '-')
        file = argv[i++];
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (strcmp(a, "--quick") == 0) {
            ho.quick = true;
            takes = false;
        } else if (strcmp(a, "--no-capacity") == 0) {
            ro.find_capacity = false;
            takes = false;
        } else if (!v) {
            fprintf(stderr, "sp-bench: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--json") == 0) {
            json = v;
        } else if (strcmp(a, "--plot") == 0) {
            plot = v;
        } else if (strcmp(a, "--streams") == 0 && strcmp(cmd, "gen-log") == 0) {
            streams = atoi(v);
        } else if (strcmp(a, "--streams") == 0) {
            if ((so.n_stream_counts = parse_list(v, so.stream_counts, 8)) <= 0) {
                fprintf(stderr, "sp-bench: bad --streams '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--requests") == 0) {
            requests = atol(v);
        } else if (strcmp(a, "--warmup") == 0) {
            if ((so.warmup = atol(v)) < 0) {
                fprintf(stderr, "sp-bench: bad --warmup '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--repeat") == 0) {
            so.repeats = ro.repeats = ho.repeats = atoi(v);
        } else if (strcmp(a, "--buffers") == 0) {
            so.buffers = atoi(v);
        } else if (strcmp(a, "--work-us") == 0) {
            so.work_us = atoi(v);
        } else if (strcmp(a, "--memset-bytes") == 0) {
            so.memset_bytes = (size_t)atoll(v);
        } else if (strcmp(a, "--seed") == 0) {
            so.seed = go.seed = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--allocators") == 0) {
            if (parse_allocators(v, cmd, so.rows, ro.allocators) != 0)
                return 2;
        } else if (strcmp(a, "--seconds") == 0) {
            ho.seconds_per_cell = atof(v);
        } else if (strcmp(a, "--max-streams") == 0) {
            ro.max_streams = atoi(v);
        } else if (strcmp(a, "--capacity") == 0) {
            if (parse_size(v, &ro.capacity) != 0) {
                fprintf(stderr, "sp-bench: bad --capacity '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--workload") == 0) {
            ro.workload = v;
        } else if (strcmp(a, "--log-dir") == 0) {
            log_dir = v;
        } else if (strcmp(a, "--shape") == 0) {
            if (genlog_shape_parse(v, &go.shape) != 0) {
                fprintf(stderr, "sp-bench: unknown shape '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--layers") == 0) {
            go.layers = atoi(v);
        } else if (strcmp(a, "--hidden") == 0) {
            go.hidden = atoi(v);
        } else if (strcmp(a, "--batch") == 0) {
            go.batch = atoi(v);
        } else if (strcmp(a, "--seq") == 0) {
            go.seq = atoi(v);
        } else if (strcmp(a, "--steps") == 0) {
            go.steps = atoi(v);
        } else if (strcmp(a, "--max-batch") == 0) {
            go.max_batch = atoi(v);
        } else if (strcmp(a, "--block-tokens") == 0) {
            go.block_tokens = atoi(v);
        } else if (strcmp(a, "--max-prompt") == 0) {
            go.max_prompt = atoi(v);
        } else if (strcmp(a, "--max-output") == 0) {
            go.max_output = atoi(v);
        } else if (strcmp(a, "--tenants") == 0) {
            go.tenants = atoi(v);
        } else if (strcmp(a, "--noisy-factor") == 0) {
            go.noisy_factor = atoi(v);
        } else {
            fprintf(stderr, "sp-bench: unknown option %s\n", a);
            usage();
            return 2;
        }
        i += takes;
    }
    /* --requests and --streams mean each command's own unit */
    if (requests >= 0 && strcmp(cmd, "gen-log") == 0)
        go.requests = go.llm_requests = requests;
    else if (requests >= 0)
        so.requests = requests;
    else if (strcmp(cmd, "gen-log") == 0 && go.shape == SHAPE_TENANTS) {
        go.requests = 500;
    }
    if (streams >= 0)
        go.streams = streams;
    else if (strcmp(cmd, "gen-log") == 0 && go.shape == SHAPE_TENANTS)
        go.streams = 2;
    if (so.requests <= 0 || so.repeats <= 0 || so.repeats > 64 || so.buffers <= 0 ||
        so.buffers > 64 || so.work_us < 0 || ho.seconds_per_cell <= 0 || ro.max_streams <= 0) {
        fprintf(stderr, "sp-bench: an option is out of range\n");
        return 2;
    }

    static bench_env env;
    describe_env(&env);
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
        rc = bench_replay(file, &ro, &results);
        if (rc == 2)
            return 2; /* a malformed log: the message names the line */
    } else if (strcmp(cmd, "gen-log") == 0) {
        if (!file) {
            usage();
            return 2;
        }
        return bench_generate_log(file, &go);
    } else if (strcmp(cmd, "all") == 0) {
        if (ho.quick) { /* seconds, for CI: small everything */
            so.n_stream_counts = 2;
            so.requests = requests > 0 ? requests : 8;
            so.warmup = 2;
            so.repeats = ro.repeats = ho.repeats = 2;
            ho.seconds_per_cell = 0.005;
            go.requests = 200;
            go.streams = 4;
            go.layers = 2, go.hidden = 256, go.batch = 2, go.seq = 256, go.steps = 2;
            go.llm_requests = 24, go.max_batch = 8, go.max_prompt = 256, go.max_output = 64;
            go.tenants = 3;
        }
        rc |= bench_serve(&so, &results);
        rc |= bench_hotpath(&ho, &results);
        rc |= replay_every_shape(&go, &ro, log_dir, &results);
    } else {
        usage();
        return 2;
    }
    report_table(&results, &env);
    if (json && report_json(&results, &env, json) != 0) {
        fprintf(stderr, "sp-bench: cannot write %s\n", json);
        rc = 1;
    }
    if (plot && report_svg(&results, &env, plot) != 0) {
        fprintf(stderr, "sp-bench: cannot write %s\n", plot);
        rc = 1;
    }
    return rc ? 1 : 0;
}
