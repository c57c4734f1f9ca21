/* No device memory is lost on a failure path (issue 20, item 5), on cudasim's fault injection:
 *  1. a cudaMemPoolDestroy the driver refuses: sp_pool_destroy and sp_runtime_destroy return the
 *     error and leave what they could not destroy usable, its cached memory given back first; a
 *     later destroy succeeds, and then every byte the device had at the start is free again
 *     (a context lost to a device fault, where no call can succeed again, is destroyed at once);
 *  2. every CUDA call failing at 0.5%, 1% and 5%: a workload of a few pools, streams,
 *     allocations, frees and trims, then everything freed and destroyed under the same faults,
 *     as a user would (a call that returned an error is called again once the faults are
 *     cleared, and they are armed again for the next), gives every byte back, seed after seed.
 * Each seed starts on a fresh emulated device (cudasimReset) of 512 MiB, so that the workload
 * runs into the device's end and the out-of-memory paths too. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t KiB = 1024, MiB = 1024 * 1024;

static uint64_t reserved_of(sp_pool *pool)
{
    return pool_attr(sp_pool_cuda_pool(pool), cudaMemPoolAttrReservedMemCurrent);
}

/* Allocates and frees a mix of small, medium and huge blocks on s, so that the pool caches a
 * slab and segments of each kind. */
static void fill_cache(sp_pool *pool, cudaStream_t s)
{
    static const size_t sizes[] = {4 * KiB, 200 * KiB, 3 * MiB, 24 * MiB};
    void *p[4];
    for (int i = 0; i < 4; i++) {
        SP(sp_alloc(pool, &p[i], sizes[i], s));
        CK(cudaMemsetAsync(p[i], i, sizes[i], s));
    }
    for (int i = 0; i < 4; i++)
        SP(sp_free(pool, p[i], s));
    assert_true(stats_of(pool).cached.current > 0);
}

/* ---- 1. a refused cudaMemPoolDestroy ---- */

/* The pool stays, found by name and usable, with nothing cached: its memory went back before
 * the refused destroy. The second destroy succeeds, and the device has every byte again. */
static void pool_destroy_refused_keeps_the_pool(void **state)
{
    (void)state;
    uint64_t at_start = device_bytes_free();
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool;
    SP(sp_pool_create(rt, "tenant", NULL, &pool));
    cudaStream_t s = new_stream();
    fill_cache(pool, s);
    CK(cudasimInjectFault("cudaMemPoolDestroy", 1, cudaErrorUnknown, 0));
    assert_int_equal(sp_pool_destroy(pool), SP_ERR_CUDA);
    assert_int_equal(sp_last_cuda_error(), cudaErrorUnknown);
    sp_pool *found = NULL;
    SP(sp_pool_find(rt, "tenant", &found));
    assert_ptr_equal(found, pool);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.segments + st.slabs, 0);
    CK(cudaDeviceSynchronize());
    assert_int_equal(reserved_of(pool), 0);
    /* still a pool: it allocates, frees and keeps what it freed */
    void *p;
    SP(sp_alloc(pool, &p, 5 * MiB, s));
    CK(cudaMemsetAsync(p, 7, 5 * MiB, s));
    assert_true(device_bytes_are(p, 5 * MiB, 7, s));
    SP(sp_free(pool, p, s));
    SP(sp_pool_destroy(pool));
    assert_int_equal(sp_pool_find(rt, "tenant", &found), SP_ERR_NOT_FOUND);
    drop_stream(rt, s);
    destroy_runtime(rt);
    CK(cudaDeviceSynchronize());
    assert_int_equal(device_bytes_free(), at_start);
}

/* sp_runtime_destroy with the nth cudaMemPoolDestroy refused (of three pools, the default one
 * last): the error, and a runtime that a second sp_runtime_destroy destroys whole. */
static void runtime_destroy_refused_keeps_the_runtime(void **state)
{
    (void)state;
    for (unsigned long nth = 1; nth <= 3; nth++) {
        uint64_t at_start = device_bytes_free();
        sp_runtime *rt = track_runtime(0, NULL);
        sp_pool *pools[3];
        SP(sp_runtime_default_pool(rt, &pools[0]));
        SP(sp_pool_create(rt, "a", NULL, &pools[1]));
        sp_pool_config cfg = SP_POOL_CONFIG_INIT;
        cfg.reserve = 8 * MiB;
        SP(sp_pool_create(rt, "b", &cfg, &pools[2]));
        cudaStream_t s = new_stream();
        for (int i = 0; i < 3; i++)
            fill_cache(pools[i], s);
        drop_stream(rt, s);
        CK(cudasimInjectFault("cudaMemPoolDestroy", nth, cudaErrorUnknown, 0));
        assert_int_equal(sp_runtime_destroy(rt), SP_ERR_CUDA);
        assert_int_equal(sp_last_cuda_error(), cudaErrorUnknown);
        /* the pool refused stays, found by name (the newest pool is destroyed first); the
         * other is gone */
        sp_pool *found = NULL;
        assert_int_equal(sp_pool_find(rt, "b", &found), nth == 1 ? SP_OK : SP_ERR_NOT_FOUND);
        assert_int_equal(sp_pool_find(rt, "a", &found), nth == 2 ? SP_OK : SP_ERR_NOT_FOUND);
        /* the default pool is still the runtime's, and a pool */
        sp_pool *def = NULL;
        SP(sp_runtime_default_pool(rt, &def));
        void *p;
        SP(sp_alloc(def, &p, 1 * MiB, cudaStreamPerThread));
        SP(sp_free(def, p, cudaStreamPerThread));
        SP(sp_stream_release(rt, cudaStreamPerThread));
        destroy_runtime(rt);
        CK(cudaDeviceSynchronize());
        assert_int_equal(device_bytes_free(), at_start);
    }
}

/* A device fault ruins the context: every later call fails with it, the memory went with it,
 * and nothing a later destroy could do would give a byte back. The destroys then free what they
 * hold and return SP_OK, sp_last_cuda_error() telling what happened. */
static void a_lost_context_is_destroyed_all_the_same(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool;
    SP(sp_pool_create(rt, "tenant", NULL, &pool));
    cudaStream_t s = new_stream();
    fill_cache(pool, s);
    fill_cache(default_pool(rt), s);
    SP(sp_stream_release(rt, s));
    /* a memset of an address nothing allocated: a device fault when it runs */
    CK(cudaMemsetAsync((void *)(uintptr_t)0x1000, 0, 256, s));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    SP(sp_pool_destroy(pool));
    assert_int_equal(sp_last_cuda_error(), cudaErrorIllegalAddress);
    sp_pool *found;
    assert_int_equal(sp_pool_find(rt, "tenant", &found), SP_ERR_NOT_FOUND);
    destroy_runtime(rt);
    assert_int_equal(sp_last_cuda_error(), cudaErrorIllegalAddress);
    (void)cudaStreamDestroy(s);
}

/* ---- 2. every CUDA call failing at a rate ---- */

/* The calls streampool and this workload make; each fails at the rate, from its own generator
 * seeded from the seed and its place here, so that a seed's failures repeat run after run (as
 * far as the calls come in the same order: an event query's answer can depend on the emulator's
 * worker threads). */
static const char *const fallible[] = {
    "cudaMallocFromPoolAsync", "cudaFreeAsync", "cudaMemPoolCreate", "cudaMemPoolDestroy",
    "cudaMemPoolSetAttribute", "cudaMemPoolGetAttribute", "cudaMemPoolTrimTo",
    "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaStreamSynchronize", "cudaStreamQuery",
    "cudaStreamWaitEvent", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventQuery",
    "cudaEventSynchronize", "cudaEventDestroy", "cudaMemGetInfo", "cudaDeviceSynchronize",
    "cudaGetDevice", "cudaSetDevice", "cudaStreamIsCapturing", "cudaMemsetAsync",
    "cudaThreadExchangeStreamCaptureMode", "cudaGetDeviceCount", "cudaDeviceGetAttribute",
};
#define N_FALLIBLE (sizeof fallible / sizeof fallible[0])

static void arm_faults(unsigned per_million, uint64_t seed)
{
    for (size_t i = 0; i < N_FALLIBLE; i++) {
        /* the allocation's failure is the device out of memory, which sends a miss down its
         * whole ladder; every other call's, a plain driver error */
        cudaError_t err = i == 0 ? cudaErrorMemoryAllocation : cudaErrorUnknown;
        CK(cudasimInjectFaultRate(fallible[i], per_million, err, seed * 1000003u + i));
    }
}

static uint64_t next_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

enum { POOLS = POOL_KINDS, STREAMS = 3, LIVE = 24, STEPS = 200, TRIES = 50 };

typedef struct {
    void *ptr;
    int pool, stream;
} live_block;

typedef struct {
    sp_runtime *rt;
    sp_pool *pool[POOLS];
    cudaStream_t stream[STREAMS];
    cudaEvent_t event;
    live_block live[LIVE];
    int n_live;
} workload;

/* A size: mostly small, some medium, a few huge. */
static size_t some_size(uint64_t *rng)
{
    uint64_t r = next_rand(rng);
    switch (r % 8) {
    case 0: case 1: case 2: case 3: return 256 + (size_t)(r >> 8) % (256 * KiB);
    case 4: case 5: case 6: return 1 * MiB + (size_t)(r >> 8) % (7 * MiB);
    default: return 8 * MiB + (size_t)(r >> 8) % (56 * MiB);
    }
}

/* The workload under faults: what fails is skipped, as a program that checks its calls would
 * do (creations are retried). */
static void run_workload(workload *w, uint64_t *rng)
{
    for (int tries = 0; !w->rt && tries < TRIES; tries++)
        if (sp_runtime_create(0, NULL, &w->rt) != SP_OK)
            w->rt = NULL;
    assert_non_null(w->rt);
    for (int i = 0; i < POOLS; i++) {
        sp_pool_config cfg = pool_kind_config(i);
        for (int tries = 0; !w->pool[i] && tries < TRIES; tries++)
            if (sp_pool_create(w->rt, pool_kind_name(i), &cfg, &w->pool[i]) != SP_OK)
                w->pool[i] = NULL;
        assert_non_null(w->pool[i]);
    }
    for (int i = 0; i < STREAMS; i++) {
        for (int tries = 0; !w->stream[i] && tries < TRIES; tries++)
            if (cudaStreamCreateWithFlags(&w->stream[i], cudaStreamNonBlocking) != cudaSuccess)
                w->stream[i] = NULL;
        assert_non_null(w->stream[i]);
    }
    for (int tries = 0; !w->event && tries < TRIES; tries++)
        if (cudaEventCreateWithFlags(&w->event, cudaEventDisableTiming) != cudaSuccess)
            w->event = NULL;
    assert_non_null(w->event);
    for (int step = 0; step < STEPS; step++) {
        uint64_t r = next_rand(rng);
        int pool = (int)(r % POOLS), stream = (int)(r / POOLS % STREAMS);
        switch (r / (POOLS * STREAMS) % 16) {
        case 0: /* a trim */
            (void)sp_pool_trim(w->pool[pool], (r >> 32) % 2 ? 0 : 16 * MiB);
            break;
        case 1: /* a cache limit */
            (void)sp_pool_set_cache_limit(w->pool[pool], (r >> 32) % 2 ? 8 * MiB : UINT64_MAX);
            break;
        case 2: /* a stream forgotten: its blocks stay live, its cache goes to the pools */
            (void)sp_stream_release(w->rt, w->stream[stream]);
            break;
        case 3: case 4: case 5: case 6: case 7: case 8: case 9: {
            if (!w->n_live)
                break;
            int k = (int)((r >> 32) % (uint64_t)w->n_live);
            live_block b = w->live[k];
            /* on another stream, ordered after the allocating one's work by an event (item 7's
             * contract); where the event cannot be had, on the allocating stream */
            cudaStream_t on = w->stream[b.stream];
            if (stream != b.stream && cudaEventRecord(w->event, on) == cudaSuccess &&
                cudaStreamWaitEvent(w->stream[stream], w->event, 0) == cudaSuccess)
                on = w->stream[stream];
            if (sp_free(w->pool[b.pool], b.ptr, on) == SP_OK)
                w->live[k] = w->live[--w->n_live];
            break;
        }
        default: { /* an allocation, used on its stream */
            if (w->n_live == LIVE)
                break;
            size_t size = some_size(rng);
            void *p = NULL;
            if (sp_alloc(w->pool[pool], &p, size, w->stream[stream]) != SP_OK)
                break;
            (void)cudaMemsetAsync(p, step, size < 4096 ? size : 4096, w->stream[stream]);
            w->live[w->n_live++] = (live_block){p, pool, stream};
            break;
        }
        }
    }
}

/* The faults of one run: armed again (from a new seed) once a refusal had them cleared. */
typedef struct {
    unsigned per_million;
    uint64_t seed;
    unsigned clears;
} faults;

static void faults_clear(faults *f)
{
    cudasimClearFaults();
    f->clears++;
}

static void faults_rearm(faults *f)
{
    arm_faults(f->per_million, f->seed * 7919u + f->clears);
}

/* A teardown call made under the faults; refused, it is called again once they are cleared (at
 * most TRIES times: a refusal that lasts is a failure), as a user would, and the faults are
 * armed again for the calls after it. */
#define UNTIL_OK(f, ok, call)                                                                  \
    do {                                                                                       \
        bool done_ = (call) == (ok);                                                           \
        if (!done_) {                                                                          \
            faults_clear(f);                                                                   \
            for (int tries_ = 0; !done_ && tries_ < TRIES; tries_++)                          \
                done_ = (call) == (ok);                                                        \
            faults_rearm(f);                                                                   \
        }                                                                                      \
        assert_true(done_);                                                                    \
    } while (0)

/* Everything freed and destroyed, each call first under the faults. */
static void destroy_all(workload *w, faults *f)
{
    while (w->n_live) {
        live_block b = w->live[--w->n_live];
        UNTIL_OK(f, SP_OK, sp_free(w->pool[b.pool], b.ptr, w->stream[b.stream]));
    }
    for (int i = 0; i < STREAMS; i++) {
        UNTIL_OK(f, SP_OK, sp_stream_release(w->rt, w->stream[i]));
        UNTIL_OK(f, cudaSuccess, cudaStreamDestroy(w->stream[i]));
    }
    UNTIL_OK(f, cudaSuccess, cudaEventDestroy(w->event));
    for (int i = 1; i < POOLS; i++)
        UNTIL_OK(f, SP_OK, sp_pool_destroy(w->pool[i]));
    UNTIL_OK(f, SP_OK, sp_runtime_destroy(w->rt));
}

/* One seed at one rate: the bytes of device memory the run did not give back. */
static uint64_t bytes_lost(unsigned per_million, uint64_t seed)
{
    reset_device(NULL);
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    uint64_t at_start = device_bytes_free();
    workload w = {0};
    uint64_t rng = seed;
    faults f = {per_million, seed, 0};
    arm_faults(per_million, seed);
    run_workload(&w, &rng);
    destroy_all(&w, &f);
    cudasimClearFaults();
    (void)cudaGetLastError(); /* what a failed call left on the thread */
    CK(cudaDeviceSynchronize());
    uint64_t at_end = device_bytes_free();
    return at_start - at_end;
}

static void every_byte_back_under_faults(void **state)
{
    (void)state;
    static const unsigned rates[] = {5000, 10000, 50000}; /* per million: 0.5%, 1%, 5% */
    const char *env = getenv("SP_FAULT_SEEDS");
    unsigned seeds = env ? (unsigned)strtoul(env, NULL, 10) : 300;
    unsigned failed = 0;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        unsigned leaky = 0;
        uint64_t worst = 0;
        for (unsigned seed = 1; seed <= seeds; seed++) {
            uint64_t lost = bytes_lost(rates[r], seed);
            if (lost) {
                leaky++;
                if (lost > worst)
                    worst = lost;
                print_message("# rate %u ppm, seed %u: %" PRIu64 " bytes not given back\n",
                              rates[r], seed, lost);
            }
        }
        print_message("# rate %u ppm: %u seeds, %u with bytes not given back (at most %" PRIu64
                      ")\n", rates[r], seeds, leaky, worst);
        failed += leaky;
    }
    assert_int_equal(failed, 0);
}

#define T(fn) cmocka_unit_test_teardown(fn, teardown_faults)

TEST_MAIN("destroy_faults",
    T(pool_destroy_refused_keeps_the_pool),
    T(runtime_destroy_refused_keeps_the_runtime),
    T(a_lost_context_is_destroyed_all_the_same),
    T(every_byte_back_under_faults)
)
