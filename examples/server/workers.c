/* The worker pool (workers.h): a FIFO of jobs, one thread and one stream per worker, and the
 * gates that hold a request's stream. */
#include "workers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATES_MAX 64

typedef struct worker {
    workers *pool;
    cudaStream_t stream;
    char label[32];
    pthread_t thread;
    bool started;
} worker;

struct workers {
    sp_runtime *rt;
    int device;
    pthread_mutex_t lock;              /* the queue, `closing` and the gates */
    pthread_cond_t work;               /* a job was queued, or closing */
    pthread_cond_t gate;               /* a gate opened */
    job *head, *tail;
    bool closing;
    bool all_open;
    char open[GATES_MAX][TENANT_NAME_MAX + 1];
    size_t nopen;
    unsigned n;
    worker *w;
};

static bool gate_open_locked(const workers *w, const char *name)
{
    if (w->all_open)
        return true;
    for (size_t i = 0; i < w->nopen; i++)
        if (strcmp(w->open[i], name) == 0)
            return true;
    return false;
}

int workers_release(workers *w, const char *name)
{
    int rc = 0;
    pthread_mutex_lock(&w->lock);
    if (!gate_open_locked(w, name)) {
        if (w->nopen == GATES_MAX) {
            rc = -1;
        } else {
            snprintf(w->open[w->nopen++], sizeof w->open[0], "%s", name);
            pthread_cond_broadcast(&w->gate);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

void workers_open_all(workers *w)
{
    pthread_mutex_lock(&w->lock);
    w->all_open = true;
    pthread_cond_broadcast(&w->gate);
    pthread_mutex_unlock(&w->lock);
}

/* The "model": runs on the stream after the memsets for the job's delay, as a kernel would. */
static void CUDART_CB host_delay(void *arg)
{
    const job *j = arg;
    struct timespec d = {(time_t)(j->delay_us / 1000000u), (long)(j->delay_us % 1000000u) * 1000};
    while (nanosleep(&d, &d) != 0)
        ;
}

/* Keeps the worker, and so the job's buffers, until the gate opens. */
static void wait_gate(workers *w, const char *name)
{
    pthread_mutex_lock(&w->lock);
    while (!gate_open_locked(w, name))
        pthread_cond_wait(&w->gate, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

static void answer_error(job *j, unsigned http, const char *what, const char *detail)
{
    j->http_status = http;
    snprintf(j->reply, sizeof j->reply, "{\"tenant\":\"%s\",\"error\":\"%s\",\"detail\":\"%s\"}",
             j->tenant->name, what, detail);
}

/* The HTTP answer to an sp_request_alloc failure: the limit is 429 (retry later: memory in use
 * by the tenant's other requests will come back), a request the pool can never hold 413, the
 * device out of memory 503. */
static void answer_alloc_error(job *j, int rc)
{
    tenant *t = j->tenant;
    switch (rc) {
    case SP_ERR_LIMIT:
        atomic_fetch_add_explicit(&t->rejected_limit, 1, memory_order_relaxed);
        answer_error(j, 429, "over the tenant's limit now", sp_status_name(rc));
        break;
    case SP_ERR_TOO_LARGE:
        atomic_fetch_add_explicit(&t->rejected_too_large, 1, memory_order_relaxed);
        answer_error(j, 413, "larger than the device can allocate", sp_status_name(rc));
        break;
    case SP_ERR_NEVER_FITS:
        atomic_fetch_add_explicit(&t->rejected_too_large, 1, memory_order_relaxed);
        answer_error(j, 413, "larger than the tenant's limit can ever hold", sp_status_name(rc));
        break;
    case SP_ERR_OUT_OF_MEMORY:
        answer_error(j, 503, "device out of memory", sp_status_name(rc));
        break;
    default:
        answer_error(j, 500, "allocation failed", sp_status_name(rc));
        break;
    }
}

/* The figures of an ended request into its tenant's /metrics counters. */
static void count_request(tenant *t, const sp_request_stats *st)
{
    atomic_fetch_add_explicit(&t->request_freed_at_end_bytes, st->freed_at_end_bytes,
                              memory_order_relaxed);
    uint64_t peak = atomic_load_explicit(&t->request_peak_bytes, memory_order_relaxed);
    while (st->requested_peak > peak &&
           !atomic_compare_exchange_weak_explicit(&t->request_peak_bytes, &peak,
                                                  st->requested_peak, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* One request is one request scope of its tenant's pool on the worker's stream: the buffers are
 * the request's allocations, and its end frees them all, whatever failed, so that no path here
 * can leak one. */
static void serve(worker *me, job *j)
{
    tenant *t = j->tenant;
    sp_pool *pool = t->pool;
    sp_request req;
    int rc = sp_request_begin(pool, me->stream, t->name, &req);
    if (rc != SP_OK) {
        answer_error(j, 500, "sp_request_begin failed", sp_status_name(rc));
        return;
    }
    cudaError_t cerr = cudaSuccess;
    for (size_t i = 0; i < j->nbuf && rc == SP_OK && cerr == cudaSuccess; i++) {
        void *buf;
        rc = sp_request_alloc(pool, req, &buf, j->sizes[i]);
        if (rc == SP_OK)
            cerr = cudaMemsetAsync(buf, (int)(i + 1) & 0xff, j->sizes[i], me->stream);
    }
    if (rc == SP_OK && cerr == cudaSuccess)
        cerr = cudaLaunchHostFunc(me->stream, host_delay, j);
    bool ok = rc == SP_OK && cerr == cudaSuccess;
    /* a held request keeps its buffers allocated: live in its tenant's pool until released */
    if (ok && j->hold[0])
        wait_gate(me->pool, j->hold);
    /* A request that got its buffers waits for its work, then ends promising that: the end frees
     * the buffers with no CUDA call to settle them. A failed one is answered at once: its end
     * frees what it got in stream order, behind the memsets already queued, under a fence. */
    cudaError_t sync = ok ? cudaStreamSynchronize(me->stream) : cudaSuccess;
    unsigned flags = ok && sync == cudaSuccess ? SP_REQUEST_SYNCHRONIZED : 0;
    sp_request_stats st = {.size = sizeof st};
    int end_rc = sp_request_end(pool, req, flags, &st);
    if (end_rc == SP_OK)
        count_request(t, &st);
    if (rc != SP_OK) {
        answer_alloc_error(j, rc);
    } else if (cerr != cudaSuccess || sync != cudaSuccess) {
        answer_error(j, 500, "CUDA error", cudaGetErrorName(cerr != cudaSuccess ? cerr : sync));
    } else if (end_rc != SP_OK) {
        answer_error(j, 500, "sp_request_end failed", sp_status_name(end_rc));
    } else {
        atomic_fetch_add_explicit(&t->served_requests, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->served_bytes, j->bytes, memory_order_relaxed);
        j->http_status = 200;
        snprintf(j->reply, sizeof j->reply,
                 "{\"tenant\":\"%s\",\"buffers\":%zu,\"bytes\":%" PRIu64 ",\"delay_us\":%u,"
                 "\"stream\":\"%s\"}",
                 t->name, j->nbuf, j->bytes, j->delay_us, me->label);
    }
    if (end_rc != SP_OK || sync != cudaSuccess)
        fprintf(stderr, "streampool-server: %s: tenant %s: sp_request_end %s, synchronize %s\n",
                me->label, t->name, sp_status_name(end_rc), cudaGetErrorName(sync));
}

static void *worker_main(void *arg)
{
    worker *me = arg;
    workers *w = me->pool;
    cudaError_t err = cudaSetDevice(w->device);
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!w->head && !w->closing)
            pthread_cond_wait(&w->work, &w->lock);
        job *j = w->head;
        if (j) {
            w->head = j->next;
            if (!w->head)
                w->tail = NULL;
        }
        pthread_mutex_unlock(&w->lock);
        if (!j)
            break;
        if (err != cudaSuccess)
            answer_error(j, 500, "cudaSetDevice failed", cudaGetErrorName(err));
        else
            serve(me, j);
        j->done(j);
    }
    return NULL;
}

int workers_submit(workers *w, job *j)
{
    j->owner = w;
    j->next = NULL;
    pthread_mutex_lock(&w->lock);
    bool closing = w->closing;
    if (!closing) {
        if (w->tail)
            w->tail->next = j;
        else
            w->head = j;
        w->tail = j;
        pthread_cond_signal(&w->work);
    }
    pthread_mutex_unlock(&w->lock);
    return closing ? -1 : 0;
}

int workers_stop(workers *w)
{
    pthread_mutex_lock(&w->lock);
    w->closing = true;
    w->all_open = true;
    pthread_cond_broadcast(&w->work);
    pthread_cond_broadcast(&w->gate);
    pthread_mutex_unlock(&w->lock);
    int first = SP_OK;
    for (unsigned i = 0; i < w->n; i++) {
        worker *me = &w->w[i];
        if (me->started)
            pthread_join(me->thread, NULL);
        if (!me->stream)
            continue;
        int rc = sp_stream_release(w->rt, me->stream);
        cudaError_t err = cudaStreamDestroy(me->stream);
        if (rc == SP_OK && err != cudaSuccess)
            rc = SP_ERR_CUDA;
        if (rc != SP_OK && first == SP_OK)
            first = rc;
    }
    pthread_cond_destroy(&w->gate);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->lock);
    free(w->w);
    free(w);
    return first;
}

int workers_start(sp_runtime *rt, int device, unsigned n, workers **out, char *err, size_t errlen)
{
    workers *w = calloc(1, sizeof *w);
    worker *v = calloc(n, sizeof *v);
    if (!w || !v) {
        free(w);
        free(v);
        snprintf(err, errlen, "out of host memory");
        return SP_ERR_NO_HOST_MEMORY;
    }
    w->rt = rt;
    w->device = device;
    w->w = v;
    w->n = n;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->gate, NULL);
    int rc = SP_OK;
    cudaError_t cerr = cudaSetDevice(device);
    for (unsigned i = 0; i < n && rc == SP_OK && cerr == cudaSuccess; i++) {
        worker *me = &v[i];
        me->pool = w;
        snprintf(me->label, sizeof me->label, "worker-%u", i);
        cerr = cudaStreamCreateWithFlags(&me->stream, cudaStreamNonBlocking);
        if (cerr != cudaSuccess) {
            me->stream = NULL;
            break;
        }
        rc = sp_stream_set_name(rt, me->stream, me->label);
        if (rc == SP_OK && pthread_create(&me->thread, NULL, worker_main, me) != 0)
            rc = SP_ERR_NO_HOST_MEMORY;
        me->started = rc == SP_OK;
    }
    if (rc != SP_OK || cerr != cudaSuccess) {
        snprintf(err, errlen, "starting workers: %s",
                 cerr != cudaSuccess ? cudaGetErrorName(cerr) : sp_status_name(rc));
        (void)workers_stop(w);
        return rc != SP_OK ? rc : SP_ERR_CUDA;
    }
    *out = w;
    return SP_OK;
}
