/* The example server's worker pool: each worker thread owns a CUDA stream and serves one
 * inference job at a time on it as a request scope of the tenant's pool (sp_request_begin,
 * every buffer sp_request_alloc'ed and cudaMemsetAsync'ed, a host-function delay, synchronize,
 * then sp_request_end frees the buffers), so that every request runs on a stream of its own
 * while it runs. A request may name a gate: its worker then keeps its buffers allocated, before
 * the request's end, until the gate is opened (tests and demos hold a tenant's memory with it). */
#ifndef SERVER_WORKERS_H
#define SERVER_WORKERS_H

#include <stddef.h>
#include <stdint.h>

#include "streampool.h"
#include "tenants.h"

#define JOB_MAX_BUFFERS 64
#define JOB_MAX_DELAY_US 1000000u
#define JOB_REPLY_MAX 512

typedef struct workers workers;
typedef struct job job;

struct job {
    /* set by the submitter */
    tenant *tenant;
    size_t nbuf;
    size_t sizes[JOB_MAX_BUFFERS];
    uint64_t bytes;                    /* the sum of sizes */
    unsigned delay_us;
    char hold[TENANT_NAME_MAX + 1];    /* a gate to wait at before the end, or "" */
    void (*done)(job *j);              /* called on the worker thread once the job is answered */
    void *user;
    /* set by the worker before done() */
    unsigned http_status;
    char reply[JOB_REPLY_MAX];         /* JSON */
    /* private */
    workers *owner;
    job *next;
};

/* Starts n workers, each with a non-blocking stream of `device` labelled "worker-N" in rt. On
 * error returns a negative streampool status with a message in err. */
int workers_start(sp_runtime *rt, int device, unsigned n, workers **out, char *err, size_t errlen);

/* Queues a job (FIFO); -1 once workers_stop has begun. */
int workers_submit(workers *w, job *j);

/* Opens gate `name` for good: requests held at it go on, later ones pass. -1 if the table of
 * open gates (64) is full. */
int workers_release(workers *w, const char *name);

/* Opens every gate, now and later: a drain must not wait for a release that will not come. */
void workers_open_all(workers *w);

/* Finishes the queued jobs, joins the workers, releases their streams from rt and destroys
 * them; frees w. Returns the first error (a negative streampool status). */
int workers_stop(workers *w);

#endif
