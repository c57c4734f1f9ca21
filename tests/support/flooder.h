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

#ifdef SP_CUDASIM
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

/* The reservation suites' run: on a 512 MiB device a pool "reserved" with a 128 MiB reservation
 * allocates RESERVED_BLOCKS blocks of exactly 8 MiB and frees them, `loops` times on one stream,
 * while pools "noisy-a" (priority noisy_priority; 0: the default configuration) and "noisy-b"
 * are flooded by one flooder thread each (sizes unit x (1 + rand % count), `live` slots, seeds
 * seed0 and seed0 + 1). Each loop starts once the flood has made `step` more requests (a count,
 * not a timing); with wait_full, the first loop waits for the flood's first refusal (the device
 * full). The first refusal of the reserved pool is printed with `run`. */
enum { RESERVED_BLOCKS = 16, RESERVED_FLOODERS = 2 };

typedef struct {
    int loops, step, live, noisy_priority;
    bool wait_full;
    size_t unit, count;
    unsigned seed0, run;
} reservation_case;

typedef struct {
    uint64_t granted, refused, flood_allocs, flood_refusals;
    int other; /* the first status that was neither SP_OK nor SP_ERR_OUT_OF_MEMORY */
    sp_stats reserved;
} reservation_figures;

static inline reservation_figures reservation_under_flood(const reservation_case *c)
{
    const uint64_t MiB_ = (uint64_t)1 << 20;
    CK(cudasimSetDeviceMemory(0, 512 * MiB_));
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.reserve = 128 * MiB_;
    sp_pool *reserved, *noisy[RESERVED_FLOODERS];
    SP(sp_pool_create(rt, "reserved", &cfg, &reserved));
    sp_pool_config high = SP_POOL_CONFIG_INIT;
    high.priority = c->noisy_priority;
    SP(sp_pool_create(rt, "noisy-a", c->noisy_priority ? &high : NULL, &noisy[0]));
    SP(sp_pool_create(rt, "noisy-b", NULL, &noisy[1]));
    atomic_bool done = false;
    atomic_uint_least64_t ops = 0, flood_refused = 0;
    flooder f[RESERVED_FLOODERS];
    pthread_t th[RESERVED_FLOODERS];
    for (int i = 0; i < RESERVED_FLOODERS; i++) {
        f[i] = (flooder){.rt = rt, .pool = noisy[i], .done = &done, .ops = &ops,
                         .refused = &flood_refused, .unit = c->unit, .count = c->count,
                         .live = c->live, .seed = c->seed0 + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, flood, &f[i]), 0);
    }
    cudaStream_t s = new_stream();
    reservation_figures r = {.other = SP_OK};
    while (c->wait_full && atomic_load(&flood_refused) == 0)
        sched_yield();
    for (int loop = 0; loop < c->loops; loop++) {
        while (atomic_load(&ops) < (uint64_t)loop * (uint64_t)c->step)
            sched_yield();
        void *blk[RESERVED_BLOCKS];
        for (int i = 0; i < RESERVED_BLOCKS; i++) {
            int rc = sp_alloc(reserved, &blk[i], 8 * MiB_, s);
            if (rc == SP_OK)
                r.granted++;
            else if (rc == SP_ERR_OUT_OF_MEMORY)
                r.refused++;
            else if (r.other == SP_OK)
                r.other = rc;
            if (rc != SP_OK && r.refused + (r.other != SP_OK) == 1)
                print_message("# run %u, loop %d, block %d: %s\n", c->run, loop, i,
                              sp_status_name(rc));
            if (rc != SP_OK)
                blk[i] = NULL;
        }
        for (int i = 0; i < RESERVED_BLOCKS; i++)
            if (blk[i])
                SP(sp_free(reserved, blk[i], s));
    }
    atomic_store(&done, true);
    for (int i = 0; i < RESERVED_FLOODERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(f[i].errors, 0);
        r.flood_allocs += f[i].allocs;
        r.flood_refusals += f[i].refusals;
    }
    r.reserved = stats_of(reserved);
    drop_stream(rt, s);
    destroy_runtime(rt);
    return r;
}

/* What a reservation promises, asserted on a run's figures: every one of the reserved pool's
 * blocks granted, the pool never out of memory, never reclaimed from while within its
 * reservation, never holding past it; and the device was full, the flood refused instead. */
static inline void reservation_held(const reservation_figures *r, int loops)
{
    assert_int_equal(r->reserved.ooms, 0);
    assert_int_equal(r->reserved.reclaims, 0);
    assert_true(r->reserved.held.peak <= 128 * ((uint64_t)1 << 20));
    assert_int_equal(r->other, SP_OK);
    assert_int_equal(r->refused, 0);
    assert_int_equal(r->granted, (uint64_t)loops * RESERVED_BLOCKS);
    assert_true(r->flood_refusals > 0);
}
#endif

#endif /* SP_TEST_FLOODER_H */
