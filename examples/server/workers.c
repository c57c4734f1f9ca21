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

/* The HTTP answer to an sp_alloc failure: the limit is 429 (retry later: memory in use by the
 * tenant's other requests will come back), a request the pool can never hold 413, the device
 * out of memory 503. */
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
    case SP_ERR_OUT_OF_MEMORY:
        answer_error(j, 503, "device out of memory", sp_status_name(rc));
        break;
    default:
        answer_error(j, 500, "allocation failed", sp_status_name(rc));
        break;
    }
}

static void serve(worker *me, job *j)
{
    sp_pool *pool = j->tenant->pool;
    void *buf[JOB_MAX_BUFFERS];
    size_t got = 0;
    int rc = SP_OK;
    cudaError_t cerr = cudaSuccess;
    for (; got < j->nbuf; got++) {
        rc = sp_alloc(pool, &buf[got], j->sizes[got], me->stream);
        if (rc != SP_OK)
            break;
        cerr = cudaMemsetAsync(buf[got], (int)(got + 1) & 0xff, j->sizes[got], me->stream);
        if (cerr != cudaSuccess) {
            got++;
            break;
        }
    }
    if (rc == SP_OK && cerr == cudaSuccess)
        cerr = cudaLaunchHostFunc(me->stream, host_delay, j);
    /* a held request keeps its buffers allocated: live in its tenant's pool until released */
    if (rc == SP_OK && cerr == cudaSuccess && j->hold[0])
        wait_gate(me->pool, j->hold);
    /* Every buffer goes back in stream order, after the work enqueued on it, whatever failed. */
    int free_rc = SP_OK;
    for (size_t i = 0; i < got; i++) {
        int r = sp_free(pool, buf[i], me->stream);
        if (r != SP_OK && free_rc == SP_OK)
            free_rc = r;
    }
    cudaError_t sync = cudaStreamSynchronize(me->stream);
    if (rc != SP_OK) {
        answer_alloc_error(j, rc);
    } else if (cerr != cudaSuccess || sync != cudaSuccess) {
        answer_error(j, 500, "CUDA error", cudaGetErrorName(cerr != cudaSuccess ? cerr : sync));
    } else if (free_rc != SP_OK) {
        answer_error(j, 500, "sp_free failed", sp_status_name(free_rc));
    } else {
        tenant *t = j->tenant;
        atomic_fetch_add_explicit(&t->served_requests, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->served_bytes, j->bytes, memory_order_relaxed);
        j->http_status = 200;
        snprintf(j->reply, sizeof j->reply,
                 "{\"tenant\":\"%s\",\"buffers\":%zu,\"bytes\":%" PRIu64 ",\"delay_us\":%u,"
                 "\"stream\":\"%s\"}",
                 t->name, j->nbuf, j->bytes, j->delay_us, me->label);
    }
    if (free_rc != SP_OK || sync != cudaSuccess)
        fprintf(stderr, "streampool-server: %s: tenant %s: sp_free %s, synchronize %s\n",
                me->label, j->tenant->name, sp_status_name(free_rc), cudaGetErrorName(sync));
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
