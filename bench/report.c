/* sp-bench output: a table on stdout, the same rows as JSON, and an SVG plot of requests/s and
 * p99 latency by stream count per allocator (written directly: no plotting dependency). */
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

static void serve_table(const bench_results *r)
{
    printf("\nserve: requests/s, latency, peak reserved, CUDA calls per request\n");
    printf("%-32s %7s %11s %10s %10s %12s %10s %12s\n", "allocator", "streams", "requests/s",
           "p50 us", "p99 us", "peak MiB", "calls/req", "streampool x");
    for (int i = 0; i < r->n_serve; i++) {
        const serve_row *s = &r->serve[i];
        const serve_row *sp = find_serve(r, "streampool", s->streams);
        char calls[16] = "-", ratio[16] = "";
        if (s->cuda_calls_per_request >= 0)
            snprintf(calls, sizeof calls, "%.2f", s->cuda_calls_per_request);
        if (sp && sp != s)
            snprintf(ratio, sizeof ratio, "%.2fx", sp->requests_per_s / s->requests_per_s);
        printf("%-32s %7d %11.0f %10.1f %10.1f %12.1f %10s %12s\n", s->allocator, s->streams,
               s->requests_per_s, s->p50_us, s->p99_us, (double)s->peak_reserved_bytes / 1048576.0,
               calls, ratio);
    }
}

void report_table(const bench_results *r, const char *device, const char *runtime)
{
    printf("sp-bench on %s (%s)%s\n", device, runtime,
           strcmp(runtime, "cudasim") == 0
               ? ": CPU timings of host-side work and synchronization structure, not device timings"
               : "");
    if (r->n_serve)
        serve_table(r);
    if (r->n_hotpath) {
        printf("\nhotpath: ns per alloc+free pair on one stream, beside glibc malloc+free\n");
        printf("%12s %8s %14s %14s %10s\n", "size", "threads", "streampool ns", "malloc ns", "ratio");
        for (int i = 0; i < r->n_hotpath; i++) {
            const hotpath_row *h = &r->hotpath[i];
            printf("%12zu %8d %14.1f %14.1f %9.2fx\n", h->size, h->threads, h->ns_per_pair,
                   h->malloc_ns_per_pair, h->ns_per_pair / h->malloc_ns_per_pair);
        }
    }
    if (r->n_calls) {
        printf("\ncalls: CUDA calls per 1,000 alloc+free pairs of 64 KiB on one stream, steady state\n");
        for (int i = 0; i < r->n_calls; i++)
            printf("%-32s %10.0f\n", r->calls[i].allocator, r->calls[i].calls_per_1000_pairs);
    }
    if (r->n_scaling) {
        printf("\nscaling: ns per pair as live allocations, streams and pools grow\n");
        printf("%-18s %10s %10s %18s\n", "dimension", "value", "ns/pair", "largest/smallest");
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
            printf("%-18s %10ld %10.1f %18s\n", s->dimension, s->value, s->ns_per_pair, ratio);
        }
    }
    if (r->n_replay) {
        printf("\nreplay: memory efficiency on an allocation log\n");
        printf("%-18s %9s %14s %14s %14s %10s %10s %10s\n", "allocator", "events", "peak req MiB",
               "held/req", "reserved/req", "hits", "calls", "log");
        for (int i = 0; i < r->n_replay; i++) {
            const replay_row *p = &r->replay[i];
            char hits[24] = "-", calls[24] = "-";
            if (p->hits >= 0)
                snprintf(hits, sizeof hits, "%ld", p->hits);
            if (p->cuda_calls >= 0)
                snprintf(calls, sizeof calls, "%lld", p->cuda_calls);
            double req = p->peak_requested ? (double)p->peak_requested : 1;
            printf("%-18s %9ld %14.1f %14.3f %14.3f %10s %10s %s\n", p->allocator, p->events,
                   (double)p->peak_requested / 1048576.0, (double)p->peak_held / req,
                   (double)p->peak_reserved / req, hits, calls, p->log);
        }
    }
    fflush(stdout);
}

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

int report_json(const bench_results *r, const char *device, const char *runtime, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"device\": ");
    json_string(f, device);
    fprintf(f, ", \"runtime\": ");
    json_string(f, runtime);
    fprintf(f, ",\n \"serve\": [");
    for (int i = 0; i < r->n_serve; i++) {
        const serve_row *s = &r->serve[i];
        fprintf(f, "%s\n  {\"allocator\": ", i ? "," : "");
        json_string(f, s->allocator);
        fprintf(f, ", \"streams\": %d, \"requests\": %ld, \"requests_per_s\": %.1f, \"p50_us\": %.1f, "
                   "\"p99_us\": %.1f, \"peak_reserved_bytes\": %zu, \"cuda_calls_per_request\": ",
                s->streams, s->requests, s->requests_per_s, s->p50_us, s->p99_us,
                s->peak_reserved_bytes);
        if (s->cuda_calls_per_request >= 0)
            fprintf(f, "%.3f}", s->cuda_calls_per_request);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "],\n \"hotpath\": [");
    for (int i = 0; i < r->n_hotpath; i++) {
        const hotpath_row *h = &r->hotpath[i];
        fprintf(f, "%s\n  {\"size\": %zu, \"threads\": %d, \"ns_per_pair\": %.2f, \"malloc_ns_per_pair\": %.2f}",
                i ? "," : "", h->size, h->threads, h->ns_per_pair, h->malloc_ns_per_pair);
    }
    fprintf(f, "],\n \"scaling\": [");
    for (int i = 0; i < r->n_scaling; i++) {
        const scaling_row *s = &r->scaling[i];
        fprintf(f, "%s\n  {\"dimension\": \"%s\", \"value\": %ld, \"ns_per_pair\": %.2f}",
                i ? "," : "", s->dimension, s->value, s->ns_per_pair);
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
        fprintf(f, ", \"log\": ");
        json_string(f, p->log);
        fprintf(f, ", \"events\": %ld, \"peak_requested_bytes\": %zu, \"peak_held_bytes\": %zu, "
                   "\"peak_reserved_bytes\": %zu, \"hits\": ",
                p->events, p->peak_requested, p->peak_held, p->peak_reserved);
        if (p->hits >= 0)
            fprintf(f, "%ld", p->hits);
        else
            fprintf(f, "null");
        fprintf(f, ", \"cuda_calls\": ");
        if (p->cuda_calls >= 0)
            fprintf(f, "%lld}", p->cuda_calls);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* One panel: x = streams (log scale), y = value (log scale), a line per allocator. */
static void svg_panel(FILE *f, const bench_results *r, double ox, const char *title,
                      double (*value)(const serve_row *))
{
    static const char *const colors[] = {"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"};
    const double w = 420, h = 300, left = 60, top = 40;
    double vmin = INFINITY, vmax = 0;
    int smin = 1 << 30, smax = 0;
    for (int i = 0; i < r->n_serve; i++) {
        double v = value(&r->serve[i]);
        vmin = fmin(vmin, v);
        vmax = fmax(vmax, v);
        smin = r->serve[i].streams < smin ? r->serve[i].streams : smin;
        smax = r->serve[i].streams > smax ? r->serve[i].streams : smax;
    }
    double lo = floor(log10(vmin)), hi = ceil(log10(vmax));
    if (hi <= lo)
        hi = lo + 1;
    double sx = smax > smin ? log2((double)smax / smin) : 1;
#define X(s) (ox + left + (smax > smin ? log2((double)(s) / smin) / sx : 0.5) * w)
#define Y(v) (top + h - (log10(v) - lo) / (hi - lo) * h)
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s</text>\n", ox + left, title);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n",
            ox + left, top, w, h);
    for (double d = lo; d <= hi; d++)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">1e%.0f</text>\n",
                ox + left - 4, Y(pow(10, d)) + 4, d);
    for (int s = smin; s <= smax; s *= 2)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%d</text>\n",
                X(s), top + h + 16, s);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">streams</text>\n",
            ox + left + w / 2, top + h + 34);
    for (int k = 0; k < ALLOC_KIND_COUNT; k++) {
        const char *name = bench_alloc_name((alloc_kind)k);
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[k]);
        for (int i = 0; i < r->n_serve; i++)
            if (strcmp(r->serve[i].allocator, name) == 0)
                fprintf(f, "%.1f,%.1f ", X(r->serve[i].streams), Y(value(&r->serve[i])));
        fprintf(f, "\"/>\n");
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" fill=\"%s\">%s</text>\n",
                ox + left + 8, top + 16 + 15.0 * k, colors[k], name);
    }
#undef X
#undef Y
}

static double rps(const serve_row *s) { return s->requests_per_s; }
static double p99(const serve_row *s) { return s->p99_us; }

int report_svg(const bench_results *r, const char *device, const char *path)
{
    if (!r->n_serve)
        return 0;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"420\" "
               "font-family=\"sans-serif\">\n<rect width=\"1000\" height=\"420\" fill=\"white\"/>\n");
    svg_panel(f, r, 0, "requests/s (higher is better)", rps);
    svg_panel(f, r, 500, "p99 latency, us (lower is better)", p99);
    fprintf(f, "<text x=\"60\" y=\"410\" font-size=\"11\" fill=\"#555\">sp-bench serve on %s</text>\n", device);
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}
