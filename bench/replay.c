/* sp-bench replay: replays an allocation log in RMM's CSV format (logging_resource_adaptor:
 * "Thread,Time,Action,Pointer,Size,Stream", actions "allocate" and "free"; an optional seventh
 * column names the tenant, as streampool's own trace writes its pool: one streampool pool per
 * tenant) against each allocator, and reports memory efficiency: peak held and peak reserved
 * over peak requested, CUDA calls, and the smallest device capacity that replays the log without
 * a failed allocation. Every allocator starts on a fresh device (cudasim's reset), so none pays
 * for memory the one before kept. The whole log is checked before anything runs; a bad line is
 * reported by its number. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct {
    bool is_alloc;
    int stream;        /* index into replay_log.streams */
    int tenant;        /* index into replay_log.tenants */
    uint64_t ptr;
    size_t size;
} event;

typedef struct {
    event *ev;
    long n, cap;
    uint64_t *streams; /* distinct log stream ids, in order of appearance */
    int n_streams, cap_streams;
    char tenants[BENCH_MAX_TENANTS][32]; /* distinct seventh-column values; "" if none */
    int n_tenants;
} replay_log;

/* ---- a map from log pointers to live entries (open addressing, grows) ---- */

typedef struct {
    uint64_t key;  /* 0: empty (a log pointer of 0 is rejected) */
    void *real;
    size_t size;
    int stream;
    int tenant;    /* whose pool frees it */
} live_slot;

typedef struct {
    live_slot *s;
    size_t cap, len;
} live_map;

static size_t slot_of(const live_map *m, uint64_t key)
{
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);
    while (m->s[i].key && m->s[i].key != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static live_slot *live_find(live_map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    live_slot *s = &m->s[slot_of(m, key)];
    return s->key ? s : NULL;
}

static live_slot *live_insert(live_map *m, uint64_t key)
{
    if ((m->len + 1) * 2 > m->cap) {
        live_map bigger = {calloc(m->cap ? m->cap * 2 : 1024, sizeof(live_slot)),
                           m->cap ? m->cap * 2 : 1024, 0};
        if (!bigger.s)
            return NULL;
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].key) {
                bigger.s[slot_of(&bigger, m->s[i].key)] = m->s[i];
                bigger.len++;
            }
        free(m->s);
        *m = bigger;
    }
    live_slot *s = &m->s[slot_of(m, key)];
    if (!s->key)
        m->len++;
    s->key = key;
    return s;
}

static void live_remove(live_map *m, uint64_t key)
{
    size_t i = slot_of(m, key), mask = m->cap - 1;
    if (!m->s[i].key)
        return;
    m->s[i].key = 0;
    m->len--;
    for (size_t j = (i + 1) & mask; m->s[j].key; j = (j + 1) & mask) {
        live_slot moved = m->s[j];
        m->s[j].key = 0;
        m->len--;
        *live_insert(m, moved.key) = moved;
    }
}

/* ---- parsing ---- */

/* A pointer, size or stream id: hexadecimal after 0x (RMM writes pointers and streams so),
 * otherwise decimal; a leading zero is not octal. Only digits: strtoull would skip leading
 * blanks and negate a '-' (" -1" would read as 2^64-1). */
static bool parse_u64(const char *s, uint64_t *out)
{
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    if (!(base == 16 ? isxdigit((unsigned char)*s) : isdigit((unsigned char)*s)))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static int stream_index(replay_log *log, uint64_t id)
{
    for (int i = 0; i < log->n_streams; i++)
        if (log->streams[i] == id)
            return i;
    if (log->n_streams == log->cap_streams) {
        int cap = log->cap_streams ? log->cap_streams * 2 : 16;
        uint64_t *grown = realloc(log->streams, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        log->streams = grown;
        log->cap_streams = cap;
    }
    log->streams[log->n_streams] = id;
    return log->n_streams++;
}

static int tenant_index(replay_log *log, const char *name)
{
    for (int i = 0; i < log->n_tenants; i++)
        if (strcmp(log->tenants[i], name) == 0)
            return i;
    if (log->n_tenants == BENCH_MAX_TENANTS || strlen(name) >= sizeof log->tenants[0])
        return -1;
    snprintf(log->tenants[log->n_tenants], sizeof log->tenants[0], "%s", name);
    return log->n_tenants++;
}

static void report(const char *path, long lineno, const char *why)
{
    fprintf(stderr, "replay: %s: line %ld: %s\n", path, lineno, why);
}

/* Reads the whole log, checking every line before anything runs. Lines are read whole
 * (getline), whatever their length, so a NUL byte inside one is seen for what it is. */
static int load_log(const char *path, replay_log *log)
{
    static const char header[] = "Thread,Time,Action,Pointer,Size,Stream";
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t line_cap = 0;
    long lineno = 0;
    int rc = 0;
    live_map live = {0};
    for (ssize_t got; rc == 0 && (got = getline(&line, &line_cap, f)) >= 0;) {
        size_t len = (size_t)got;
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (memchr(line, '\0', len)) {
            report(path, lineno, "contains a NUL byte");
            rc = 2;
            break;
        }
        if (lineno == 1) {
            if (strncmp(line, header, sizeof header - 1) != 0 ||
                (line[sizeof header - 1] != '\0' && line[sizeof header - 1] != ',')) {
                report(path, lineno, "expected the header Thread,Time,Action,Pointer,Size,Stream");
                rc = 2;
            }
            continue;
        }
        if (!line[0])
            continue;
        char *field[8] = {0};
        int nf = 0;
        for (char *p = line, *c; nf < 8; p = c + 1) {
            field[nf++] = p;
            c = strchr(p, ',');
            if (!c)
                break;
            *c = '\0';
        }
        event e = {0};
        uint64_t size, stream = 0;
        const char *why = NULL;
        if (nf < 6)
            why = "expected 6 fields";
        else if (strcmp(field[2], "allocate") == 0)
            e.is_alloc = true;
        else if (strcmp(field[2], "free") != 0)
            why = "action is neither allocate nor free";
        if (!why && (!parse_u64(field[3], &e.ptr) || e.ptr == 0))
            why = "bad pointer";
        else if (!why && !parse_u64(field[4], &size))
            why = "bad size (a decimal byte count, or hexadecimal after 0x)";
        else if (!why && !parse_u64(field[5], &stream))
            why = "bad stream";
        else if (!why && (e.tenant = tenant_index(log, nf > 6 ? field[6] : "")) < 0)
            why = "too many tenants, or a tenant name over 31 characters";
        if (!why) {
            e.size = (size_t)size;
            live_slot *s = live_find(&live, e.ptr);
            if (e.is_alloc && s)
                why = "allocates a pointer that is still live";
            else if (!e.is_alloc && !s)
                why = "frees a pointer that is not live";
            else if (!e.is_alloc && s->tenant != e.tenant)
                why = "frees a pointer that another tenant allocated";
            else if (e.is_alloc && !(s = live_insert(&live, e.ptr)))
                why = "out of host memory";
            else if (e.is_alloc)
                s->tenant = e.tenant;
            else
                live_remove(&live, e.ptr);
        }
        if (!why && log->n == log->cap) {
            long cap = log->cap ? log->cap * 2 : 4096;
            event *grown = realloc(log->ev, (size_t)cap * sizeof *grown);
            if (grown) {
                log->ev = grown;
                log->cap = cap;
            } else {
                why = "out of host memory";
            }
        }
        if (!why && (e.stream = stream_index(log, stream)) < 0)
            why = "out of host memory";
        if (why) {
            report(path, lineno, why);
            rc = 2;
            break;
        }
        log->ev[log->n++] = e;
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "replay: %s: line %ld: %s\n", path, lineno + 1, strerror(errno));
        rc = 2;
    } else if (rc == 0 && lineno == 0) {
        report(path, 1, "expected the header Thread,Time,Action,Pointer,Size,Stream");
        rc = 2;
    }
    free(line);
    free(live.s);
    fclose(f);
    return rc;
}

/* ---- replaying ---- */

static uint64_t pool_attr(cudaMemPool_t pool, enum cudaMemPoolAttr attr)
{
    uint64_t v = 0;
    cudaMemPoolGetAttribute(pool, attr, &v);
    return v;
}

typedef struct {
    long failures;
    long free_failures; /* frees the allocator refused: a bug, never a figure */
    size_t peak_requested, peak_held, peak_reserved;
    long long cuda_calls;
    long hits, oom_reclaims;
} replay_run;

/* One replay of the log by one allocator on a device of `capacity` bytes (0: as it is). */
static int replay_once(const replay_log *log, alloc_kind kind, int max_streams, size_t capacity,
                       replay_run *run)
{
    bool fresh = device_fresh(capacity);
    if (!fresh && capacity) {
        fprintf(stderr, "replay: a device capacity needs cudasim\n");
        return -1;
    }
    bench_alloc a;
    if (bench_alloc_open(&a, kind) != 0)
        return -1;
    size_t used_before = device_used_bytes(), peak_used = used_before;
    int ns = log->n_streams < max_streams ? log->n_streams : max_streams;
    cudaStream_t *streams = calloc((size_t)(ns ? ns : 1), sizeof *streams);
    for (int i = 0; i < ns; i++)
        cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    live_map live = {0};
    size_t requested = 0;
    *run = (replay_run){.hits = -1, .oom_reclaims = -1};
    calls_reset();
    for (long i = 0; i < log->n; i++) {
        const event *e = &log->ev[i];
        int si = e->stream % (ns ? ns : 1);
        if (e->is_alloc) {
            live_slot *s = live_insert(&live, e->ptr);
            s->size = e->size;
            s->stream = si;
            s->tenant = e->tenant;
            if (bench_alloc_alloc_tenant(&a, e->tenant, &s->real, e->size, streams[si]) != 0) {
                run->failures++; /* counted; its free is skipped below */
                live_remove(&live, e->ptr);
                continue;
            }
            requested += e->size;
            if (requested > run->peak_requested)
                run->peak_requested = requested;
            if (kind == ALLOC_CUDA_MALLOC) { /* no pool to ask: the device's own count */
                size_t used = device_used_bytes();
                peak_used = used > peak_used ? used : peak_used;
            }
        } else {
            live_slot *s = live_find(&live, e->ptr);
            if (!s)
                continue; /* its allocation failed */
            if (bench_alloc_free_tenant(&a, s->tenant, s->real, streams[si]) != 0)
                run->free_failures++;
            if (ns > 1) /* whether another stream may reuse it must not depend on timing */
                bench_stream_drain(streams[si]);
            requested -= s->size;
            live_remove(&live, e->ptr);
        }
    }
    run->cuda_calls = calls_by_allocator();
    if (kind == ALLOC_STREAMPOOL) {
        sp_stats st;
        bench_alloc_stats(&a, &st);
        run->peak_held = st.held.peak;
        run->peak_reserved = 0;
        for (int t = 0; t < BENCH_MAX_TENANTS; t++)
            if (a.pools[t])
                run->peak_reserved += pool_attr(sp_pool_cuda_pool(a.pools[t]),
                                                cudaMemPoolAttrReservedMemHigh);
        run->hits = (long)(st.same_stream_hits + st.cross_stream_reuses + st.cross_stream_waits);
        run->oom_reclaims = (long)st.oom_retries;
    } else if (kind == ALLOC_CUDA_MALLOC) {
        run->peak_held = run->peak_reserved = peak_used - used_before;
    } else {
        run->peak_held = pool_attr(a.default_pool, cudaMemPoolAttrUsedMemHigh);
        run->peak_reserved = pool_attr(a.default_pool, cudaMemPoolAttrReservedMemHigh);
    }
    /* what the log never freed, each through the pool that allocated it (a streampool pool
     * refuses another tenant's pointer, and a runtime with live allocations cannot be
     * destroyed, which would leave the next run's device in use) */
    long free_failures = run->free_failures;
    for (size_t i = 0; i < live.cap; i++)
        if (live.s[i].key && bench_alloc_free_tenant(&a, live.s[i].tenant, live.s[i].real,
                                                     streams[live.s[i].stream]) != 0)
            free_failures++;
    int rc = 0;
    if (free_failures) {
        fprintf(stderr, "replay: %s: %ld frees failed\n", bench_alloc_name(kind), free_failures);
        rc = -1;
    }
    if (kind == ALLOC_STREAMPOOL) {
        sp_stats st;
        bench_alloc_stats(&a, &st);
        if (st.requested.current) {
            fprintf(stderr, "replay: streampool: %" PRIu64 " bytes still allocated after the "
                            "log's last free\n", (uint64_t)st.requested.current);
            rc = -1;
        }
    }
    for (int i = 0; i < ns; i++) {
        bench_alloc_stream_done(&a, streams[i]);
        cudaStreamDestroy(streams[i]);
    }
    bench_alloc_close(&a);
    if (!fresh && pool_attr(a.default_pool, cudaMemPoolAttrReservedMemCurrent) != 0)
        fprintf(stderr, "replay: %s left memory reserved in the default pool; the next "
                        "allocator's figures include it\n", bench_alloc_name(kind));
    free(streams);
    free(live.s);
    return rc;
}

/* Replays `trials` times at `capacity`; true if none failed an allocation. Several allocators
 * are not deterministic with more than one stream (the driver's opportunistic reuse depends on
 * whether a free has run yet), so a capacity passes only if every trial is clean. *reclaims
 * gets the most out-of-memory reclaims of a trial. */
static int clean_at(const replay_log *log, alloc_kind kind, int max_streams, size_t capacity,
                    int trials, bool *clean, long *reclaims)
{
    *clean = true;
    *reclaims = -1;
    for (int t = 0; t < trials && *clean; t++) {
        replay_run run;
        if (replay_once(log, kind, max_streams, capacity, &run) != 0)
            return -1;
        *clean = run.failures == 0;
        *reclaims = run.oom_reclaims > *reclaims ? run.oom_reclaims : *reclaims;
    }
    return 0;
}

/* The smallest capacity at which the log replays with no failure, to 1% (or 1 MiB): `ok`
 * passed; below the peak requested bytes nothing can. Bisection assumes fewer bytes never
 * help, which holds for these allocators up to the noise of 2 MiB chunk rounding. */
static int find_capacity(const replay_log *log, alloc_kind kind, const replay_options *o,
                         size_t ok, replay_row *row)
{
    const size_t MiB = (size_t)1 << 20;
    size_t lo = row->peak_requested ? row->peak_requested - 1 : 0, hi = ok; /* lo fails */
    bool clean;
    long reclaims;
    while (hi - lo > hi / 100 && hi - lo > MiB) {
        size_t mid = lo + (hi - lo) / 2;
        if (clean_at(log, kind, o->max_streams, mid, o->repeats, &clean, &reclaims) != 0)
            return -1;
        if (clean)
            hi = mid;
        else
            lo = mid;
    }
    /* the answer, checked once more: a capacity that passed in the search may fail now */
    for (int tries = 0; tries < 20; tries++, hi += hi / 100) {
        if (clean_at(log, kind, o->max_streams, hi, o->repeats, &clean, &reclaims) != 0)
            return -1;
        if (clean) {
            row->capacity_bytes = hi;
            row->capacity_failed_bytes = lo;
            row->oom_reclaims = reclaims;
            return 0;
        }
    }
    return 0; /* none found: capacity stays 0 (null), reported as such */
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static int replay_row_of(const replay_log *log, const replay_options *o, const char *label,
                         alloc_kind kind, replay_row *row)
{
    enum { MAX_REPEATS = 32 };
    size_t held[MAX_REPEATS], reserved[MAX_REPEATS];
    int n = o->repeats < MAX_REPEATS ? o->repeats : MAX_REPEATS;
    replay_run run;
    *row = (replay_row){.allocator = bench_alloc_name(kind), .events = log->n, .repeats = n,
                        .hits = -1, .oom_reclaims = -1};
    snprintf(row->workload, sizeof row->workload, "%s", label);
    for (int i = 0; i < n; i++) {
        if (replay_once(log, kind, o->max_streams, o->capacity, &run) != 0)
            return -1;
        held[i] = run.peak_held;
        reserved[i] = run.peak_reserved;
        row->failures += run.failures;
        if (i == 0) { /* the same in every run */
            row->device_bytes = device_total_bytes();
            row->peak_requested = run.peak_requested;
            row->cuda_calls = run.cuda_calls;
            row->hits = run.hits;
        }
        if (run.oom_reclaims > row->oom_reclaims)
            row->oom_reclaims = run.oom_reclaims;
    }
    qsort(held, (size_t)n, sizeof *held, cmp_size);
    qsort(reserved, (size_t)n, sizeof *reserved, cmp_size);
    row->peak_held = held[n / 2], row->peak_held_min = held[0], row->peak_held_max = held[n - 1];
    row->peak_reserved = reserved[n / 2], row->peak_reserved_min = reserved[0];
    row->peak_reserved_max = reserved[n - 1];
    if (o->capacity) { /* runs at the given capacity: that is the row */
        if (!row->failures)
            row->capacity_bytes = o->capacity;
        else
            row->oom_reclaims = -1;
        return 0;
    }
    row->oom_reclaims = -1; /* reported at the capacity found, if any */
    if (!o->find_capacity || row->failures || !device_can_resize())
        return 0; /* on a GPU the capacity column stays empty */
    /* the largest peak reserved, rounded up to the device's 2 MiB chunks with room to spare,
     * should replay clean; grow until one does if it does not */
    size_t start = ((row->peak_reserved_max + ((size_t)4 << 20)) | (((size_t)2 << 20) - 1)) + 1;
    for (int grow = 0; grow < 8; grow++, start *= 2) {
        bool clean;
        long reclaims;
        if (clean_at(log, kind, o->max_streams, start, o->repeats, &clean, &reclaims) != 0)
            return -1;
        if (clean)
            return find_capacity(log, kind, o, start, row);
    }
    return 0; /* none found: capacity stays 0 (null), reported as such */
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int bench_replay(const char *path, const replay_options *o, bench_results *r)
{
    replay_log log = {0};
    int loaded = load_log(path, &log), rc = loaded;
    for (int k = 0; loaded == 0 && k < ALLOC_KIND_COUNT; k++) {
        if (!o->allocators[k])
            continue;
        replay_row row;
        if (replay_row_of(&log, o, o->workload ? o->workload : base_name(path), (alloc_kind)k,
                          &row) != 0) {
            fprintf(stderr, "replay: %s: cannot replay %s\n", bench_alloc_name((alloc_kind)k),
                    path);
            rc = 1;
            continue;
        }
        if (row.failures) {
            fprintf(stderr, "replay: %s: %s: %ld allocations failed on a %zu MiB device\n",
                    row.workload, row.allocator, row.failures, row.device_bytes >> 20);
            rc = 1;
        }
        fprintf(stderr, "  replay: %-16s %-32s held/req %.3f  capacity %zu MiB\n", row.workload,
                row.allocator, (double)row.peak_held / (double)(row.peak_requested ? row.peak_requested : 1),
                row.capacity_bytes >> 20);
        if (r->n_replay < (int)(sizeof r->replay / sizeof r->replay[0]))
            r->replay[r->n_replay++] = row; /* a row with failures is kept: never dropped */
    }
    (void)device_fresh(0);
    free(log.ev);
    free(log.streams);
    return rc;
}
