/* The allocation trace: every sp_alloc and sp_free of a runtime, recorded into the calling
 * thread's own buffer (its lock is shared with nobody but the writer at stop, so threads never
 * contend per event), then merged by time and written as RMM's CSV and as Chrome trace-event
 * JSON for Perfetto. Buffers, pool names and the trace itself live until the runtime is
 * destroyed, so a thread still inside a call when the trace stops never touches freed memory.
 *
 * The outcome of an allocation is the one the allocator decided, where the stats count it
 * (alloc.c): hit (same_stream_hits), reuse (a miss served by freed memory known usable), steal
 * (cross_stream_reuses), wait (cross_stream_waits), fresh (a new slab or segment: driver
 * allocations) or bypass (capture_bypasses), so the trace's counts equal the stats'.
 *
 * One time base: every event's time, the CSV's Time column and the JSON's ts are nanoseconds
 * since the trace started, and the start records each pool's held and reserved bytes (the
 * baseline) as counters at time 0, so a trace started mid-run shows what was already held.
 * A stream's label is copied when an event on it is recorded, not when the files are written:
 * streams are usually released (forgetting their labels) before the runtime writes its trace. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"
#include "names.h"
#include "classes.h"
#include "config.h"
#include "usage.h"
#include "cuda.h"
#include "labels.h"
#include "pool.h"
#include "runtime.h"
#include "status.h"
#include "format.h"

atomic_int sp__trace_on_count;

enum { EV_ALLOC, EV_FREE, EV_OOM, EV_LIMIT, EV_RECLAIM, EV_TRIM, EV_REQUEST };
/* an allocation's outcome (sp_outcome, in its order), or a failure */
enum { OUT_HIT, OUT_REUSE, OUT_STEAL, OUT_WAIT, OUT_FRESH, OUT_BYPASS, OUT_FAIL };
_Static_assert(OUT_HIT == (int)SP_OUTCOME_HIT && OUT_REUSE == (int)SP_OUTCOME_REUSE &&
                   OUT_STEAL == (int)SP_OUTCOME_STEAL && OUT_WAIT == (int)SP_OUTCOME_WAIT &&
                   OUT_FRESH == (int)SP_OUTCOME_FRESH && OUT_BYPASS == (int)SP_OUTCOME_BYPASS,
               "the trace's outcomes are the allocator's");
static const char *const outcome_name[] = {"hit", "reuse", "steal", "wait", "fresh", "bypass",
                                           "fail"};
static const char *const instant_name[] = {"alloc", "free", "oom", "limit", "reclaim", "trim",
                                             "request end"};

#define CHUNK_EVENTS 4096
#define MAX_CHUNKS (SP_TRACE_THREAD_EVENTS / CHUNK_EVENTS)
#define RESERVED_EVERY 256           /* events of a thread between samples of the driver's figure */
#define NO_SAMPLE UINT64_MAX

typedef struct {
    uint64_t t_ns;                   /* since the trace started */
    uint64_t ptr, stream;
    uint64_t size;                   /* alloc: requested; free: filled in at write */
    uint64_t held;                   /* the pool's held bytes after the call */
    uint64_t reserved;               /* the cudaMemPool's reserved bytes, or NO_SAMPLE */
    uint32_t pool;                   /* index into trace->pools */
    uint32_t name;                   /* the stream's label then: index into trace->names */
    uint8_t kind, outcome;
    int16_t status;
} trace_event;

/* A thread's memo of its recent pools (pool id -> index, direct-mapped by id) and of the labels
 * of its recent streams (round robin): sizes its array and the slot it picks both follow. */
#define MEMO_POOLS 8
#define MEMO_STREAMS 4

typedef struct thread_buf {
    sp_spin lock;                    /* the owner per event; stop, once */
    long tid;
    uint32_t order;                  /* creation order: breaks ties between equal times */
    size_t count, dropped, since_sample;
    trace_event *chunks[MAX_CHUNKS];
    uint64_t memo_pool_id[MEMO_POOLS]; /* pool id -> index, for this thread's recent pools */
    uint32_t memo_index[MEMO_POOLS];
    /* the labels of the streams this thread last recorded on (an index into trace->names), as
     * of sp__label_changes == name_changes (owner only); a thread that allocates on one
     * stream and frees on another looks neither up again */
    unsigned name_changes, name_known, name_next;
    uint64_t name_stream[MEMO_STREAMS];
    uint32_t name_index[MEMO_STREAMS];
    struct thread_buf *next;
} thread_buf;

typedef struct {
    uint64_t id;
    char name[SP_POOL_NAME_MAX + 1];
} pool_name;

typedef char stream_name[SP_STREAM_NAME_MAX + 1];

struct sp_trace {
    sp_mutex lock;                   /* thread list, pool names, start and stop */
    atomic_bool on;
    /* unique for the process: threads' memos key on it. Atomic: a thread still inside a call
     * of the last trace compares it while a restart renews it under `lock` */
    atomic_uint_least64_t uid;
    uint64_t t0_ns;
    char *path;
    thread_buf *threads;
    uint32_t nthreads;
    pool_name *pools;
    uint32_t npools, cap_pools;
    /* every label recorded, once each; [0] is "" (no label). Only grows, like pools: a thread
     * still inside a call of the last trace may hold an index */
    stream_name *names;
    uint32_t nnames, cap_names;
    /* the baseline: held and reserved bytes of pools[0..nbase) when the trace started */
    uint64_t *base_held, *base_reserved;
    uint32_t nbase;
};

static atomic_uint_least64_t next_uid = 1;
static atomic_int autostarts;

/* this thread's buffer in the trace it last recorded into */
static _Thread_local struct {
    uint64_t uid;
    thread_buf *buf;
} memo;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static thread_buf *my_buf(struct sp_trace *t)
{
    uint64_t uid = atomic_load_explicit(&t->uid, memory_order_relaxed);
    if (sp_likely(memo.uid == uid))
        return memo.buf;
    long tid = (long)syscall(SYS_gettid);
    sp_mutex_lock(&t->lock);
    thread_buf *b = t->threads;
    while (b && b->tid != tid) /* a thread id reused after an exit takes over its buffer */
        b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) {
        sp_spin_init(&b->lock, SP_RANK_SPIN, "trace buffer->lock");
        b->tid = tid;
        b->order = t->nthreads++;
        b->next = t->threads;
        t->threads = b;
    }
    sp_mutex_unlock(&t->lock);
    if (b) {
        memo.uid = uid;
        memo.buf = b;
        b->name_known = 0; /* a buffer taken over from an exited thread: its streams' keys */
    }
    return b;
}

/* pool_index under t->lock, without the thread's memo */
static uint32_t pool_index_locked(struct sp_trace *t, const sp_pool *pool)
{
    sp_mutex_assert_owner(&t->lock);
    uint32_t i;
    for (i = 0; i < t->npools && t->pools[i].id != pool->id; i++)
        ;
    if (i == t->npools) {
        if (t->npools == t->cap_pools) {
            uint32_t cap = t->cap_pools ? t->cap_pools * 2 : 8;
            pool_name *grown = realloc(t->pools, cap * sizeof *grown);
            if (!grown)
                return UINT32_MAX;
            t->pools = grown;
            t->cap_pools = cap;
        }
        t->pools[i].id = pool->id;
        memcpy(t->pools[i].name, pool->name, sizeof t->pools[i].name);
        t->npools++;
    }
    return i;
}

/* The pool's index in the trace's name table; UINT32_MAX if host memory ran out. */
static uint32_t pool_index(struct sp_trace *t, thread_buf *b, const sp_pool *pool)
{
    unsigned slot = (unsigned)(pool->id % MEMO_POOLS);
    if (b->memo_pool_id[slot] == pool->id)
        return b->memo_index[slot];
    sp_mutex_lock(&t->lock);
    uint32_t i = pool_index_locked(t, pool);
    sp_mutex_unlock(&t->lock);
    if (i == UINT32_MAX)
        return i;
    b->memo_pool_id[slot] = pool->id;
    b->memo_index[slot] = i;
    return i;
}

/* The index in t->names of the label `stream` has now (0: none, or host memory ran out). Looked
 * up only when the stream is not among this thread's last four or a label changed since: one
 * relaxed load and a short scan per event otherwise. */
static uint32_t name_index(struct sp_trace *t, thread_buf *b, const sp_runtime *rt,
                           cudaStream_t stream)
{
    unsigned changes = atomic_load_explicit(&sp__label_changes, memory_order_relaxed);
    if (b->name_changes != changes) { /* a label changed somewhere: look each up again */
        b->name_changes = changes;
        b->name_known = 0;
    }
    for (unsigned k = 0; k < b->name_known; k++)
        if (b->name_stream[k] == (uint64_t)(uintptr_t)stream)
            return b->name_index[k];
    stream_name label;
    /* the label table's mutex (a leaf) first and alone, then the trace's */
    sp__label_of(rt, sp__cache_key(stream), label, sizeof label);
    uint32_t i = 0;
    if (label[0]) {
        sp_mutex_lock(&t->lock);
        for (i = 1; i < t->nnames && strcmp(t->names[i], label) != 0; i++)
            ;
        if (i == t->nnames || t->nnames == 0) {
            if (t->nnames + 1 >= t->cap_names) {
                uint32_t cap = t->cap_names ? t->cap_names * 2 : 8;
                stream_name *grown = realloc(t->names, cap * sizeof *grown);
                if (grown) {
                    t->names = grown;
                    t->cap_names = cap;
                }
            }
            if (t->nnames + 1 < t->cap_names) {
                if (t->nnames == 0)
                    t->names[t->nnames++][0] = '\0';
                i = t->nnames++;
                memcpy(t->names[i], label, sizeof label);
            } else {
                i = 0;
            }
        }
        sp_mutex_unlock(&t->lock);
    }
    unsigned k = b->name_known < MEMO_STREAMS ? b->name_known++ : b->name_next++ % MEMO_STREAMS;
    b->name_stream[k] = (uint64_t)(uintptr_t)stream;
    b->name_index[k] = i;
    return i;
}

/* at_ns: when the event happened (now_ns()), or 0 for now. */
static void record_at(struct sp_trace *t, sp_pool *pool, int kind, int outcome, int status,
                      const void *ptr, uint64_t size, cudaStream_t stream, uint64_t at_ns)
{
    thread_buf *b = my_buf(t);
    if (!b)
        return;
    uint32_t pi = pool_index(t, b, pool);
    if (pi == UINT32_MAX)
        return;
    uint64_t reserved = NO_SAMPLE;
    if (kind >= EV_OOM || b->since_sample++ % RESERVED_EVERY == 0) {
        uint64_t used;
        if (sp__cuda_pool_usage(pool->cuda_pool, &reserved, &used) != SP_OK)
            reserved = NO_SAMPLE;
    }
    trace_event e = {
        .ptr = (uint64_t)(uintptr_t)ptr,
        .stream = (uint64_t)(uintptr_t)stream,
        .size = size,
        .held = atomic_load_explicit(&pool->fig.usage.held.current, memory_order_relaxed),
        .reserved = reserved,
        .pool = pi,
        .name = name_index(t, b, pool->rt, stream),
        .kind = (uint8_t)kind,
        .outcome = (uint8_t)outcome,
        .status = (int16_t)status,
    };
    sp_spin_lock(&b->lock);
    /* acquire: pairs with the start's store, after which t0_ns is set */
    if (!atomic_load_explicit(&t->on, memory_order_acquire)) {
        sp_spin_unlock(&b->lock);
        return;
    }
    if (!at_ns || at_ns < t->t0_ns)
        at_ns = now_ns();
    e.t_ns = at_ns - t->t0_ns;
    size_t chunk = b->count / CHUNK_EVENTS;
    if (chunk >= MAX_CHUNKS ||
        (!b->chunks[chunk] && !(b->chunks[chunk] = malloc(CHUNK_EVENTS * sizeof(trace_event))))) {
        b->dropped++;
    } else {
        b->chunks[chunk][b->count % CHUNK_EVENTS] = e;
        b->count++;
    }
    sp_spin_unlock(&b->lock);
}

static void record(struct sp_trace *t, sp_pool *pool, int kind, int outcome, int status,
                   const void *ptr, uint64_t size, cudaStream_t stream)
{
    record_at(t, pool, kind, outcome, status, ptr, size, stream, 0);
}

static struct sp_trace *active(const sp_pool *pool)
{
    struct sp_trace *t =
        pool ? atomic_load_explicit(&pool->dev->trace, memory_order_acquire) : NULL;
    return t && atomic_load_explicit(&t->on, memory_order_relaxed) ? t : NULL;
}

static uint64_t pool_counter(const sp_pool *pool, int counter)
{
    return atomic_load_explicit(&pool->fig.count[counter], memory_order_relaxed);
}

/* Retries after other memory was given back, whatever refused the first try (the driver or
 * the limit): the trace's reclaim instant. */
static uint64_t retries(const sp_pool *pool)
{
    return pool_counter(pool, SP_COUNT_oom_retries) + pool_counter(pool, SP_COUNT_limit_retries);
}

sp_trace_mark sp__trace_alloc_mark(sp_pool *pool)
{
    struct sp_trace *t = active(pool);
    return (sp_trace_mark){.trace = t, .retries = t ? retries(pool) : 0};
}

void sp__trace_alloc_done(const sp_trace_mark *m, sp_pool *pool, void *ptr, size_t bytes,
                          cudaStream_t stream, int rc, sp_outcome how)
{
    struct sp_trace *t = m->trace;
    if (!t || bytes == 0 || rc == SP_ERR_INVALID || rc == SP_ERR_TOO_LARGE)
        return; /* not traced, or never reached the pool */
    int outcome = rc != SP_OK ? OUT_FAIL : (int)how;
    if (retries(pool) != m->retries)
        record(t, pool, EV_RECLAIM, outcome, rc, NULL, bytes, stream);
    if (rc == SP_ERR_OUT_OF_MEMORY || rc == SP_ERR_LIMIT || rc == SP_ERR_NEVER_FITS)
        record(t, pool, rc == SP_ERR_OUT_OF_MEMORY ? EV_OOM : EV_LIMIT, outcome, rc, NULL, bytes,
               stream);
    record(t, pool, EV_ALLOC, outcome, rc, ptr, bytes, stream);
}

sp_trace_mark sp__trace_free_mark(sp_pool *pool)
{
    struct sp_trace *t = active(pool);
    /* The free's time is taken before the block can go to another thread: an allocation that
     * gets the same pointer then always sorts after this free, never before it. */
    return (sp_trace_mark){
        .trace = t,
        .trims = t ? pool_counter(pool, SP_COUNT_trims) : 0,
        .at_ns = t ? now_ns() : 0,
    };
}

void sp__trace_free_done(const sp_trace_mark *m, sp_pool *pool, const void *ptr,
                         cudaStream_t stream, int rc)
{
    struct sp_trace *t = m->trace;
    if (!t || !ptr)
        return;
    record_at(t, pool, EV_FREE, rc == SP_OK ? OUT_HIT : OUT_FAIL, rc, ptr, 0, stream, m->at_ns);
    if (pool_counter(pool, SP_COUNT_trims) != m->trims) /* the cache limit gave blocks back */
        record(t, pool, EV_TRIM, OUT_HIT, SP_OK, NULL, 0, stream);
}

void sp__trace_trim(sp_pool *pool)
{
    struct sp_trace *t = active(pool);
    if (t)
        record(t, pool, EV_TRIM, OUT_HIT, SP_OK, NULL, 0, NULL);
}

void sp__trace_request(sp_pool *pool, sp_request id, cudaStream_t stream, uint64_t peak)
{
    struct sp_trace *t = active(pool);
    if (t) /* the id in the pointer's place, its peak bytes in the size's */
        record(t, pool, EV_REQUEST, OUT_HIT, SP_OK, (void *)(uintptr_t)id, peak, stream);
}

/* ---- start and stop ---- */

/* Under runtime->lock and t->lock: every pool's held and reserved bytes as the trace starts,
 * written as counters at time 0. Without them a trace started mid-run draws held 0 until each
 * pool's first traced event, though the memory was held all along. */
static int baseline(struct sp_trace *t, sp_runtime *rt)
{
    for (sp_pool *p = rt->pools; p; p = p->next)
        if (pool_index_locked(t, p) == UINT32_MAX)
            return SP_ERR_NO_HOST_MEMORY;
    uint64_t *held = calloc(t->npools ? t->npools : 1, sizeof *held);
    uint64_t *reserved = calloc(t->npools ? t->npools : 1, sizeof *reserved);
    if (!held || !reserved) {
        free(held);
        free(reserved);
        return SP_ERR_NO_HOST_MEMORY;
    }
    for (sp_pool *p = rt->pools; p; p = p->next) {
        uint32_t i = pool_index_locked(t, p); /* found: added above */
        uint64_t used;
        held[i] = atomic_load_explicit(&p->fig.usage.held.current, memory_order_relaxed);
        if (sp__cuda_pool_usage(p->cuda_pool, &reserved[i], &used) != SP_OK)
            reserved[i] = 0;
    }
    free(t->base_held);
    free(t->base_reserved);
    t->base_held = held;
    t->base_reserved = reserved;
    t->nbase = t->npools;
    return SP_OK;
}

int sp_runtime_trace_start(sp_runtime *rt, const char *path)
{
    if (!rt || !path || !path[0])
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    struct sp_trace *t = atomic_load(&rt->dev.trace);
    if (!t) {
        struct sp_trace *fresh = calloc(1, sizeof *fresh);
        if (!fresh || sp_mutex_init(&fresh->lock, SP_RANK_TRACE, "trace->lock") != 0) {
            free(fresh);
            return SP_ERR_NO_HOST_MEMORY;
        }
        if (!atomic_compare_exchange_strong(&rt->dev.trace, &t, fresh)) {
            sp_mutex_destroy(&fresh->lock); /* another thread won: use its trace */
            free(fresh);
        } else {
            t = fresh;
        }
    }
    char *copy = strdup(path);
    if (!copy)
        return SP_ERR_NO_HOST_MEMORY;
    /* runtime->lock keeps the pool list still while the baseline is read */
    sp_mutex_lock(&rt->lock);
    sp_mutex_lock(&t->lock);
    if (atomic_load(&t->on)) {
        sp_mutex_unlock(&t->lock);
        sp_mutex_unlock(&rt->lock);
        free(copy);
        return SP_ERR_BUSY;
    }
    int rc = baseline(t, rt);
    if (rc != SP_OK) {
        sp_mutex_unlock(&t->lock);
        sp_mutex_unlock(&rt->lock);
        free(copy);
        return rc;
    }
    free(t->path);
    t->path = copy;
    for (thread_buf *b = t->threads; b; b = b->next) {
        sp_spin_lock(&b->lock);
        b->count = b->dropped = 0;
        sp_spin_unlock(&b->lock);
    }
    atomic_store_explicit(&t->uid, atomic_fetch_add(&next_uid, 1), /* threads look again */
                          memory_order_relaxed);
    t->t0_ns = now_ns();
    atomic_store(&t->on, true);
    atomic_fetch_add(&sp__trace_on_count, 1);
    sp_mutex_unlock(&t->lock);
    sp_mutex_unlock(&rt->lock);
    return SP_OK;
}

/* ---- writing ---- */

typedef struct {
    trace_event e;
    uint32_t thread;                 /* index into the thread table */
    uint64_t seq;                    /* order within its thread */
} merged;

static int by_time(const void *a, const void *b)
{
    const merged *x = a, *y = b;
    if (x->e.t_ns != y->e.t_ns)
        return x->e.t_ns < y->e.t_ns ? -1 : 1;
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* pointer -> requested size of the live allocations, while the merged events are walked */
typedef struct {
    uint64_t *keys, *sizes;
    size_t cap;
} size_map;

static size_t map_slot(const size_map *m, uint64_t key)
{
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

/* Backward-shift deletion keeps every other key reachable from its home slot. */
static void map_remove(size_map *m, size_t i)
{
    for (size_t j = i;;) {
        m->keys[i] = 0;
        for (;;) {
            j = (j + 1) & (m->cap - 1);
            if (!m->keys[j])
                return;
            size_t home = (size_t)((m->keys[j] * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
            if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j))
                break;
        }
        m->keys[i] = m->keys[j];
        m->sizes[i] = m->sizes[j];
        i = j;
    }
}

static void json_name(FILE *f, const char *s)
{
    char buf[8 * (SP_POOL_NAME_MAX + 1) + 4];
    size_t used = 0;
    sp__names_append_json(buf, sizeof buf, &used, s);
    fputs(buf, f);
}

static void json_ts(FILE *f, uint64_t ns)
{
    fprintf(f, "\"ts\":%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

/* A counter event on the pool's track: requested (by allocations made during the trace), held
 * and reserved bytes. */
static void write_counter(FILE *json, int pid, const char *pool, uint64_t t_ns,
                          uint64_t requested, uint64_t held, uint64_t reserved)
{
    fprintf(json, ",\n{\"name\":\"pool ");
    char quoted[8 * (SP_POOL_NAME_MAX + 1) + 4];
    size_t used = 0;
    sp__names_append_json(quoted, sizeof quoted, &used, pool);
    quoted[used - 1] = '\0'; /* drop the closing quote: the name continues */
    fprintf(json, "%s\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,", quoted + 1, pid);
    json_ts(json, t_ns);
    fprintf(json, ",\"args\":{\"requested\":%llu,\"held\":%llu,\"reserved\":%llu}}",
            (unsigned long long)requested, (unsigned long long)held,
            (unsigned long long)reserved);
}

/* A CSV field in quotes, its quotes doubled: pool and stream names may hold commas and quotes. */
static void csv_quoted(FILE *csv, const char *s)
{
    fputc('"', csv);
    for (const char *c = s; *c; c++)
        fputs(*c == '"' ? "\"\"" : (char[2]){*c, 0}, csv);
    fputc('"', csv);
}

/* The CSV's header and the JSON's preamble: metadata, the process and thread names, and each
 * pool's baseline (what it held as the trace started, at time 0). */
static void write_heads(struct sp_trace *t, FILE *csv, FILE *json, int device, const long *tids,
                        size_t dropped, uint64_t *reserved)
{
    int pid = device + 1;
    fputs("Thread,Time,Action,Pointer,Size,Stream,Pool,ClassSize,Outcome,StreamName\n", csv);
    fprintf(json, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"streampool %s\","
                  "\"device\":%d,\"dropped_events\":%zu,\"time_base\":\"ts: microseconds "
                  "since the trace started, the CSV's Time in seconds since the same start\"},"
                  "\"traceEvents\":[\n",
            sp_version_string(), device, dropped);
    fprintf(json, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"name\":\"streampool device %d\"}}",
            pid, device);
    for (uint32_t i = 0; i < t->nthreads; i++)
        fprintf(json, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%ld,"
                      "\"args\":{\"name\":\"thread %ld\"}}",
                pid, tids[i], tids[i]);
    for (uint32_t i = 0; i < t->nbase; i++) {
        reserved[i] = t->base_reserved[i];
        if (t->base_held[i] || t->base_reserved[i])
            write_counter(json, pid, t->pools[i].name, 0, 0, t->base_held[i],
                          t->base_reserved[i]);
    }
}

/* One allocation or free that succeeded, as a CSV row (PyTorch's memory-trace columns). */
static void write_csv_row(FILE *csv, const trace_event *e, long tid, const char *pool,
                          const char *label)
{
    fprintf(csv, "%ld,%llu.%06llu,%s,0x%llx,%llu,0x%llx,", tid,
            (unsigned long long)(e->t_ns / 1000000000u),
            (unsigned long long)(e->t_ns / 1000 % 1000000),
            e->kind == EV_ALLOC ? "allocate" : "free", (unsigned long long)e->ptr,
            (unsigned long long)e->size, (unsigned long long)e->stream);
    csv_quoted(csv, pool);
    fprintf(csv, ",%zu,%s,", sp_size_class(e->size),
            e->kind == EV_ALLOC ? outcome_name[e->outcome] : "free");
    if (label[0]) /* empty for a stream without a label */
        csv_quoted(csv, label);
    fputc('\n', csv);
}

/* One call as an instant event on its thread's track. */
static void write_json_event(FILE *json, const trace_event *e, int pid, long tid,
                             const char *pool, const char *label)
{
    fprintf(json, ",\n{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"%s\",\"pid\":%d,\"tid\":%ld,",
            e->kind == EV_ALLOC && e->status != SP_OK ? "alloc failed"
            : e->kind == EV_FREE && e->status != SP_OK ? "bad free"
                                                     : instant_name[e->kind],
            e->kind <= EV_FREE ? "t" : "p", pid, tid);
    json_ts(json, e->t_ns);
    fputs(",\"args\":{\"pool\":", json);
    json_name(json, pool);
    fprintf(json, ",\"ptr\":\"0x%llx\",\"size\":%llu,\"stream\":\"0x%llx\",\"outcome\":\"%s\","
                  "\"status\":\"%s\"",
            (unsigned long long)e->ptr, (unsigned long long)e->size,
            (unsigned long long)e->stream,
            e->kind == EV_FREE ? "free" : outcome_name[e->outcome], sp_status_name(e->status));
    if (e->kind == EV_REQUEST) /* the request's id, also in "ptr"; "size": its peak */
        fprintf(json, ",\"request\":%llu", (unsigned long long)e->ptr);
    if (label[0]) {
        fputs(",\"stream_name\":", json);
        json_name(json, label);
    }
    fputs("}}", json);
}

/* Follows e in the pool's figures: requested bytes by the live allocations made during the
 * trace (a free's size from its allocation, found in `map`), reserved bytes as sampled. Returns
 * whether the pool's counters moved; false for a free of an allocation the trace did not see
 * (made before it started, or its event dropped), which is then not written at all (*skip). */
static bool follow(trace_event *e, size_map *map, uint64_t *requested, uint64_t *reserved,
                   bool *skip)
{
    bool counters = false;
    *skip = false;
    if (e->kind == EV_ALLOC && e->status == SP_OK) {
        size_t s = map_slot(map, e->ptr);
        map->keys[s] = e->ptr;
        map->sizes[s] = e->size;
        requested[e->pool] += e->size;
        counters = true;
    } else if (e->kind == EV_FREE && e->status == SP_OK) {
        size_t s = map_slot(map, e->ptr);
        if (!map->keys[s]) {
            *skip = true;
            return false;
        }
        e->size = map->sizes[s];
        map_remove(map, s);
        requested[e->pool] -= e->size;
        counters = true;
    }
    if (e->reserved != NO_SAMPLE) {
        reserved[e->pool] = e->reserved;
        counters = true;
    }
    return counters;
}

static int write_files(struct sp_trace *t, merged *ev, size_t n, const long *tids, int device,
                       size_t dropped)
{
    int pid = device + 1; /* trace viewers treat pid 0 as the kernel's */
    size_t plen = strlen(t->path);
    char *jpath = malloc(plen + 6);
    if (!jpath)
        return SP_ERR_NO_HOST_MEMORY;
    memcpy(jpath, t->path, plen);
    memcpy(jpath + plen, ".json", 6);
    FILE *csv = fopen(t->path, "w"), *json = fopen(jpath, "w");
    free(jpath);
    size_map map = {NULL, NULL, 64};
    while (map.cap < 2 * n + 64)
        map.cap *= 2;
    map.keys = calloc(map.cap, sizeof *map.keys);
    map.sizes = calloc(map.cap, sizeof *map.sizes);
    uint64_t *requested = calloc(t->npools ? t->npools : 1, sizeof *requested);
    uint64_t *reserved = calloc(t->npools ? t->npools : 1, sizeof *reserved);
    int rc = SP_OK;
    if (!csv || !json)
        rc = SP_ERR_IO;
    else if (!map.keys || !map.sizes || !requested || !reserved)
        rc = SP_ERR_NO_HOST_MEMORY;
    if (rc == SP_OK)
        write_heads(t, csv, json, device, tids, dropped, reserved);
    for (size_t i = 0; rc == SP_OK && i < n; i++) {
        trace_event *e = &ev[i].e;
        const char *pool = t->pools[e->pool].name;
        const char *label = e->name ? t->names[e->name] : "";
        long tid = tids[ev[i].thread];
        bool skip, counters = follow(e, &map, requested, reserved, &skip);
        if (skip)
            continue;
        if (counters && e->status == SP_OK && e->kind <= EV_FREE)
            write_csv_row(csv, e, tid, pool, label);
        write_json_event(json, e, pid, tid, pool, label);
        if (counters || e->kind > EV_FREE) /* the pool's counter track */
            write_counter(json, pid, pool, e->t_ns, requested[e->pool], e->held,
                          reserved[e->pool]);
    }
    if (rc == SP_OK) {
        fputs("\n]}\n", json);
        if (ferror(csv) || ferror(json))
            rc = SP_ERR_IO;
    }
    if (csv && fclose(csv) != 0 && rc == SP_OK)
        rc = SP_ERR_IO;
    if (json && fclose(json) != 0 && rc == SP_OK)
        rc = SP_ERR_IO;
    free(map.keys);
    free(map.sizes);
    free(requested);
    free(reserved);
    return rc;
}

int sp_runtime_trace_stop(sp_runtime *rt)
{
    if (!rt)
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    struct sp_trace *t = atomic_load(&rt->dev.trace);
    if (!t)
        return SP_ERR_INVALID;
    sp_mutex_lock(&t->lock);
    if (!atomic_load(&t->on)) {
        sp_mutex_unlock(&t->lock);
        return SP_ERR_INVALID;
    }
    atomic_store(&t->on, false);
    atomic_fetch_sub(&sp__trace_on_count, 1);
    /* every buffer's lock once: after it, no thread writes into it any more */
    size_t n = 0, dropped = 0;
    for (thread_buf *b = t->threads; b; b = b->next) {
        sp_spin_lock(&b->lock);
        sp_spin_unlock(&b->lock);
        n += b->count;
        dropped += b->dropped;
    }
    merged *ev = malloc((n ? n : 1) * sizeof *ev);
    long *tids = calloc(t->nthreads ? t->nthreads : 1, sizeof *tids);
    int rc = ev && tids ? SP_OK : SP_ERR_NO_HOST_MEMORY;
    size_t k = 0;
    for (thread_buf *b = t->threads; b && rc == SP_OK; b = b->next) {
        tids[b->order] = b->tid;
        for (size_t i = 0; i < b->count; i++)
            ev[k++] = (merged){b->chunks[i / CHUNK_EVENTS][i % CHUNK_EVENTS], b->order, i};
    }
    if (rc == SP_OK) {
        qsort(ev, n, sizeof *ev, by_time);
        rc = write_files(t, ev, n, tids, rt->dev.device, dropped);
    }
    if (dropped)
        fprintf(stderr, "streampool: warning: the trace %s dropped %zu events (more than %zu in a "
                        "thread)\n", t->path, dropped, (size_t)SP_TRACE_THREAD_EVENTS);
    sp_mutex_unlock(&t->lock);
    free(ev);
    free(tids);
    return rc;
}

/* Whether `path` can be created for writing; a file the probe created is removed again (the
 * trace writes it at its stop), one that was there is left as it was. */
static bool probe_file(const char *path)
{
    bool existed = access(path, F_OK) == 0;
    FILE *f = fopen(path, "a");
    if (!f)
        return false;
    fclose(f);
    if (!existed)
        (void)remove(path);
    return true;
}

void sp__trace_autostart(sp_runtime *rt)
{
    char path[4096];
    if (!sp__config_trace_path(&rt->dev, path, sizeof path - 16))
        return;
    int n = atomic_fetch_add(&autostarts, 1) + 1;
    if (n > 1)
        snprintf(path + strlen(path), 16, "-%d", n);
    /* fail now, where the operator sees it, not at the end: both files the stop writes */
    char jpath[sizeof path + 8];
    snprintf(jpath, sizeof jpath, "%s.json", path);
    const char *bad = path;
    int rc = probe_file(path) ? SP_OK : SP_ERR_IO;
    if (rc == SP_OK && !probe_file(jpath))
        rc = SP_ERR_IO, bad = jpath;
    if (rc == SP_OK)
        rc = sp_runtime_trace_start(rt, path);
    else
        fprintf(stderr, "streampool: warning: cannot trace to %s: %s cannot be created (%s)\n",
                path, bad, strerror(errno));
    if (rc != SP_OK && rc != SP_ERR_IO)
        fprintf(stderr, "streampool: warning: cannot trace to %s: %s\n", path, sp_strerror(rc));
}

void sp__trace_destroy(sp_runtime *rt)
{
    struct sp_trace *t = atomic_load(&rt->dev.trace);
    if (!t)
        return;
    if (atomic_load(&t->on)) {
        int rc = sp_runtime_trace_stop(rt);
        if (rc != SP_OK)
            fprintf(stderr, "streampool: warning: the trace %s was not written: %s\n", t->path,
                    sp_strerror(rc));
    }
    while (t->threads) {
        thread_buf *b = t->threads;
        t->threads = b->next;
        for (size_t c = 0; c < MAX_CHUNKS && b->chunks[c]; c++)
            free(b->chunks[c]);
        free(b);
    }
    free(t->pools);
    free(t->names);
    free(t->base_held);
    free(t->base_reserved);
    free(t->path);
    sp_mutex_destroy(&t->lock);
    free(t);
    atomic_store(&rt->dev.trace, NULL);
}
