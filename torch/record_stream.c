/* Tensor.record_stream for the pluggable allocator: which extra streams use a live allocation,
 * and the stream order its free must then respect. PyTorch's own allocator defers reuse until an
 * event on each such stream completes; streampool reuses a block in its free stream's order, so
 * here the free stream is made to wait on those events instead (rule 3 of
 * docs/cuda-semantics.md: a free is safe once every use is ordered before it). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "streampool.h"
#include "torch_internal.h"

typedef struct record {
    struct record *next;
    void *ptr;
    int device;
    size_t n, cap;
    cudaStream_t *streams;
} record;

/* Few allocations are ever recorded: a small chained table under one lock, and a count that
 * lets every free of an unrecorded pointer skip the lock. */
#define RECORD_BUCKETS 256

static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;
static record *buckets[RECORD_BUCKETS];
static atomic_size_t records_live;

static record **bucket_of(const void *ptr)
{
    uintptr_t h = (uintptr_t)ptr >> 8; /* allocations are 256-byte aligned */
    h ^= h >> 17;
    return &buckets[h % RECORD_BUCKETS];
}

static record *find_locked(const void *ptr)
{
    for (record *r = *bucket_of(ptr); r; r = r->next)
        if (r->ptr == ptr)
            return r;
    return NULL;
}

int sp__torch_recorded_add(void *ptr, int device, cudaStream_t stream)
{
    int rc = SP_OK;
    pthread_mutex_lock(&records_lock);
    record *r = find_locked(ptr);
    if (!r && (r = calloc(1, sizeof *r)) != NULL) {
        r->ptr = ptr;
        r->device = device;
        r->next = *bucket_of(ptr);
        *bucket_of(ptr) = r;
        atomic_fetch_add_explicit(&records_live, 1, memory_order_relaxed);
    }
    size_t i = 0;
    while (r && i < r->n && r->streams[i] != stream)
        i++;
    if (!r) {
        rc = SP_ERR_NO_HOST_MEMORY;
    } else if (i == r->n) { /* a stream not yet recorded for ptr */
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 4;
            cudaStream_t *grown = realloc(r->streams, cap * sizeof *grown);
            if (grown) {
                r->streams = grown;
                r->cap = cap;
            }
        }
        if (r->n < r->cap)
            r->streams[r->n++] = stream;
        else
            rc = SP_ERR_NO_HOST_MEMORY;
    }
    pthread_mutex_unlock(&records_lock);
    return rc;
}

/* Makes `waiter` wait for what `used` has enqueued so far, on `device`. */
static cudaError_t order_after(int device, cudaStream_t waiter, cudaStream_t used)
{
    int previous = -1;
    cudaError_t err = cudaGetDevice(&previous);
    if (err == cudaSuccess && previous != device)
        err = cudaSetDevice(device);
    if (err == cudaSuccess) {
        cudaEvent_t ev;
        err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (err == cudaSuccess) {
            err = cudaEventRecord(ev, used);
            if (err == cudaSuccess)
                err = cudaStreamWaitEvent(waiter, ev, 0);
            (void)cudaEventDestroy(ev); /* legal with the wait pending: it was taken at the call */
        }
        if (err != cudaSuccess) /* no event: the host waits for `used` itself */
            err = cudaStreamSynchronize(used);
    }
    if (previous >= 0 && previous != device)
        (void)cudaSetDevice(previous);
    if (err != cudaSuccess) /* PyTorch's next error check must not see ours */
        (void)cudaGetLastError();
    return err;
}

static void unlink_and_free_locked(record *r)
{
    record **at = bucket_of(r->ptr);
    while (*at != r)
        at = &(*at)->next;
    *at = r->next;
    atomic_fetch_sub_explicit(&records_live, 1, memory_order_relaxed);
    free(r->streams);
    free(r);
}

int sp__torch_recorded_order(void *ptr, cudaStream_t free_stream)
{
    if (atomic_load_explicit(&records_live, memory_order_relaxed) == 0)
        return SP_OK;
    int rc = SP_OK;
    pthread_mutex_lock(&records_lock);
    record *r = find_locked(ptr);
    /* The lock stays held: only the freeing thread uses ptr's record, and the calls below
     * enqueue work without waiting on other threads. The host-wait fallback can block, but
     * only on a stream whose work needs no lock of ours. */
    for (size_t i = 0; r && i < r->n && rc == SP_OK; i++)
        if (r->streams[i] != free_stream &&
            order_after(r->device, free_stream, r->streams[i]) != cudaSuccess)
            rc = SP_ERR_CUDA;
    if (r && rc == SP_OK)
        unlink_and_free_locked(r);
    pthread_mutex_unlock(&records_lock);
    return rc;
}
