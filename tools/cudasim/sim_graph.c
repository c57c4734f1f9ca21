/* cudasim stream capture and graphs (CUDA Programming Guide, "CUDA Graphs": stream capture,
 * cross-stream dependencies, prohibited and unhandled operations, invalidation; "Graph Memory
 * Nodes").
 *
 * - A capture sequence begins on one stream (its origin) and spreads to every stream that waits on
 *   an event recorded inside it. Each member stream keeps the set of nodes its next captured
 *   node depends on; event record copies that set into the event, event wait joins it.
 * - Captured work is kept as templates of the sim_op the call would have enqueued. A launch
 *   enqueues copies of them in capture order (a topological order of the graph): a node goes on
 *   the stream of its first dependency if that is the last node there, else on a stream of its
 *   own (the launch stream first, then handle-less "lanes" the executable graph keeps), after
 *   waits for its other dependencies. So the branches of a fork run concurrently, as on a GPU,
 *   and the launch stream waits for every lane at the end.
 * - Graph allocations live in their own address range (one reservation for every device), so
 *   the pools never see them. Each allocation node owns a fixed address from capture on; it is
 *   live from the launch that reaches it until a free node, cudaFreeAsync or cudaFree (or the
 *   next launch with cudaGraphInstantiateFlagAutoFreeOnLaunch). A graph's physical memory, the
 *   sum of its allocations in 2 MiB units, is charged to its device at the first launch and kept
 *   (like the driver's graph memory pool) until the graph is gone.
 * - What CUDA forbids during a capture fails with CUDA's error and invalidates the capture; a
 *   later cudaStreamEndCapture then ends it with cudaErrorStreamCaptureInvalidated and no graph. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sim_internal.h"

#define GRAPH_VA_SIZE ((size_t)64 << 30) /* host address space for every graph allocation */

typedef enum { GN_OP, GN_ALLOC, GN_FREE, GN_WAIT_EXTERNAL } gnode_kind;

struct CUgraphNode_st {
    gnode_kind kind;
    struct CUgraph_st *graph;
    struct CUgraphNode_st **deps;
    size_t ndeps;
    sim_op *op;            /* GN_OP: the template a launch copies */
    bool dst_dev, src_dev; /* GN_OP memcpy: which sides must be live device memory */
    char *ptr;             /* GN_ALLOC: its address; GN_FREE: the address it frees */
    size_t size;           /* GN_ALLOC: rounded size */
    bool live;             /* GN_ALLOC: allocated by a launch, not freed since */
    sim_stream *freed_on;  /* GN_ALLOC: the stream of a free from outside the graph (a */
    uint64_t freed_seq;    /* reference), which a relaunch must be ordered after */
    bool freed_in_capture; /* GN_ALLOC: a free node of this graph already frees it */
    struct CUevent_st *event; /* GN_WAIT_EXTERNAL */
    uint64_t mark;         /* traversal epoch (the unjoined-fork check) */
    sim_stream *run_on;    /* the current launch: the stream the node went to, */
    uint64_t run_seq;      /* and the seq after which it is complete */
};

struct CUgraph_st {
    int device;
    struct CUgraphNode_st **nodes;
    size_t n, cap;
    bool has_mem_nodes;    /* allocation or free nodes: one executable graph at a time */
    bool capturing;        /* still being built by a capture sequence */
    bool destroyed;        /* its handle is gone; freed once nothing else holds it */
    unsigned execs;
    size_t live_allocs;
    size_t charged;        /* physical bytes counted against the device */
    struct CUgraph_st *next;
};

struct CUgraphExec_st {
    struct CUgraph_st *graph;
    unsigned long long flags;
    sim_stream *last;      /* stream of the previous launch (a reference) */
    uint64_t last_seq;
    sim_stream **lanes;    /* handle-less streams for the branches of a fork */
    size_t nlanes;
    struct CUgraphExec_st *next;
};

typedef struct sim_capture {
    unsigned long long id;
    int device;
    sim_stream *origin;
    pthread_t thread;
    enum cudaStreamCaptureMode mode;
    bool invalidated;
    struct CUgraph_st *graph;
    struct sim_capturing *members;
    struct sim_capture *next;
} sim_capture;

/* A stream's part in a capture sequence. */
struct sim_capturing {
    sim_capture *cap;
    sim_stream *stream;    /* a reference */
    struct CUgraphNode_st **deps;
    size_t ndeps, depcap;
    cudaGraphEdgeData *edges; /* what cudaStreamGetCaptureInfo hands out, parallel to deps */
    struct sim_capturing *next;
};

/* An event whose last record was inside a capture: the capture's id and the recorded set. */
struct sim_event_capture {
    unsigned long long id;
    struct CUgraphNode_st **deps;
    size_t ndeps;
};

static atomic_int captures_active;
static _Atomic uintptr_t va_lo, va_hi;
static char *va_next;
static sim_capture *captures;
static unsigned long long next_capture_id;
static struct CUgraph_st *graphs;
static struct CUgraphExec_st *execs;
/* cudaGraphMemAttrUsedMemHigh and ReservedMemHigh per device (the current figures are the
 * device's graphs' charges summed: cudasim keeps no graph memory that no graph holds, so used
 * and reserved are one figure). */
static uint64_t graph_mem_high[SIM_MAX_DEVICES][2];
static uint64_t mark_epoch;
static _Thread_local enum cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;

static uint64_t graph_mem_current(int device);

static size_t round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

bool sim_graph_capturing_any(void)
{
    return atomic_load_explicit(&captures_active, memory_order_acquire) != 0;
}

bool sim_graph_owns(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a && a >= atomic_load_explicit(&va_lo, memory_order_acquire) &&
           a < atomic_load_explicit(&va_hi, memory_order_acquire);
}

/* ---- graphs and nodes ---- */

static struct CUgraph_st *graph_new(int device)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->device = device;
    g->next = graphs;
    graphs = g;
    sim_handle_add(g, SIM_H_GRAPH);
    return g;
}

static void node_free(struct CUgraphNode_st *n)
{
    if (n->freed_on)
        sim_stream_unref(n->freed_on);
    free(n->op);
    free(n->deps);
    free(n);
}

static void graph_maybe_free(struct CUgraph_st *g)
{
    if (!g->destroyed || g->capturing || g->execs || g->live_allocs)
        return;
    for (struct CUgraph_st **p = &graphs; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            break;
        }
    }
    if (g->charged)
        (void)sim_device_charge(g->device, g->charged, true);
    for (size_t i = 0; i < g->n; i++)
        node_free(g->nodes[i]);
    free(g->nodes);
    free(g);
    if (!graphs)
        va_next = (char *)atomic_load(&va_lo); /* no graph holds an address: start over */
}

static void graph_destroy_handle(struct CUgraph_st *g)
{
    sim_handle_remove(g);
    g->destroyed = true;
    graph_maybe_free(g);
}

/* Appends a node of `kind` depending on `deps`; NULL when out of host memory. */
static struct CUgraphNode_st *graph_add(struct CUgraph_st *g, gnode_kind kind,
                                        struct CUgraphNode_st *const *deps, size_t ndeps)
{
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct CUgraphNode_st **v = realloc(g->nodes, cap * sizeof *v);
        if (!v) {
            free(n);
            return NULL;
        }
        g->nodes = v;
        g->cap = cap;
    }
    if (ndeps && !(n->deps = malloc(ndeps * sizeof *n->deps))) {
        free(n);
        return NULL;
    }
    if (ndeps)
        memcpy(n->deps, deps, ndeps * sizeof *n->deps);
    n->ndeps = ndeps;
    n->kind = kind;
    n->graph = g;
    g->nodes[g->n++] = n;
    if (kind == GN_ALLOC || kind == GN_FREE)
        g->has_mem_nodes = true;
    return n;
}

/* The allocation node whose range holds p (exact: its start only), in any graph. */
static struct CUgraphNode_st *alloc_node_at(const void *p, bool exact)
{
    const char *c = p;
    for (struct CUgraph_st *g = graphs; g; g = g->next)
        for (size_t i = 0; i < g->n; i++) {
            struct CUgraphNode_st *n = g->nodes[i];
            if (n->kind == GN_ALLOC && (exact ? c == n->ptr : c >= n->ptr && c < n->ptr + n->size))
                return n;
        }
    return NULL;
}

bool sim_graph_range_live(const void *p, size_t n)
{
    struct CUgraphNode_st *a = alloc_node_at(p, false);
    return a && a->live && n <= (size_t)(a->ptr + a->size - (const char *)p);
}

int sim_graph_alloc_device(const void *p)
{
    struct CUgraphNode_st *a = alloc_node_at(p, false);
    return a && a->live ? a->graph->device : -1;
}

/* Frees graph allocation a; `on` (NULL: a host-synchronous free, or a free node of a's own
 * graph, which every relaunch follows) is the stream whose op `seq` is the free. */
static void alloc_release(struct CUgraphNode_st *a, sim_stream *on, uint64_t seq)
{
    if (on)
        sim_stream_ref(on);
    if (a->freed_on)
        sim_stream_unref(a->freed_on);
    a->freed_on = on;
    a->freed_seq = seq;
    a->live = false;
    a->graph->live_allocs--;
    graph_maybe_free(a->graph);
}

static char *va_take(size_t size)
{
    if (!atomic_load(&va_lo)) {
        void *m = mmap(NULL, GRAPH_VA_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        va_next = m;
        atomic_store(&va_hi, (uintptr_t)m + GRAPH_VA_SIZE);
        atomic_store(&va_lo, (uintptr_t)m);
    }
    if (size > atomic_load(&va_hi) - (uintptr_t)va_next)
        return NULL;
    char *p = va_next;
    va_next += size;
    return p;
}

/* ---- capture sequences ---- */

static sim_capture *capture_by_id(unsigned long long id)
{
    for (sim_capture *c = captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Grows the dependency and edge arrays together to cap entries. */
static bool deps_reserve(struct sim_capturing *m, size_t cap)
{
    struct CUgraphNode_st **d = realloc(m->deps, cap * sizeof *d);
    cudaGraphEdgeData *e = realloc(m->edges, cap * sizeof *e);
    if (d)
        m->deps = d;
    if (e)
        m->edges = e;
    if (!d || !e)
        return false;
    m->depcap = cap;
    return true;
}

static bool deps_set(struct sim_capturing *m, struct CUgraphNode_st *const *deps, size_t n)
{
    if (n > m->depcap && !deps_reserve(m, n))
        return false;
    if (n)
        memmove(m->deps, deps, n * sizeof *deps);
    m->ndeps = n;
    return true;
}

static bool deps_add(struct sim_capturing *m, struct CUgraphNode_st *const *deps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bool have = false;
        for (size_t j = 0; j < m->ndeps && !have; j++)
            have = m->deps[j] == deps[i];
        if (have)
            continue;
        if (m->ndeps == m->depcap && !deps_reserve(m, m->depcap ? m->depcap * 2 : 4))
            return false;
        m->deps[m->ndeps++] = deps[i];
    }
    return true;
}

static struct sim_capturing *member_add(sim_capture *c, sim_stream *s)
{
    struct sim_capturing *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cap = c;
    m->stream = s;
    sim_stream_ref(s);
    m->next = c->members;
    c->members = m;
    s->capture = m;
    return m;
}

/* Takes every member out of capture; the graph goes too unless `keep_graph`. */
static void capture_end(sim_capture *c, bool keep_graph)
{
    for (sim_capture **p = &captures; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    while (c->members) {
        struct sim_capturing *m = c->members;
        c->members = m->next;
        m->stream->capture = NULL;
        sim_stream_unref(m->stream);
        free(m->deps);
        free(m->edges);
        free(m);
    }
    c->graph->capturing = false;
    if (!keep_graph)
        graph_destroy_handle(c->graph);
    free(c);
    atomic_fetch_sub_explicit(&captures_active, 1, memory_order_release);
}

/* Does a capture on s's device hold a blocking stream, so that the legacy stream is unusable? */
static bool legacy_blocked(const sim_stream *legacy, bool invalidate)
{
    bool blocked = false;
    for (sim_capture *c = captures; c; c = c->next) {
        for (struct sim_capturing *m = c->members; m; m = m->next) {
            if (m->stream->device == legacy->device && !(m->stream->flags & cudaStreamNonBlocking)) {
                blocked = true;
                if (invalidate)
                    c->invalidated = true;
                break;
            }
        }
    }
    return blocked;
}

/* Under the lock, for a call that would enqueue work on s. */
static cudaError_t enqueue_check(sim_stream *s, struct sim_capturing **cap)
{
    *cap = NULL;
    if (!sim_graph_capturing_any())
        return cudaSuccess;
    if (s->capture) {
        if (s->capture->cap->invalidated)
            return cudaErrorStreamCaptureInvalidated;
        *cap = s->capture;
        return cudaSuccess;
    }
    /* Programming Guide, prohibited operations: the legacy stream would depend on the capture */
    if (s->legacy && legacy_blocked(s, true))
        return cudaErrorStreamCaptureImplicit;
    return cudaSuccess;
}

cudaError_t sim_graph_stream_check(sim_stream *s)
{
    if (!sim_graph_capturing_any())
        return cudaSuccess;
    struct sim_capturing *m;
    cudaError_t err = enqueue_check(s, &m);
    if (err || !m)
        return err;
    /* synchronizing or querying a capturing stream: it holds nothing scheduled to execute */
    m->cap->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t sim_graph_device_sync_check(int device)
{
    bool bad = false;
    for (sim_capture *c = captures; c; c = c->next) {
        if (c->device == device) {
            c->invalidated = true;
            bad = true;
        }
    }
    return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t sim_graph_unsafe_call(void)
{
    if (!sim_graph_capturing_any())
        return cudaSuccess;
    sim_lock();
    cudaError_t err = sim_graph_unsafe_call_locked();
    sim_unlock();
    return err;
}

cudaError_t sim_graph_unsafe_call_locked(void)
{
    if (!sim_graph_capturing_any())
        return cudaSuccess;
    /* cudaThreadExchangeStreamCaptureMode: which captures forbid this thread's unsafe calls */
    pthread_t self = pthread_self();
    bool bad = false;
    for (sim_capture *c = captures; c; c = c->next) {
        if (c->mode == cudaStreamCaptureModeRelaxed)
            continue;
        bool local = pthread_equal(c->thread, self);
        if ((local && tls_mode != cudaStreamCaptureModeRelaxed) ||
            (!local && tls_mode == cudaStreamCaptureModeGlobal &&
             c->mode == cudaStreamCaptureModeGlobal)) {
            c->invalidated = true;
            bad = true;
        }
    }
    return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Adds a node to m's capture after m's current dependencies; m then depends on it alone. */
static struct CUgraphNode_st *capture_node(struct sim_capturing *m, gnode_kind kind)
{
    struct CUgraphNode_st *n = graph_add(m->cap->graph, kind, m->deps, m->ndeps);
    if (n && !deps_set(m, &n, 1))
        return NULL; /* n stays in the graph; the capture fails as out of memory */
    return n;
}

bool sim_graph_capture_op(sim_stream *s, sim_op *op, bool dst_dev, bool src_dev,
                          cudaError_t *err)
{
    struct sim_capturing *m;
    *err = enqueue_check(s, &m);
    if (!*err && !m)
        return false;
    if (!*err) {
        struct CUgraphNode_st *n = capture_node(m, GN_OP);
        if (!n) {
            *err = cudaErrorMemoryAllocation;
        } else {
            n->op = op;
            n->dst_dev = dst_dev;
            n->src_dev = src_dev;
            return true;
        }
    }
    free(op);
    return true;
}

/* ---- events ---- */

void sim_graph_event_forget(struct CUevent_st *e)
{
    if (e->capture) {
        free(e->capture->deps);
        free(e->capture);
        e->capture = NULL;
    }
}

cudaError_t sim_graph_event_usable(struct CUevent_st *e)
{
    if (!e->capture)
        return cudaSuccess;
    sim_capture *c = capture_by_id(e->capture->id);
    if (c)
        c->invalidated = true;
    return cudaErrorCapturedEvent;
}

/* cudaEventRecord on s: true if the capture took it (or refused it, *err says). */
bool sim_graph_event_record(struct CUevent_st *e, sim_stream *s, cudaError_t *err)
{
    struct sim_capturing *m;
    *err = enqueue_check(s, &m);
    if (!*err && !m) {
        sim_graph_event_forget(e); /* a record outside capture replaces the captured one */
        return false;
    }
    if (*err)
        return true;
    struct sim_event_capture *ec = calloc(1, sizeof *ec);
    if (!ec || (m->ndeps && !(ec->deps = malloc(m->ndeps * sizeof *ec->deps)))) {
        free(ec);
        *err = cudaErrorMemoryAllocation;
        return true;
    }
    if (m->ndeps)
        memcpy(ec->deps, m->deps, m->ndeps * sizeof *ec->deps);
    ec->ndeps = m->ndeps;
    ec->id = m->cap->id;
    sim_graph_event_forget(e);
    e->capture = ec;
    return true;
}

/* cudaStreamWaitEvent(s, e): true if capture rules decided the call (*err says how). */
bool sim_graph_event_wait(sim_stream *s, struct CUevent_st *e, unsigned flags, cudaError_t *err)
{
    struct sim_capturing *m;
    *err = cudaSuccess;
    if (!e->capture && !sim_graph_capturing_any())
        return false;
    *err = enqueue_check(s, &m);
    if (*err)
        return true;
    if (e->capture) {
        sim_capture *c = capture_by_id(e->capture->id);
        if (!c) {
            *err = cudaErrorCapturedEvent; /* recorded in a capture that has ended */
        } else if (c->invalidated) {
            *err = cudaErrorStreamCaptureInvalidated;
        } else if (m && m->cap != c) {
            c->invalidated = m->cap->invalidated = true; /* would merge two sequences */
            *err = cudaErrorStreamCaptureMerge;
        } else if (!m && s->legacy) {
            c->invalidated = true; /* the legacy stream cannot take part in a capture */
            *err = cudaErrorStreamCaptureImplicit;
        } else if (!m && !(m = member_add(c, s))) {
            *err = cudaErrorMemoryAllocation;
        } else if (!deps_add(m, e->capture->deps, e->capture->ndeps)) {
            *err = cudaErrorMemoryAllocation;
        }
        return true;
    }
    if (!m)
        return false;
    if (!(flags & cudaEventWaitExternal) || !e->recorded) {
        /* a dependency from the capture on work outside it (Programming Guide) */
        m->cap->invalidated = true;
        *err = cudaErrorStreamCaptureIsolation;
        return true;
    }
    struct CUgraphNode_st *n = capture_node(m, GN_WAIT_EXTERNAL);
    if (!n)
        *err = cudaErrorMemoryAllocation;
    else
        n->event = e;
    return true;
}

/* ---- stream-ordered allocation inside a capture ---- */

bool sim_graph_malloc_async(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                            cudaError_t *err)
{
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, err);
    struct sim_capturing *m = NULL;
    bool handled = false;
    if (s && !sim_g.devices[s->device].sticky) {
        *err = enqueue_check(s, &m);
        handled = *err || m;
    }
    if (handled && m) {
        sim_device *d = &sim_g.devices[s->device];
        struct CUgraphNode_st *n = NULL;
        char *p = NULL;
        if (pool && (!sim_handle_valid(pool, SIM_H_POOL) || pool->p.destroyed ||
                     pool->p.device != s->device))
            *err = cudaErrorInvalidValue;
        else if (size == 0)
            *ptr = NULL; /* as outside a capture: no memory, no node */
        else if (size > d->capacity || !(p = va_take(round_up(size, SIM_ALLOC_ALIGN))))
            *err = cudaErrorMemoryAllocation;
        else if (!(n = capture_node(m, GN_ALLOC)))
            *err = cudaErrorMemoryAllocation;
        if (n) {
            n->ptr = p;
            n->size = round_up(size, SIM_ALLOC_ALIGN);
            *ptr = p;
        }
    }
    sim_unlock();
    return handled;
}

bool sim_graph_free_async(void *ptr, cudaStream_t stream, cudaError_t *err)
{
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, err);
    struct sim_capturing *m = NULL;
    bool handled = false;
    if (s && !sim_g.devices[s->device].sticky) {
        *err = enqueue_check(s, &m);
        handled = *err || m || sim_graph_owns(ptr);
    }
    if (handled && !*err && ptr) {
        struct CUgraphNode_st *a = alloc_node_at(ptr, true);
        if (m) {
            struct CUgraphNode_st *n = NULL;
            /* cudaGraphAddMemFreeNode: only an address an allocation node returned, once */
            if (!a || (a->graph == m->cap->graph && a->freed_in_capture)) {
                m->cap->invalidated = true;
                *err = cudaErrorInvalidValue;
            } else if (!(n = capture_node(m, GN_FREE))) {
                *err = cudaErrorMemoryAllocation;
            } else {
                n->ptr = ptr;
                if (a->graph == m->cap->graph)
                    a->freed_in_capture = true;
            }
        } else if (!a || !a->live) {
            *err = cudaErrorInvalidValue;
        } else {
            /* Graph Memory Nodes: graph memory may be freed in a stream; the free is an op there,
             * so a relaunch can be checked for being ordered after it */
            sim_op *op = sim_op_new(OP_FREE);
            if (!op) {
                *err = cudaErrorMemoryAllocation;
            } else {
                sim_stream_implicit_sync(s);
                if (!(*err = sim_stream_enqueue(s, op)))
                    alloc_release(a, s, s->submitted);
            }
        }
    }
    sim_unlock();
    return handled;
}

bool sim_graph_free_sync(void *ptr, cudaError_t *err)
{
    if (!sim_graph_owns(ptr))
        return false;
    sim_lock();
    struct CUgraphNode_st *a = alloc_node_at(ptr, true);
    if (!a || !a->live) {
        *err = cudaErrorInvalidValue;
    } else {
        int device = a->graph->device;
        sim_device_sync(device);
        alloc_release(a, NULL, 0);
        *err = sim_g.devices[device].sticky;
    }
    sim_unlock();
    return true;
}

/* ---- API: capture ---- */

static bool mode_valid(enum cudaStreamCaptureMode mode)
{
    return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
           mode == cudaStreamCaptureModeRelaxed;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamBeginCapture);
    if (err)
        return sim_ret(err);
    if (!mode_valid(mode))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    if (s && sim_g.devices[s->device].sticky) {
        err = sim_g.devices[s->device].sticky;
    } else if (s && s->legacy) {
        err = cudaErrorStreamCaptureUnsupported; /* the legacy stream cannot capture */
    } else if (s && s->capture) {
        err = cudaErrorIllegalState;
    } else if (s) {
        sim_capture *c = calloc(1, sizeof *c);
        struct CUgraph_st *g = c ? graph_new(s->device) : NULL;
        if (!g || !member_add(c, s)) {
            if (g)
                graph_destroy_handle(g);
            free(c);
            err = cudaErrorMemoryAllocation;
        } else {
            g->capturing = true;
            c->id = ++next_capture_id;
            c->device = s->device;
            c->origin = s;
            c->thread = pthread_self();
            c->mode = mode;
            c->graph = g;
            c->next = captures;
            captures = c;
            atomic_fetch_add_explicit(&captures_active, 1, memory_order_release);
        }
    }
    sim_unlock();
    return sim_ret(err);
}

/* Is every member's last work an ancestor of (or among) the origin's dependencies? Otherwise a
 * fork was not joined back into the origin stream. */
static bool capture_joined(sim_capture *c)
{
    struct sim_capturing *origin = c->origin->capture;
    uint64_t epoch = ++mark_epoch;
    size_t cap = origin->ndeps + 16, len = 0;
    struct CUgraphNode_st **stack = malloc(cap * sizeof *stack);
    if (!stack)
        abort(); /* out of host memory in the emulator itself */
    for (size_t i = 0; i < origin->ndeps; i++) {
        origin->deps[i]->mark = epoch;
        stack[len++] = origin->deps[i];
    }
    while (len) {
        struct CUgraphNode_st *n = stack[--len];
        if (len + n->ndeps > cap) {
            cap = (len + n->ndeps) * 2;
            if (!(stack = realloc(stack, cap * sizeof *stack)))
                abort();
        }
        for (size_t i = 0; i < n->ndeps; i++) {
            if (n->deps[i]->mark != epoch) {
                n->deps[i]->mark = epoch;
                stack[len++] = n->deps[i];
            }
        }
    }
    free(stack);
    for (struct sim_capturing *m = c->members; m; m = m->next)
        for (size_t i = 0; i < m->ndeps; i++)
            if (m->deps[i]->mark != epoch)
                return false;
    return true;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamEndCapture);
    if (err)
        return sim_ret(err);
    if (!pGraph)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    sim_capture *c = s && s->capture ? s->capture->cap : NULL;
    if (s && !c) {
        err = cudaErrorIllegalState;
    } else if (c && c->origin != s) {
        c->invalidated = true;
        err = cudaErrorStreamCaptureUnmatched;
    } else if (c && c->mode != cudaStreamCaptureModeRelaxed &&
               !pthread_equal(c->thread, pthread_self())) {
        c->invalidated = true;
        err = cudaErrorStreamCaptureWrongThread;
    } else if (c) {
        bool ok = !c->invalidated && capture_joined(c);
        err = c->invalidated ? cudaErrorStreamCaptureInvalidated
                             : ok ? cudaSuccess : cudaErrorStreamCaptureUnjoined;
        cudaGraph_t g = c->graph;
        capture_end(c, ok);
        *pGraph = ok ? g : NULL;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamIsCapturing);
    if (err)
        return sim_ret(err);
    if (!status)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (s && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    else if (s && s->legacy && legacy_blocked(s, false))
        err = cudaErrorStreamCaptureImplicit; /* the capture itself stays valid */
    else if (s && s->capture)
        st = s->capture->cap->invalidated ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
    sim_unlock();
    if (err)
        return sim_ret(err);
    *status = st;
    return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const cudaGraphEdgeData **edgeData_out,
                                     size_t *numDependencies_out)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamGetCaptureInfo);
    if (err)
        return sim_ret(err);
    if (!captureStatus_out || (edgeData_out && !dependencies_out))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    if (s && sim_g.devices[s->device].sticky) {
        err = sim_g.devices[s->device].sticky;
    } else if (s && s->legacy && legacy_blocked(s, false)) {
        err = cudaErrorStreamCaptureImplicit;
    } else if (s && !s->capture) {
        *captureStatus_out = cudaStreamCaptureStatusNone;
    } else if (s && s->capture->cap->invalidated) {
        *captureStatus_out = cudaStreamCaptureStatusInvalidated;
    } else if (s) {
        struct sim_capturing *m = s->capture;
        *captureStatus_out = cudaStreamCaptureStatusActive;
        if (id_out)
            *id_out = m->cap->id;
        if (graph_out)
            *graph_out = m->cap->graph;
        if (m->ndeps)
            memset(m->edges, 0, m->ndeps * sizeof *m->edges);
        if (dependencies_out)
            *dependencies_out = m->ndeps ? (const cudaGraphNode_t *)m->deps : NULL;
        if (edgeData_out)
            *edgeData_out = m->ndeps ? m->edges : NULL;
        if (numDependencies_out)
            *numDependencies_out = m->ndeps;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    cudaError_t err = sim_enter(SIM_API_cudaThreadExchangeStreamCaptureMode);
    if (err)
        return sim_ret(err);
    if (!mode || !mode_valid(*mode))
        return sim_ret(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = tls_mode;
    tls_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* A destroyed stream leaves its capture: the sequence cannot be completed without it. */
void sim_graph_stream_destroyed(sim_stream *s)
{
    if (!s->capture)
        return;
    sim_capture *c = s->capture->cap;
    if (c->origin == s) {
        capture_end(c, false); /* nothing can end it any more */
        return;
    }
    c->invalidated = true;
}

/* ---- API: graphs ---- */

static cudaError_t instantiate(sim_api api, cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                               unsigned long long flags)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    const unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                     cudaGraphInstantiateFlagUseNodePriority;
    if (!pGraphExec || (flags & ~known))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    struct CUgraphExec_st *x = NULL;
    if (!sim_handle_valid(graph, SIM_H_GRAPH) || graph->capturing)
        err = cudaErrorInvalidValue;
    else if (graph->has_mem_nodes && graph->execs)
        err = cudaErrorInvalidValue; /* one executable graph at a time with memory nodes */
    else if (!(x = calloc(1, sizeof *x)))
        err = cudaErrorMemoryAllocation;
    if (x) {
        x->graph = graph;
        x->flags = flags;
        x->next = execs;
        execs = x;
        graph->execs++;
        sim_handle_add(x, SIM_H_GRAPH_EXEC);
        *pGraphExec = x;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    return instantiate(SIM_API_cudaGraphInstantiate, pGraphExec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags)
{
    return instantiate(SIM_API_cudaGraphInstantiateWithFlags, pGraphExec, graph, flags);
}

/* Enqueues a copy of n's template on s, checking its ranges as of now (in stream order). */
static cudaError_t launch_op(sim_stream *s, const struct CUgraphNode_st *n)
{
    sim_op *op = sim_op_new(n->op->kind);
    if (!op)
        return cudaErrorMemoryAllocation;
    op->u = n->op->u;
    if (op->kind == OP_MEMSET)
        op->bad_address = !sim_range_live(op->u.set.dst, op->u.set.count);
    else if (op->kind == OP_MEMCPY)
        op->bad_address = (n->dst_dev && !sim_range_live(op->u.copy.dst, op->u.copy.count)) ||
                          (n->src_dev && !sim_range_live(op->u.copy.src, op->u.copy.count));
    return sim_stream_enqueue(s, op);
}

/* A free node whose allocation is not live: a device fault when it runs, as a bad access. */
static cudaError_t launch_fault(sim_stream *s)
{
    sim_op *op = sim_op_new(OP_MEMSET);
    if (!op)
        return cudaErrorMemoryAllocation;
    op->bad_address = true;
    return sim_stream_enqueue(s, op);
}

/* Is s ordered after every free of g's allocations made outside g (same stream, an event
 * dependency, or a host synchronize that saw it)? Otherwise the launch would reuse the memory
 * while work before the free may still use it. */
static bool launch_follows_frees(struct CUgraph_st *g, sim_stream *s)
{
    for (size_t i = 0; i < g->n; i++) {
        struct CUgraphNode_st *a = g->nodes[i];
        if (a->kind != GN_ALLOC || !a->freed_on || a->freed_on == s)
            continue;
        if (sim_clock_get(&s->clock, a->freed_on->id) < a->freed_seq &&
            a->freed_on->observed < a->freed_seq)
            return false;
    }
    return true;
}

/* Lane k of x, created on first use. */
static sim_stream *launch_lane(struct CUgraphExec_st *x, size_t k)
{
    if (k < x->nlanes)
        return x->lanes[k];
    sim_stream **v = realloc(x->lanes, (k + 1) * sizeof *v);
    if (!v)
        return NULL;
    x->lanes = v;
    if (!(v[k] = sim_stream_new_internal(x->graph->device)))
        return NULL;
    x->nlanes = k + 1;
    return v[k];
}

/* Enqueues node n of g on `lane`, or applies it at this point of host order (memory nodes). */
static cudaError_t launch_node(struct CUgraph_st *g, struct CUgraphNode_st *n, sim_stream *lane)
{
    switch (n->kind) {
    case GN_OP:
        return launch_op(lane, n);
    case GN_ALLOC:
        n->live = true;
        g->live_allocs++;
        return cudaSuccess;
    case GN_FREE: {
        struct CUgraphNode_st *a = alloc_node_at(n->ptr, true);
        if (!a || !a->live)
            return launch_fault(lane);
        alloc_release(a, a->graph == g ? NULL : lane, lane->submitted);
        return cudaSuccess;
    }
    case GN_WAIT_EXTERNAL:
        if (sim_handle_valid(n->event, SIM_H_EVENT) && n->event->recorded && !n->event->capture)
            return sim_stream_wait_for(lane, n->event->stream, n->event->seq, NULL);
        return cudaSuccess;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaGraphLaunch);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = NULL;
    struct sim_capturing *m = NULL;
    if (!sim_handle_valid(graphExec, SIM_H_GRAPH_EXEC))
        err = cudaErrorInvalidValue;
    else if ((s = sim_stream_resolve(stream, &err)) && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    else if (s && s->device != graphExec->graph->device)
        err = cudaErrorInvalidValue;
    else if (s && !(err = enqueue_check(s, &m)) && m) {
        m->cap->invalidated = true; /* cudasim does not capture graph launches (child graphs) */
        err = cudaErrorStreamCaptureUnsupported;
    }
    struct CUgraph_st *g = err ? NULL : graphExec->graph;
    if (g)
        sim_stream_implicit_sync(s); /* rule 14, before the checks that read s's clock */
    if (g && !launch_follows_frees(g, s))
        err = cudaErrorInvalidValue; /* cudasim: an unordered free is not yet a free here */
    else if (g && g->live_allocs) {
        if (!(graphExec->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch)) {
            err = cudaErrorInvalidValue; /* cudaGraphLaunch: unfreed allocations of a launch */
        } else {
            for (size_t i = 0; i < g->n; i++)
                if (g->nodes[i]->kind == GN_ALLOC && g->nodes[i]->live)
                    g->nodes[i]->live = false;
            g->live_allocs = 0;
        }
    }
    if (!err && g && g->has_mem_nodes && !g->charged) {
        size_t bytes = 0;
        for (size_t i = 0; i < g->n; i++)
            if (g->nodes[i]->kind == GN_ALLOC)
                bytes += g->nodes[i]->size;
        bytes = round_up(bytes, SIM_CHUNK);
        if (bytes && !sim_device_charge(g->device, bytes, false))
            err = cudaErrorMemoryAllocation;
        else
            g->charged = bytes;
        uint64_t now = graph_mem_current(g->device);
        for (int k = 0; k < 2; k++)
            if (graph_mem_high[g->device][k] < now)
                graph_mem_high[g->device][k] = now;
    }
    if (!err && g) {
        /* each launch is ordered after the previous launch of the same executable graph */
        if (graphExec->last)
            err = sim_stream_wait_for(s, graphExec->last, graphExec->last_seq, NULL);
        uint64_t start = s->submitted;
        size_t used = 0;
        for (size_t i = 0; !err && i < g->n; i++) {
            struct CUgraphNode_st *n = g->nodes[i];
            sim_stream *lane = NULL;
            if (n->ndeps ? n->deps[0]->run_on->submitted == n->deps[0]->run_seq
                         : s->submitted == start)
                lane = n->ndeps ? n->deps[0]->run_on : s;
            else if (!(lane = launch_lane(graphExec, used++)))
                err = cudaErrorMemoryAllocation;
            else
                err = sim_stream_wait_for(lane, s, start, NULL);
            for (size_t k = 0; !err && k < n->ndeps; k++)
                err = sim_stream_wait_for(lane, n->deps[k]->run_on, n->deps[k]->run_seq, NULL);
            if (!err)
                err = launch_node(g, n, lane);
            n->run_on = lane;
            n->run_seq = lane ? lane->submitted : 0;
        }
        for (size_t k = 0; !err && k < used; k++)
            err = sim_stream_wait_for(s, graphExec->lanes[k], graphExec->lanes[k]->submitted, NULL);
        sim_stream_ref(s);
        if (graphExec->last)
            sim_stream_unref(graphExec->last);
        graphExec->last = s;
        graphExec->last_seq = s->submitted;
    }
    sim_unlock();
    return sim_ret(err);
}

static void exec_free(struct CUgraphExec_st *x)
{
    for (struct CUgraphExec_st **p = &execs; *p; p = &(*p)->next) {
        if (*p == x) {
            *p = x->next;
            break;
        }
    }
    sim_handle_remove(x);
    if (x->last)
        sim_stream_unref(x->last);
    for (size_t k = 0; k < x->nlanes; k++)
        sim_stream_destroy_internal(x->lanes[k]);
    free(x->lanes);
    x->graph->execs--;
    graph_maybe_free(x->graph);
    free(x);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    cudaError_t err = sim_enter(SIM_API_cudaGraphExecDestroy);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(graphExec, SIM_H_GRAPH_EXEC))
        err = cudaErrorInvalidValue;
    else
        exec_free(graphExec); /* unfreed graph allocations stay valid until freed */
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    cudaError_t err = sim_enter(SIM_API_cudaGraphDestroy);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(graph, SIM_H_GRAPH) || graph->capturing)
        err = cudaErrorInvalidValue;
    else
        graph_destroy_handle(graph);
    sim_unlock();
    return sim_ret(err);
}

/* ---- graph memory: attributes and trim ---- */

/* Under the lock: the physical memory the device's graphs hold. */
static uint64_t graph_mem_current(int device)
{
    uint64_t sum = 0;
    for (struct CUgraph_st *g = graphs; g; g = g->next)
        if (g->device == device)
            sum += g->charged;
    return sum;
}

/* Under the lock: has a launch of g work not yet executed? */
static bool graph_running(const struct CUgraph_st *g)
{
    for (const struct CUgraphExec_st *x = execs; x; x = x->next)
        if (x->graph == g && x->last && atomic_load(&x->last->completed) < x->last_seq)
            return true;
    return false;
}

/* Runtime API: the figures of the device's graph allocator, as cuuint64_t. */
cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                           void *value)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceGetGraphMemAttribute);
    if (err)
        return sim_ret(err);
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    uint64_t v = 0;
    if (!sim_dev(device))
        err = cudaErrorInvalidDevice;
    else if (attr == cudaGraphMemAttrUsedMemCurrent || attr == cudaGraphMemAttrReservedMemCurrent)
        v = graph_mem_current(device);
    else if (attr == cudaGraphMemAttrUsedMemHigh)
        v = graph_mem_high[device][0];
    else if (attr == cudaGraphMemAttrReservedMemHigh)
        v = graph_mem_high[device][1];
    else
        err = cudaErrorInvalidValue;
    sim_unlock();
    if (err)
        return sim_ret(err);
    memcpy(value, &v, sizeof v);
    return cudaSuccess;
}

/* Only the high watermarks, and only to zero ("High watermark can only be reset to zero"); as
 * for pools (rule 8), a reset watermark starts again from the current figure. */
cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                           void *value)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceSetGraphMemAttribute);
    if (err)
        return sim_ret(err);
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    uint64_t v;
    memcpy(&v, value, sizeof v);
    sim_lock();
    if (!sim_dev(device))
        err = cudaErrorInvalidDevice;
    else if ((attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh) ||
             v != 0)
        err = cudaErrorInvalidValue;
    else
        graph_mem_high[device][attr == cudaGraphMemAttrReservedMemHigh] =
            graph_mem_current(device);
    sim_unlock();
    return sim_ret(err);
}

/* Frees the physical memory of every graph of the device that is neither running nor holding
 * a live allocation; such a graph takes its memory again at its next launch. */
cudaError_t cudaDeviceGraphMemTrim(int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceGraphMemTrim);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_dev(device)) {
        err = cudaErrorInvalidDevice;
    } else {
        for (struct CUgraph_st *g = graphs; g; g = g->next) {
            if (g->device != device || !g->charged || g->live_allocs || graph_running(g))
                continue;
            (void)sim_device_charge(device, g->charged, true);
            g->charged = 0;
        }
    }
    sim_unlock();
    return sim_ret(err);
}

/* ---- reset ---- */

void sim_graphs_reset(void)
{
    while (captures)
        capture_end(captures, false);
    while (execs)
        exec_free(execs);
    for (struct CUgraph_st *g = graphs, *next; g; g = next) {
        next = g->next;
        for (size_t i = 0; i < g->n; i++)
            if (g->nodes[i]->kind == GN_ALLOC)
                g->nodes[i]->live = false;
        g->live_allocs = 0;
        if (!g->destroyed)
            graph_destroy_handle(g);
        else
            graph_maybe_free(g);
    }
    if (atomic_load(&va_lo))
        madvise((void *)atomic_load(&va_lo), GRAPH_VA_SIZE, MADV_DONTNEED);
    tls_mode = cudaStreamCaptureModeGlobal;
    memset(graph_mem_high, 0, sizeof graph_mem_high);
}

void sim_graphs_device_reset(int device)
{
    for (sim_capture *c = captures, *next; c; c = next) {
        next = c->next;
        if (c->device == device)
            capture_end(c, false);
    }
    for (struct CUgraphExec_st *x = execs, *next; x; x = next) {
        next = x->next;
        if (x->graph->device == device)
            exec_free(x);
    }
    for (struct CUgraph_st *g = graphs, *next; g; g = next) {
        next = g->next;
        if (g->device != device)
            continue;
        for (size_t i = 0; i < g->n; i++)
            if (g->nodes[i]->kind == GN_ALLOC)
                g->nodes[i]->live = false;
        g->live_allocs = 0;
        if (g->charged)
            (void)sim_device_charge(device, g->charged, true);
        g->charged = 0;
        graph_maybe_free(g);
    }
    graph_mem_high[device][0] = graph_mem_high[device][1] = 0;
}
