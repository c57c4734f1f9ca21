/* sp-bench replay: replays an allocation log in RMM's CSV format (logging_resource_adaptor:
 * "Thread,Time,Action,Pointer,Size,Stream", further columns ignored; actions "allocate" and
 * "free") against streampool and raw cudaMallocAsync, and reports memory efficiency: peak held
 * and peak reserved over peak requested. The whole log is checked before anything runs; a bad
 * line is reported by its number. Also writes synthetic logs for tests. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct {
    bool is_alloc;
    uint64_t ptr, stream;
    size_t size;
} event;

typedef struct {
    event *ev;
    long n, cap;
    uint64_t *streams; /* distinct log stream ids, in order of appearance */
    int n_streams, cap_streams;
} replay_log;

/* ---- a map from log pointers to live entries (open addressing, grows) ---- */

typedef struct {
    uint64_t key;  /* 0: empty (a log pointer of 0 is rejected) */
    void *real;
    size_t size;
    int stream;
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

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!*s)
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0); /* 0x... or decimal */
    if (errno || *end || *s == '-')
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

static void strip_newline(char *line)
{
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
}

static int load_log(const char *path, replay_log *log)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char line[1024];
    long lineno = 0;
    int rc = 0;
    live_map live = {0};
    lineno = 1;
    if (!fgets(line, sizeof line, f) ||
        strncmp(line, "Thread,Time,Action,Pointer,Size,Stream", 38) != 0) {
        fprintf(stderr, "replay: %s: line 1: expected the header Thread,Time,Action,Pointer,Size,Stream\n", path);
        fclose(f);
        return 2;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "replay: %s: line %ld: longer than %zu characters\n", path, lineno, sizeof line);
            rc = 2;
            break;
        }
        strip_newline(line);
        if (!line[0])
            continue;
        char *field[6];
        int nf = 0;
        for (char *p = line, *c; nf < 6; p = c + 1) {
            field[nf++] = p;
            c = strchr(p, ',');
            if (!c)
                break;
            *c = '\0';
        }
        event e = {0};
        uint64_t size;
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
            why = "bad size";
        else if (!why && !parse_u64(field[5], &e.stream))
            why = "bad stream";
        if (!why) {
            e.size = (size_t)size;
            live_slot *s = live_find(&live, e.ptr);
            if (e.is_alloc && s)
                why = "allocates a pointer that is still live";
            else if (!e.is_alloc && !s)
                why = "frees a pointer that is not live";
            else if (e.is_alloc && !live_insert(&live, e.ptr))
                why = "out of host memory";
            else if (!e.is_alloc)
                live_remove(&live, e.ptr);
        }
        if (why) {
            fprintf(stderr, "replay: %s: line %ld: %s\n", path, lineno, why);
            rc = 2;
            break;
        }
        if (log->n == log->cap) {
            long cap = log->cap ? log->cap * 2 : 4096;
            event *grown = realloc(log->ev, (size_t)cap * sizeof *grown);
            if (!grown) {
                rc = 2;
                break;
            }
            log->ev = grown;
            log->cap = cap;
        }
        if (stream_index(log, e.stream) < 0) {
            rc = 2;
            break;
        }
        log->ev[log->n++] = e;
    }
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

static int replay_with(const replay_log *log, const char *path, alloc_kind kind, int max_streams,
                       replay_row *row)
{
    bench_alloc a;
    if (bench_alloc_open(&a, kind) != 0)
        return -1;
    int ns = log->n_streams < max_streams ? log->n_streams : max_streams;
    cudaStream_t *streams = calloc((size_t)(ns ? ns : 1), sizeof *streams);
    for (int i = 0; i < ns; i++)
        cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    live_map live = {0};
    size_t requested = 0, peak_requested = 0;
    int failures = 0;
    calls_reset();
    for (long i = 0; i < log->n; i++) {
        const event *e = &log->ev[i];
        int si = stream_index((replay_log *)log, e->stream) % (ns ? ns : 1);
        if (e->is_alloc) {
            live_slot *s = live_insert(&live, e->ptr);
            s->size = e->size;
            s->stream = si;
            if (bench_alloc_alloc(&a, &s->real, e->size, streams[si]) != 0) {
                failures++;
                live_remove(&live, e->ptr);
                continue;
            }
            requested += e->size;
            if (requested > peak_requested)
                peak_requested = requested;
        } else {
            live_slot *s = live_find(&live, e->ptr);
            if (!s)
                continue; /* its allocation failed */
            bench_alloc_free(&a, s->real, streams[si]);
            requested -= s->size;
            live_remove(&live, e->ptr);
        }
    }
    long long calls = calls_by_allocator();
    *row = (replay_row){.allocator = bench_alloc_name(kind), .log = path, .events = log->n,
                        .peak_requested = peak_requested, .hits = -1, .cuda_calls = calls};
    if (kind == ALLOC_STREAMPOOL) {
        sp_stats st = {.size = sizeof st};
        sp_pool_stats(a.pool, &st);
        row->peak_held = st.held.peak;
        row->peak_reserved = pool_attr(sp_pool_cuda_pool(a.pool), cudaMemPoolAttrReservedMemHigh);
        row->hits = (long)(st.same_stream_hits + st.cross_stream_reuses + st.cross_stream_waits);
    } else {
        row->peak_held = pool_attr(a.default_pool, cudaMemPoolAttrUsedMemHigh);
        row->peak_reserved = pool_attr(a.default_pool, cudaMemPoolAttrReservedMemHigh);
    }
    for (size_t i = 0; i < live.cap; i++) /* what the log never freed */
        if (live.s[i].key)
            bench_alloc_free(&a, live.s[i].real, streams[live.s[i].stream]);
    for (int i = 0; i < ns; i++) {
        bench_alloc_stream_done(&a, streams[i]);
        cudaStreamDestroy(streams[i]);
    }
    bench_alloc_close(&a);
    free(streams);
    free(live.s);
    if (failures)
        fprintf(stderr, "replay: %s: %d allocations failed\n", bench_alloc_name(kind), failures);
    return failures ? -1 : 0;
}

int bench_replay(const char *path, int max_streams, bench_results *r)
{
    replay_log log = {0};
    int rc = load_log(path, &log);
    static const alloc_kind kinds[] = {ALLOC_ASYNC_DEFAULT, ALLOC_STREAMPOOL};
    for (int k = 0; rc == 0 && k < 2; k++) {
        replay_row row;
        if (replay_with(&log, path, kinds[k], max_streams, &row) != 0)
            rc = 1;
        else if (r->n_replay < (int)(sizeof r->replay / sizeof r->replay[0]))
            r->replay[r->n_replay++] = row;
    }
    free(log.ev);
    free(log.streams);
    return rc;
}

/* ---- synthetic logs ---- */

int bench_generate_log(const char *path, long requests, int streams, uint64_t seed)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gen-log: %s: %s\n", path, strerror(errno));
        return 2;
    }
    fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
    typedef struct {
        uint64_t ptr[8];
        size_t size[8];
        int n;
        bool open;
    } request;
    request *active = calloc((size_t)streams, sizeof *active);
    uint64_t rng = seed, next_ptr = 0x7f0000000000ull, t = 0;
    long started = 0, finished = 0;
    while (finished < requests) {
        int s = (int)(rng_next(&rng) % (uint64_t)streams);
        request *q = &active[s];
        uint64_t stream_id = 0x1000 + (uint64_t)s;
        if (!q->open && started < requests) {
            q->open = true;
            q->n = 0;
            started++;
        }
        if (!q->open)
            continue;
        if (q->n < 8 && rng_next(&rng) % 3 != 0) {
            q->size[q->n] = bench_request_buffer_size(&rng, q->n);
            q->ptr[q->n] = next_ptr;
            next_ptr += (q->size[q->n] + 0xfff) & ~(uint64_t)0xfff;
            fprintf(f, "0,%" PRIu64 ".%06" PRIu64 ",allocate,0x%" PRIx64 ",%zu,0x%" PRIx64 "\n",
                    t / 1000000, t % 1000000, q->ptr[q->n], q->size[q->n], stream_id);
            q->n++;
        } else {
            for (int i = 0; i < q->n; i++)
                fprintf(f, "0,%" PRIu64 ".%06" PRIu64 ",free,0x%" PRIx64 ",%zu,0x%" PRIx64 "\n",
                        t / 1000000, t % 1000000, q->ptr[i], q->size[i], stream_id);
            q->open = false;
            finished++;
        }
        t += 1 + rng_next(&rng) % 50;
    }
    free(active);
    return fclose(f) == 0 ? 0 : 2;
}
