/* Issue 27 item 2, the state that breaks a reservation under a flood: another thread flushes the
 * parked ranges of the reserved pool's stream into the pool's heap (a reclaim from another
 * pool's out of memory, or a stats read, both call sp__park_flush_all) and is descheduled
 * between taking them from the park and putting them in the heap. The reserved stream's next
 * allocation finds its freed range in neither, asks the driver for a new segment on a full
 * device, and fails. Held there deterministically: an interposed pthread_mutex_lock stops the
 * flushing thread as it takes the heap's lock, and lets it go only once the allocating thread
 * would block on a lock the flusher holds, or has returned. The allocation must get its range.
 * White-box: the pool's lock addresses come from src/pool.h. cudasim only. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "support/sp_test_support.h"
#include "pool.h"

#define MiB ((uint64_t)1 << 20)

static pthread_mutex_t *heap_lock;         /* the reserved pool's segments heap */
static _Thread_local bool flusher, allocator;
static atomic_bool armed, at_gate, let_go;

int pthread_mutex_lock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (flusher && m == heap_lock && atomic_exchange(&armed, false)) {
        atomic_store(&at_gate, true);
        while (!atomic_load(&let_go))
            sched_yield();
    }
    if (allocator && atomic_load(&at_gate) && !atomic_load(&let_go)) {
        if (pthread_mutex_trylock(m) == 0)
            return 0;
        atomic_store(&let_go, true); /* it would wait on the flusher: let the flusher go on */
    }
    return real(m);
}

typedef struct {
    sp_pool *pool;
} flush_arg;

static void *flush_reserved(void *arg)
{
    flush_arg *a = arg;
    flusher = true;
    sp_stats st = {.size = sizeof st};
    (void)sp_pool_stats(a->pool, &st); /* flushes the pool's parked ranges into its heap */
    flusher = false;
    return NULL;
}

static void a_range_in_flight_to_the_heap_is_still_the_reserved_pools(void **state)
{
    (void)state;
    sp_runtime *rt = exact_runtime_on_device_of(64 * MiB);
    sp_pool_config rc = SP_POOL_CONFIG_INIT;
    rc.reserve = 16 * MiB;
    sp_pool *reserved, *noisy;
    SP(sp_pool_create(rt, "reserved", &rc, &reserved));
    SP(sp_pool_create(rt, "noisy", NULL, &noisy));
    cudaStream_t s = new_stream(), t = new_stream();
    void *a, *b;
    SP(sp_alloc(reserved, &a, 8 * MiB, s));
    SP(sp_alloc(reserved, &b, 8 * MiB, s));
    /* the flood: the rest of the device, live */
    void *flood[64];
    int n = 0;
    while (n < 64 && sp_alloc(noisy, &flood[n], 2 * MiB, t) == SP_OK)
        n++;
    assert_true(n > 0 && n < 64);
    SP(sp_free(reserved, b, s)); /* parked on s */
    heap_lock = &reserved->segments.lock.mutex;
    atomic_store(&let_go, false);
    atomic_store(&at_gate, false);
    atomic_store(&armed, true);
    flush_arg fa = {reserved};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flush_reserved, &fa), 0);
    while (!atomic_load(&at_gate))
        sched_yield();
    /* the flusher holds b's range between the park and the heap */
    allocator = true;
    void *again = NULL;
    int got = sp_alloc(reserved, &again, 8 * MiB, s);
    allocator = false;
    atomic_store(&let_go, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    heap_lock = NULL;
    if (got != SP_OK)
        printf("# the reserved pool's 8 MiB with its freed range in flight: %s\n",
               sp_status_name(got));
    assert_int_equal(got, SP_OK);
    assert_ptr_equal(again, b); /* its own range, not a new one */
    SP(sp_free(reserved, again, s));
    SP(sp_free(reserved, a, s));
    for (int i = 0; i < n; i++)
        SP(sp_free(noisy, flood[i], t));
    drop_streams_and_runtime(rt, s, t);
}

static int teardown(void **state)
{
    atomic_store(&let_go, true);
    heap_lock = NULL;
    return teardown_runtimes(state);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(a_range_in_flight_to_the_heap_is_still_the_reserved_pools,
                              teardown)
)
