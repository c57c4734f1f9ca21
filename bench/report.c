/* sp-bench output: tables on stdout, the same rows as JSON (schema in README, "The benchmark"),
 * and one SVG page with a plot per benchmark, written directly (no plotting dependency). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const serve_row *find_serve(const bench_results *r, const char *alloc, int streams)
{
    for (int i = 0; i < r->n_serve; i++)
        if (strcmp(r->serve[i].allocator, alloc) == 0 && r->serve[i].streams == streams)
            return &r->serve[i];
    return NULL;
}

#define RAW_MAX "cudaMallocAsync (threshold max)" /* the fair baseline */

/* This row's median requests/s over the baseline row's at the same stream count; 0: no
 * baseline, or either row failed calls (a request whose allocation failed skips its work, so its
 * rate is not comparable). */
static double multiple(const bench_results *r, const serve_row *s, const char *baseline)
{
    const serve_row *b = find_serve(r, baseline, s->streams);
    if (!b || b->failures || s->failures || b->requests_per_s.median <= 0)
        return 0;
    return s->requests_per_s.median / b->requests_per_s.median;
}

/* This row's calls per request over the fair baseline's; < 0: no baseline or no counters. */
static double calls_multiple(const bench_results *r, const serve_row *s)
{
    const serve_row *b = find_serve(r, RAW_MAX, s->streams);
    if (!b || b->cuda_calls_per_request <= 0 || s->cuda_calls_per_request < 0)
        return -1;
    return s->cuda_calls_per_request / b->cuda_calls_per_request;
}

static void fmt_or_dash(char *buf, size_t len, const char *fmt, double v)
{
    if (v >= 0)
        snprintf(buf, len, fmt, v);
    else
        snprintf(buf, len, "-");
}

/* Column headings of the calls table, by call_api. */
static const char *const api_heads[API_COUNT][2] = {
    [API_DRIVER_ALLOC] = {"driver", "alloc"},   [API_DRIVER_FREE] = {"driver", "free"},
    [API_EVENT_RECORD] = {"event", "record"},   [API_EVENT_QUERY] = {"event", "query"},
    [API_STREAM_WAIT_EVENT] = {"stream", "wait"}, [API_EVENT_SYNCHRONIZE] = {"event", "sync"},
    [API_STREAM_QUERY] = {"stream", "query"},   [API_STREAM_SYNCHRONIZE] = {"stream", "sync"},
    [API_OTHER] = {"", "other"},
};

static void serve_calls_table(const bench_results *r)
{
    printf("\nserve: CUDA calls per request by API, made by the allocator (the benchmark's own "
           "work, waits and queries left out),\nof the repeat with the median total; misses: "
           "allocations no cache hit served; queries/miss: cudaEventQuery per miss\n");
    for (int line = 0; line < 2; line++) {
        printf("%-31s %3s", line ? "" : "allocator", line ? "" : "str");
        for (int a = 0; a < API_COUNT; a++)
            printf(" %6s", api_heads[a][line]);
        printf(" %6s %7s %7s %7s\n", line ? "/req" : "total", line ? "max" : "x async",
               line ? "/req" : "misses", line ? "/miss" : "queries");
    }
    for (int i = 0; i < r->n_serve; i++) {
        const serve_row *s = &r->serve[i];
        char cell[32];
        printf("%-31s %3d", s->allocator, s->streams);
        for (int a = 0; a < API_COUNT; a++) {
            fmt_or_dash(cell, sizeof cell, "%.2f", s->calls_per_api[a]);
            printf(" %6s", cell);
        }
        fmt_or_dash(cell, sizeof cell, "%.2f", s->cuda_calls_per_request);
        printf(" %6s", cell);
        fmt_or_dash(cell, sizeof cell, "%.2fx", calls_multiple(r, s));
        printf(" %7s", cell);
        fmt_or_dash(cell, sizeof cell, "%.2f", s->misses_per_request);
        printf(" %7s", cell);
        fmt_or_dash(cell, sizeof cell, "%.2f", s->fence_queries_per_miss);
        printf(" %7s\n", cell);
    }
}

static void serve_table(const bench_results *r)
{
    const serve_row *f = &r->serve[0];
    printf("\nserve: %ld measured requests per stream after unmeasured ones (per stream:",
           f->requests / f->streams);
    for (int i = 0; i < r->n_serve; i++)
        if (i == 0 || r->serve[i].streams != r->serve[i - 1].streams)
            printf("%s %ld at %d stream%s", i ? "," : "", r->serve[i].warmup / r->serve[i].streams,
                   r->serve[i].streams, r->serve[i].streams > 1 ? "s" : "");
    printf("), %d repeats: median (min-max)\n", f->repeats);
    printf("%-31s %3s %21s %23s %7s %8s %18s %7s %7s %7s\n", "allocator", "str", "requests/s",
           "p99 us", "p50 us", "peak MiB", "calls /req", "x async", "x cuda", "x pre-");
    printf("%-31s %3s %21s %23s %7s %8s %18s %7s %7s %7s\n", "", "", "", "", "", "", "(min-max)",
           "max", "Malloc", "alloc");
    for (int i = 0; i < r->n_serve; i++) {
        const serve_row *s = &r->serve[i];
        char calls[48] = "-", vmax[16] = "", vmalloc[16] = "", vpre[16] = "", rps[40], p99[40];
        if (s->cuda_calls_per_request >= 0 && s->calls_per_request_spread.min >= 0)
            snprintf(calls, sizeof calls, "%.2f (%.2f-%.2f)", s->cuda_calls_per_request,
                     s->calls_per_request_spread.min, s->calls_per_request_spread.max);
        else if (s->cuda_calls_per_request >= 0)
            snprintf(calls, sizeof calls, "%.2f", s->cuda_calls_per_request);
        double m = multiple(r, s, RAW_MAX), c = multiple(r, s, "cudaMalloc");
        double pre = multiple(r, s, SERVE_PREALLOCATED);
        if (m > 0)
            snprintf(vmax, sizeof vmax, "%.2fx", m);
        if (c > 0)
            snprintf(vmalloc, sizeof vmalloc, "%.2fx", c);
        if (pre > 0)
            snprintf(vpre, sizeof vpre, "%.2fx", pre);
        snprintf(rps, sizeof rps, "%.0f (%.0f-%.0f)", s->requests_per_s.median,
                 s->requests_per_s.min, s->requests_per_s.max);
        snprintf(p99, sizeof p99, "%.0f (%.0f-%.0f)", s->p99_us.median, s->p99_us.min,
                 s->p99_us.max);
        printf("%-31s %3d %21s %23s %7.0f %8.0f %18s %7s %7s %7s", s->allocator, s->streams, rps,
               p99, s->p50_us, (double)s->peak_reserved_bytes / 1048576.0, calls, vmax, vmalloc,
               vpre);
        if (s->failures)
            printf("  %ld FAILED calls: not comparable", s->failures);
        printf("\n");
    }
    serve_calls_table(r);
}

static void ratio_spread(char *buf, size_t len, size_t median, size_t lo, size_t hi, double req)
{
    if (lo == hi)
        snprintf(buf, len, "%.3f", (double)median / req);
    else
        snprintf(buf, len, "%.2f (%.2f-%.2f)", (double)median / req, (double)lo / req,
                 (double)hi / req);
}

static void replay_tables(const bench_results *r)
{
    for (int i = 0; i < r->n_replay; i++) {
        const replay_row *p = &r->replay[i];
        if (i == 0 || strcmp(r->replay[i - 1].workload, p->workload) != 0) {
            printf("\nreplay %s: %ld events, each allocator on a fresh device, %d runs: median "
                   "(min-max); capacity: the smallest device with no failed allocation in %d of %d "
                   "runs (to 1%%)\n",
                   p->workload, p->events, p->repeats, p->repeats, p->repeats);
            printf("%-31s %9s %19s %19s %8s %8s %9s %8s %8s\n", "allocator", "peak req", "held/req",
                   "reserved/req", "calls", "hits", "capacity", "cap/req", "oom");
            printf("%-31s %9s %19s %19s %8s %8s %9s %8s %8s\n", "", "MiB", "", "", "", "", "MiB", "",
                   "reclaims");
        }
        double req = p->peak_requested ? (double)p->peak_requested : 1;
        char calls[24] = "-", hits[24] = "-", cap[24] = "none", capr[24] = "-", oom[24] = "-";
        if (p->cuda_calls >= 0)
            snprintf(calls, sizeof calls, "%lld", p->cuda_calls);
        if (p->hits >= 0)
            snprintf(hits, sizeof hits, "%ld", p->hits);
        if (p->capacity_bytes) {
            snprintf(cap, sizeof cap, "%.0f", (double)p->capacity_bytes / 1048576.0);
            snprintf(capr, sizeof capr, "%.3f", (double)p->capacity_bytes / req);
        }
        if (p->oom_reclaims >= 0)
            snprintf(oom, sizeof oom, "%ld", p->oom_reclaims);
        char held[40], resv[40];
        ratio_spread(held, sizeof held, p->peak_held, p->peak_held_min, p->peak_held_max, req);
        ratio_spread(resv, sizeof resv, p->peak_reserved, p->peak_reserved_min,
                     p->peak_reserved_max, req);
        printf("%-31s %9.1f %19s %19s %8s %8s %9s %8s %8s", p->allocator,
               (double)p->peak_requested / 1048576.0, held, resv, calls, hits, cap, capr, oom);
        if (p->failures)
            printf("  %ld FAILED allocations on a %.0f MiB device", p->failures,
                   (double)p->device_bytes / 1048576.0);
        printf("\n");
    }
}

void report_table(const bench_results *r, const bench_env *env)
{
    printf("sp-bench on %s (%s), %s%s\n", env->device, env->runtime, env->machine,
           strcmp(env->runtime, "cudasim") == 0
               ? "\n  cudasim: CPU timings of host-side work and synchronization structure, not "
                 "device timings"
               : "");
    if (r->n_serve)
        serve_table(r);
    if (r->n_hotpath) {
        printf("\nhotpath: ns per alloc+free pair on one stream per thread, beside glibc "
               "malloc+free; streampool's driver calls per 1,000 pairs\n");
        printf("(medians of %d rounds, each measuring both; the ratio is the median of the rounds' "
               "ratios, with their min-max)\n", r->hotpath[0].repeats);
        printf("%12s %8s %14s %14s %10s %19s %10s\n", "size", "threads", "streampool ns",
               "malloc ns", "ratio", "(min-max)", "driver");
        for (int i = 0; i < r->n_hotpath; i++) {
            const hotpath_row *h = &r->hotpath[i];
            char spread[40];
            snprintf(spread, sizeof spread, "(%.3g-%.3g)", h->ratio_min, h->ratio_max);
            printf("%12zu %8d %14.1f %14.1f %9.3gx %19s %10.1f\n", h->size, h->threads,
                   h->ns_per_pair, h->malloc_ns_per_pair, h->ratio_median, spread,
                   h->driver_calls_per_1000_pairs);
        }
    }
    if (r->n_calls) {
        printf("\ncalls: CUDA calls per 1,000 alloc+free pairs of 64 KiB on one stream, steady state\n");
        for (int i = 0; i < r->n_calls; i++)
            printf("%-32s %10.0f\n", r->calls[i].allocator, r->calls[i].calls_per_1000_pairs);
    }
    if (r->n_scaling) {
        printf("\nscaling: ns per pair and streampool's held memory as live allocations, streams "
               "and pools grow\n");
        printf("%-18s %10s %10s %12s %18s\n", "dimension", "value", "ns/pair", "held KiB",
               "largest/smallest");
        for (int i = 0; i < r->n_scaling; i++) {
            const scaling_row *s = &r->scaling[i];
            bool last = i + 1 == r->n_scaling || strcmp(r->scaling[i + 1].dimension, s->dimension) != 0;
            char ratio[16] = "";
            if (last) {
                int first = i;
                while (first > 0 && strcmp(r->scaling[first - 1].dimension, s->dimension) == 0)
                    first--;
                snprintf(ratio, sizeof ratio, "%.2fx", s->ns_per_pair / r->scaling[first].ns_per_pair);
            }
            printf("%-18s %10ld %10.1f %12.0f %18s\n", s->dimension, s->value, s->ns_per_pair,
                   (double)s->held_bytes / 1024.0, ratio);
        }
    }
    if (r->n_replay)
        replay_tables(r);
    fflush(stdout);
}

/* ---- JSON ---- */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_spread(FILE *f, const char *name, spread s, int decimals)
{
    fprintf(f, "\"%s\": {\"median\": %.*f, \"min\": %.*f, \"max\": %.*f}", name, decimals, s.median,
            decimals, s.min, decimals, s.max);
}

/* A figure that is never negative; < 0 stands for "not available": null. */
static void json_number(FILE *f, double v)
{
    if (v >= 0)
        fprintf(f, "%.4f", v);
    else
        fprintf(f, "null");
}

static void json_ratio(FILE *f, const char *name, double v)
{
    if (v > 0)
        fprintf(f, ", \"%s\": %.4f", name, v);
    else
        fprintf(f, ", \"%s\": null", name);
}

int report_json(const bench_results *r, const bench_env *env, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"schema_version\": %d, \"device\": ", BENCH_JSON_SCHEMA_VERSION);
    json_string(f, env->device);
    fprintf(f, ", \"runtime\": ");
    json_string(f, env->runtime);
    fprintf(f, ", \"machine\": ");
    json_string(f, env->machine);
    fprintf(f, ",\n \"serve\": [");
    for (int i = 0; i < r->n_serve; i++) {
        const serve_row *s = &r->serve[i];
        fprintf(f, "%s\n  {\"allocator\": ", i ? "," : "");
        json_string(f, s->allocator);
        fprintf(f, ", \"streams\": %d, \"requests\": %ld, \"warmup_requests\": %ld, \"repeats\": %d, ",
                s->streams, s->requests, s->warmup, s->repeats);
        json_spread(f, "requests_per_s", s->requests_per_s, 1);
        fprintf(f, ", ");
        json_spread(f, "p99_us", s->p99_us, 1);
        fprintf(f, ", \"p50_us\": %.1f, \"peak_reserved_bytes\": %zu, \"failures\": %ld, "
                   "\"cuda_calls_per_request\": ",
                s->p50_us, s->peak_reserved_bytes, s->failures);
        json_number(f, s->cuda_calls_per_request);
        if (s->calls_per_request_spread.min >= 0)
            fprintf(f, ", \"cuda_calls_per_request_range\": {\"median\": %.4f, \"min\": %.4f, "
                       "\"max\": %.4f}",
                    s->calls_per_request_spread.median, s->calls_per_request_spread.min,
                    s->calls_per_request_spread.max);
        fprintf(f, ", \"driver_allocs_per_request\": ");
        json_number(f, s->driver_allocs_per_request);
        fprintf(f, ", \"calls_per_request_by_api\": ");
        if (s->cuda_calls_per_request >= 0) {
            for (int a = 0; a < API_COUNT; a++) {
                fprintf(f, "%s\"%s\": ", a ? ", " : "{", call_api_name((call_api)a));
                json_number(f, s->calls_per_api[a]);
            }
            fprintf(f, "}");
        } else {
            fprintf(f, "null");
        }
        fprintf(f, ", \"calls_vs_async_threshold_max\": ");
        json_number(f, calls_multiple(r, s));
        fprintf(f, ", \"misses_per_request\": ");
        json_number(f, s->misses_per_request);
        fprintf(f, ", \"fence_queries_per_miss\": ");
        json_number(f, s->fence_queries_per_miss);
        json_ratio(f, "vs_async_threshold_max", multiple(r, s, RAW_MAX));
        json_ratio(f, "vs_cuda_malloc", multiple(r, s, "cudaMalloc"));
        json_ratio(f, "vs_preallocated", multiple(r, s, SERVE_PREALLOCATED));
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"hotpath\": [");
    for (int i = 0; i < r->n_hotpath; i++) {
        const hotpath_row *h = &r->hotpath[i];
        fprintf(f, "%s\n  {\"size\": %zu, \"threads\": %d, \"repeats\": %d, "
                   "\"ns_per_pair\": %.2f, \"malloc_ns_per_pair\": %.2f, "
                   "\"ratio\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}, "
                   "\"driver_calls_per_1000_pairs\": %.2f}",
                i ? "," : "", h->size, h->threads, h->repeats, h->ns_per_pair,
                h->malloc_ns_per_pair, h->ratio_median, h->ratio_min, h->ratio_max,
                h->driver_calls_per_1000_pairs);
    }
    fprintf(f, "],\n \"scaling\": [");
    for (int i = 0; i < r->n_scaling; i++) {
        const scaling_row *s = &r->scaling[i];
        fprintf(f, "%s\n  {\"dimension\": \"%s\", \"value\": %ld, \"ns_per_pair\": %.2f, "
                   "\"held_bytes\": %zu}",
                i ? "," : "", s->dimension, s->value, s->ns_per_pair, s->held_bytes);
    }
    fprintf(f, "],\n \"calls\": [");
    for (int i = 0; i < r->n_calls; i++) {
        fprintf(f, "%s\n  {\"allocator\": ", i ? "," : "");
        json_string(f, r->calls[i].allocator);
        fprintf(f, ", \"calls_per_1000_pairs\": %.0f}", r->calls[i].calls_per_1000_pairs);
    }
    fprintf(f, "],\n \"replay\": [");
    for (int i = 0; i < r->n_replay; i++) {
        const replay_row *p = &r->replay[i];
        fprintf(f, "%s\n  {\"allocator\": ", i ? "," : "");
        json_string(f, p->allocator);
        fprintf(f, ", \"workload\": ");
        json_string(f, p->workload);
        fprintf(f, ", \"events\": %ld, \"repeats\": %d, \"device_bytes\": %zu, \"failures\": %ld, "
                   "\"peak_requested_bytes\": %zu, \"peak_held_bytes\": %zu, "
                   "\"peak_held_bytes_min\": %zu, \"peak_held_bytes_max\": %zu, "
                   "\"peak_reserved_bytes\": %zu, \"peak_reserved_bytes_min\": %zu, "
                   "\"peak_reserved_bytes_max\": %zu, \"cuda_calls\": ",
                p->events, p->repeats, p->device_bytes, p->failures, p->peak_requested,
                p->peak_held, p->peak_held_min, p->peak_held_max, p->peak_reserved,
                p->peak_reserved_min, p->peak_reserved_max);
        if (p->cuda_calls >= 0)
            fprintf(f, "%lld", p->cuda_calls);
        else
            fprintf(f, "null");
        fprintf(f, ", \"hits\": ");
        if (p->hits >= 0)
            fprintf(f, "%ld", p->hits);
        else
            fprintf(f, "null");
        fprintf(f, ", \"capacity_bytes\": ");
        if (p->capacity_bytes)
            fprintf(f, "%zu, \"capacity_failed_bytes\": %zu", p->capacity_bytes,
                    p->capacity_failed_bytes);
        else
            fprintf(f, "null, \"capacity_failed_bytes\": null");
        fprintf(f, ", \"oom_reclaims\": ");
        if (p->oom_reclaims >= 0)
            fprintf(f, "%ld}", p->oom_reclaims);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- SVG ---- */

static const char *const colors[] = {"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f"};
enum { N_COLORS = sizeof colors / sizeof colors[0] };
enum { PANEL_W = 500, PANEL_H = 380, PLOT_W = 400, PLOT_H = 270, PLOT_LEFT = 70, PLOT_TOP = 50 };

typedef struct {
    double x, y, lo, hi; /* lo/hi: the spread (whiskers); equal to y when none */
} point;

typedef struct {
    const char *name;
    point p[64];
    int n;
} series;

static void svg_text(FILE *f, double x, double y, int size, const char *anchor, const char *fill,
                     const char *text)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\" fill=\"%s\">", x,
            y, size, anchor, fill);
    for (; *text; text++) {
        if (*text == '<')
            fputs("&lt;", f);
        else if (*text == '&')
            fputs("&amp;", f);
        else
            fputc(*text, f);
    }
    fputs("</text>\n", f);
}

/* Lines on log-log axes (x base 2), one per series, with whiskers for the spread; with
 * `linear`, the y axis is linear from the smallest to the largest value, with five ticks: for
 * ratios near 1, where a log axis of tens of percent shows nothing. */
static void svg_plot(FILE *f, double ox, double oy, const char *title, const char *xlabel,
                     const series *s, int ns, bool linear);

static void svg_lines(FILE *f, double ox, double oy, const char *title, const char *xlabel,
                      const series *s, int ns)
{
    svg_plot(f, ox, oy, title, xlabel, s, ns, false);
}

static void svg_plot(FILE *f, double ox, double oy, const char *title, const char *xlabel,
                     const series *s, int ns, bool linear)
{
    double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            const point *p = &s[k].p[i];
            if (p->y <= 0 || p->lo <= 0)
                continue;
            xmin = fmin(xmin, p->x), xmax = fmax(xmax, p->x);
            ymin = fmin(ymin, p->lo), ymax = fmax(ymax, p->hi);
        }
    if (xmax <= 0)
        return;
    double lo = floor(log10(ymin)), hi = ceil(log10(ymax));
    if (linear) { /* a margin of a twentieth of the range, and never a flat range */
        double m = (ymax - ymin) / 20;
        lo = ymin - (m > 0 ? m : 0.05);
        hi = ymax + (m > 0 ? m : 0.05);
    }
    if (hi <= lo)
        hi = lo + 1;
    double sx = xmax > xmin ? log2(xmax / xmin) : 1;
    double L = ox + PLOT_LEFT, T = oy + PLOT_TOP;
#define X(v) (L + (xmax > xmin ? log2((v) / xmin) / sx : 0.5) * PLOT_W)
#define Y(v) (T + PLOT_H - ((linear ? (v) : log10(v)) - lo) / (hi - lo) * PLOT_H)
    svg_text(f, L, oy + 30, 14, "start", "#000", title);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n",
            L, T, PLOT_W, PLOT_H);
    for (int t = 0; linear && t <= 4; t++) {
        char label[16];
        double v = lo + (hi - lo) * t / 4;
        snprintf(label, sizeof label, "%.2fx", v);
        svg_text(f, L - 4, Y(v) + 4, 11, "end", "#000", label);
    }
    for (double d = lo; !linear && d <= hi; d++) {
        char label[16];
        snprintf(label, sizeof label, "1e%.0f", d);
        svg_text(f, L - 4, Y(pow(10, d)) + 4, 11, "end", "#000", label);
    }
    for (double x = xmin; x <= xmax * 1.0001; x *= xmax / xmin > 64 ? 4 : 2) {
        char label[24];
        if (x >= 1048576)
            snprintf(label, sizeof label, "%.0fM", x / 1048576);
        else if (x >= 1024)
            snprintf(label, sizeof label, "%.0fK", x / 1024);
        else
            snprintf(label, sizeof label, "%.0f", x);
        svg_text(f, X(x), T + PLOT_H + 16, 11, "middle", "#000", label);
        if (xmax <= xmin)
            break;
    }
    svg_text(f, L + PLOT_W / 2.0, T + PLOT_H + 34, 12, "middle", "#000", xlabel);
    for (int k = 0; k < ns; k++) {
        const char *c = colors[k % N_COLORS];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (int i = 0; i < s[k].n; i++)
            if (s[k].p[i].y > 0)
                fprintf(f, "%.1f,%.1f ", X(s[k].p[i].x), Y(s[k].p[i].y));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < s[k].n; i++) {
            const point *p = &s[k].p[i];
            if (p->y > 0 && p->lo > 0 && p->hi > p->lo)
                fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n",
                        X(p->x), X(p->x), Y(p->lo), Y(p->hi), c);
        }
        svg_text(f, L + 8, T + 16 + 15.0 * k, 12, "start", c, s[k].name);
    }
#undef X
#undef Y
}

/* Grouped bars, linear axis from 0: one group per workload, one bar per allocator. */
static void svg_replay_bars(FILE *f, const bench_results *r, double ox, double oy)
{
    const char *workloads[16];
    int nw = 0;
    double vmax = 1;
    for (int i = 0; i < r->n_replay; i++) {
        const replay_row *p = &r->replay[i];
        if (nw == 0 || strcmp(workloads[nw - 1], p->workload) != 0) {
            if (nw == 16)
                break;
            workloads[nw++] = p->workload;
        }
        if (p->peak_requested)
            vmax = fmax(vmax, (double)p->peak_held / (double)p->peak_requested);
    }
    vmax = ceil(vmax * 2) / 2;
    double L = ox + PLOT_LEFT, T = oy + PLOT_TOP, gw = (double)PLOT_W / nw;
    svg_text(f, L, oy + 30, 14, "start", "#000",
             "replay: peak held / peak requested (lower is better; 1 is ideal)");
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n",
            L, T, PLOT_W, PLOT_H);
    for (double v = 0; v <= vmax + 1e-9; v += vmax > 4 ? 1 : 0.5) {
        char label[16];
        snprintf(label, sizeof label, "%.1f", v);
        double y = T + PLOT_H - v / vmax * PLOT_H;
        svg_text(f, L - 4, y + 4, 11, "end", "#000", label);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                L + PLOT_W, y, y);
    }
    for (int w = 0; w < nw; w++) {
        svg_text(f, L + gw * (w + 0.5), T + PLOT_H + 16, 11, "middle", "#000", workloads[w]);
        for (int i = 0; i < r->n_replay; i++) {
            const replay_row *p = &r->replay[i];
            if (strcmp(p->workload, workloads[w]) != 0 || !p->peak_requested)
                continue;
            int k = 0;
            while (k < ALLOC_KIND_COUNT && strcmp(bench_alloc_name((alloc_kind)k), p->allocator))
                k++;
            double bw = gw * 0.8 / ALLOC_KIND_COUNT, v = (double)p->peak_held / (double)p->peak_requested;
            double x = L + gw * w + gw * 0.1 + bw * k, h = v / vmax * PLOT_H;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                    x, T + PLOT_H - h, bw * 0.9, h, colors[k]);
        }
    }
    for (int k = 0; k < ALLOC_KIND_COUNT; k++)
        svg_text(f, L + 8, T + 16 + 15.0 * k, 12, "start", colors[k],
                 bench_alloc_name((alloc_kind)k));
}

int report_svg(const bench_results *r, const bench_env *env, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int panels = (r->n_serve ? 4 : 0) + (r->n_replay ? 1 : 0) + (r->n_hotpath ? 1 : 0);
    int rows = (panels + 1) / 2, width = 2 * PANEL_W, height = rows * PANEL_H + 60;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            width, height, width, height);
    char label[700];
    snprintf(label, sizeof label, "sp-bench on %s (%s), %s", env->device, env->runtime, env->machine);
    svg_text(f, 20, 24, 14, "start", "#000", label);
    if (strcmp(env->runtime, "cudasim") == 0)
        svg_text(f, 20, 42, 11, "start", "#555",
                 "cudasim: CPU time of host-side work and synchronization structure, not device time");
    int slot = 0;
#define ORIGIN_X ((double)(slot % 2) * PANEL_W)
#define ORIGIN_Y (50.0 + (double)(slot / 2) * PANEL_H)
    if (r->n_serve) {
        /* one line per serve row, in the variants' order */
        static series rps[SERVE_MAX_VARIANTS], p99[SERVE_MAX_VARIANTS];
        static series peak[SERVE_MAX_VARIANTS], calls[SERVE_MAX_VARIANTS];
        int nv = serve_variant_count();
        for (int k = 0; k < nv; k++) {
            rps[k] = (series){.name = serve_variant_label(k)};
            p99[k] = peak[k] = calls[k] = rps[k];
        }
        for (int i = 0; i < r->n_serve; i++) {
            const serve_row *s = &r->serve[i];
            double mib = (double)s->peak_reserved_bytes / 1048576.0, c = s->cuda_calls_per_request;
            for (int k = 0; k < nv; k++)
                if (strcmp(s->allocator, rps[k].name) == 0 && rps[k].n < 64) {
                    rps[k].p[rps[k].n++] = (point){s->streams, s->requests_per_s.median,
                                                   s->requests_per_s.min, s->requests_per_s.max};
                    p99[k].p[p99[k].n++] = (point){s->streams, s->p99_us.median, s->p99_us.min,
                                                   s->p99_us.max};
                    peak[k].p[peak[k].n++] = (point){s->streams, mib, mib, mib};
                    calls[k].p[calls[k].n++] = (point){s->streams, c, c, c};
                }
        }
        svg_lines(f, ORIGIN_X, ORIGIN_Y, "serve: requests/s, median and min-max (higher is better)",
                  "streams", rps, nv);
        slot++;
        svg_lines(f, ORIGIN_X, ORIGIN_Y, "serve: p99 latency, us (lower is better)", "streams",
                  p99, nv);
        slot++;
        /* as a multiple of raw cudaMallocAsync (threshold max)'s at the same stream count */
        for (int k = 0; k < nv; k++)
            for (int i = 0; i < peak[k].n; i++) {
                double raw = 0;
                for (int j = 0; j < r->n_serve; j++)
                    if (strcmp(r->serve[j].allocator, RAW_MAX) == 0 &&
                        r->serve[j].streams == (int)peak[k].p[i].x)
                        raw = (double)r->serve[j].peak_reserved_bytes / 1048576.0;
                double x = raw > 0 ? peak[k].p[i].y / raw : 0;
                peak[k].p[i].y = peak[k].p[i].lo = peak[k].p[i].hi = x;
            }
        svg_plot(f, ORIGIN_X, ORIGIN_Y,
                 "serve: peak reserved over raw cudaMallocAsync (threshold max)'s (lower is better)",
                 "streams", peak, nv, true);
        slot++;
        svg_lines(f, ORIGIN_X, ORIGIN_Y,
                  "serve: CUDA calls per request by the allocator (0: not drawn)", "streams",
                  calls, nv);
        slot++;
    }
    if (r->n_replay) {
        svg_replay_bars(f, r, ORIGIN_X, ORIGIN_Y);
        slot++;
    }
    if (r->n_hotpath) {
        static series hp[4];
        hp[0] = (series){.name = "streampool, 1 thread"};
        hp[1] = (series){.name = "streampool, 2 threads"};
        hp[2] = (series){.name = "glibc malloc, 1 thread"};
        hp[3] = (series){.name = "glibc malloc, 2 threads"};
        for (int i = 0; i < r->n_hotpath; i++) {
            const hotpath_row *h = &r->hotpath[i];
            int t = h->threads == 1 ? 0 : 1;
            series *a = &hp[t], *m = &hp[2 + t];
            if (a->n < 64) {
                a->p[a->n++] = (point){(double)h->size, h->ns_per_pair, h->ns_per_pair, h->ns_per_pair};
                m->p[m->n++] = (point){(double)h->size, h->malloc_ns_per_pair,
                                       h->malloc_ns_per_pair, h->malloc_ns_per_pair};
            }
        }
        svg_lines(f, ORIGIN_X, ORIGIN_Y, "hotpath: ns per alloc+free pair (lower is better)",
                  "bytes", hp, 4);
        slot++;
    }
#undef ORIGIN_X
#undef ORIGIN_Y
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}
