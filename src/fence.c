/* Fences: events recorded lazily on a stream after frees, shared by every block they cover, and
 * recycled once no block needs them (re-recording an event is safe after every wait on it was
 * enqueued: cudaStreamWaitEvent captures the record at call time, rule 18). */
#include <stdlib.h>

#include "internal.h"

int sp__fence_pool_init(sp_fence_pool *fp, int device)
{
    fp->device = device;
    fp->free_fences = NULL;
    return pthread_mutex_init(&fp->lock, NULL) == 0 ? SP_OK : SP_ERR_NO_HOST_MEMORY;
}

void sp__fence_pool_destroy(sp_fence_pool *fp)
{
    while (fp->free_fences) {
        sp_fence *f = fp->free_fences;
        fp->free_fences = f->next;
        (void)sp__cuda_event_destroy(f->event);
        free(f);
    }
    pthread_mutex_destroy(&fp->lock);
}

int sp__fence_record(sp_fence_pool *fp, cudaStream_t stream, uint64_t epoch, sp_fence **out)
{
    pthread_mutex_lock(&fp->lock);
    sp_fence *f = fp->free_fences;
    if (f)
        fp->free_fences = f->next;
    pthread_mutex_unlock(&fp->lock);
    if (!f) {
        f = calloc(1, sizeof *f);
        if (!f)
            return SP_ERR_NO_HOST_MEMORY;
        int rc = sp__cuda_event_create(fp->device, &f->event);
        if (rc != SP_OK) {
            free(f);
            return rc;
        }
    }
    int rc = sp__cuda_event_record(f->event, stream);
    if (rc != SP_OK) {
        sp__fence_recycle(fp, f);
        return rc;
    }
    f->epoch = epoch;
    f->done = false;
    f->refs = 0;
    f->next = NULL;
    *out = f;
    return SP_OK;
}

int sp__fence_done(sp_fence *f, bool *done)
{
    if (!f->done) {
        int rc = sp__cuda_event_query(f->event, &f->done);
        if (rc != SP_OK)
            return rc;
    }
    *done = f->done;
    return SP_OK;
}

void sp__fence_recycle(sp_fence_pool *fp, sp_fence *f)
{
    pthread_mutex_lock(&fp->lock);
    f->next = fp->free_fences;
    fp->free_fences = f;
    pthread_mutex_unlock(&fp->lock);
}
