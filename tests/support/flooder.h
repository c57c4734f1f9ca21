/* A thread that floods a pool on its own stream for the reservation suites (reservation_flood,
 * reservation_random): random sizes, `unit` x (1 + rand % count) bytes, allocated into `live`
 * slots until the device refuses and freed in a random order, until *done: the device stays
 * full. Refusals must be the device's (SP_ERR_OUT_OF_MEMORY); anything else is an error. */
#ifndef SP_TEST_FLOODER_H
#define SP_TEST_FLOODER_H

#include <stdatomic.h>
#include <stdlib.h>

#include "sp_test_support.h"

enum { FLOODER_MAX_LIVE = 64 };

typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    atomic_bool *done;
    atomic_uint_least64_t *ops; /* the flood's requests so far, all threads */
    atomic_uint_least64_t *refused; /* the flood's refusals so far, all threads (NULL: none) */
    unsigned seed;
    size_t unit, count;         /* sizes: unit x (1 + rand % count) bytes */
    int live;                   /* slots, at most FLOODER_MAX_LIVE */
    uint64_t allocs, refusals;
    int errors;
} flooder;

static inline void *flood(void *arg)
{
    flooder *f = arg;
    cudaStream_t s;
    if (f->live < 1 || f->live > FLOODER_MAX_LIVE ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        f->errors++;
        return NULL;
    }
    void *live[FLOODER_MAX_LIVE] = {0};
    while (!atomic_load(f->done)) {
        int slot = rand_r(&f->seed) % f->live;
        if (live[slot]) {
            if (sp_free(f->pool, live[slot], s) != SP_OK)
                f->errors++;
            live[slot] = NULL;
            continue;
        }
        size_t bytes = f->unit * (1 + (size_t)rand_r(&f->seed) % f->count);
        int rc = sp_alloc(f->pool, &live[slot], bytes, s);
        atomic_fetch_add(f->ops, 1);
        if (rc == SP_OK) {
            f->allocs++;
        } else if (rc == SP_ERR_OUT_OF_MEMORY) {
            f->refusals++;
            if (f->refused)
                atomic_fetch_add(f->refused, 1);
        } else {
            f->errors++;
        }
        if (rc != SP_OK)
            live[slot] = NULL;
    }
    for (int i = 0; i < f->live; i++)
        if (live[i] && sp_free(f->pool, live[i], s) != SP_OK)
            f->errors++;
    if (sp_stream_release(f->rt, s) != SP_OK || cudaStreamSynchronize(s) != cudaSuccess ||
        cudaStreamDestroy(s) != cudaSuccess)
        f->errors++;
    return NULL;
}

#endif /* SP_TEST_FLOODER_H */
