/* Admission before work (issue 20, item 3): a request that states its footprint at its begin
 * (sp_request_begin_with) is admitted with that headroom claimed under its pool's limit, or
 * refused at once without a CUDA call, with a code that tells "not now" (SP_ERR_LIMIT) from
 * "never" (SP_ERR_NEVER_FITS); an admitted request's allocations never meet the limit while
 * another thread fills the pool, and its end gives back exactly what it did not use.
 * Emulator-only: counts CUDA calls. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "support/fixtures.h"

static const size_t MiB = (size_t)1 << 20;

static int admit(sp_pool *pool, cudaStream_t s, uint64_t bytes, sp_request *out)
{
    sp_request_config cfg = SP_REQUEST_CONFIG_INIT;
    cfg.label = "admitted";
    cfg.expected_bytes = bytes;
    return sp_request_begin_with(pool, s, &cfg, out);
}

/* The two codes have their own names, values and sentences. */
static void codes_say_now_or_never(void **state)
{
    (void)state;
    status_is(SP_ERR_NEVER_FITS, -19, "SP_ERR_NEVER_FITS",
              "larger than the pool's limit can ever hold");
    assert_string_equal(sp_strerror(SP_ERR_LIMIT),
                        "the pool's limit would be exceeded now (retry after frees)");
}

/* A refusal, either code, is decided from the pool's figures: no CUDA call at all, and nothing
 * changes but the refusal counter. An admission that fits makes none either. */
static void refusal_makes_no_cuda_call(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "tenant", 16 * MiB, 0, UINT64_MAX);
    void *live;
    SP(sp_alloc(pool, &live, 12 * MiB, fx.a)); /* 12 MiB live: 4 MiB of room */
    sp_stats before = stats_of(pool);
    cudasimResetCallCounts();
    sp_request req = 7;
    assert_int_equal(admit(pool, fx.a, 6 * MiB, &req), SP_ERR_LIMIT);
    assert_int_equal(admit(pool, fx.a, 16 * MiB + 1, &req), SP_ERR_NEVER_FITS);
    assert_int_equal(cudasimCallCount(NULL), 0);
    assert_int_equal(req, 7); /* untouched */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.admission_refusals, 2);
    assert_int_equal(st.admissions, 0);
    assert_int_equal(st.admitted_bytes, 0);
    assert_int_equal(st.limit_rejections, before.limit_rejections); /* no allocation failed */
    assert_int_equal(st.held.current, before.held.current);
    cudasimResetCallCounts();
    SP(admit(pool, fx.a, 4 * MiB, &req)); /* exactly the room left */
    assert_int_equal(cudasimCallCount(NULL), 0);
    SP(sp_request_end(pool, req, 0, NULL));
    SP(sp_free(pool, live, fx.a));
}

/* The claim is what a fresh allocation takes (whole 2 MiB driver pages; a 2 MiB slab for a
 * small request), and the end gives back exactly what the request's allocations did not draw:
 * admission itself probes the headroom, to the byte. */
static void claim_released_exactly_at_end(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "tenant", 16 * MiB, 0, UINT64_MAX);
    sp_request a, b, c;
    SP(admit(pool, fx.a, 9 * MiB + 1, &a)); /* claims 10 MiB */
    assert_int_equal(admit(pool, fx.a, 6 * MiB + 1, &b), SP_ERR_LIMIT); /* would be 8: 18 > 16 */
    SP(admit(pool, fx.a, 1000, &b));                                      /* a slab: 2 MiB */
    SP(admit(pool, fx.a, 4 * MiB, &c));                                   /* 10 + 2 + 4 = 16 */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.admitted_bytes, 16 * MiB);
    assert_int_equal(st.admissions, 3);
    assert_int_equal(st.held.current, 0); /* claims are headroom, not memory */
    SP(sp_request_end(pool, a, 0, NULL));
    SP(sp_request_end(pool, b, 0, NULL));
    SP(sp_request_end(pool, c, 0, NULL));
    SP(admit(pool, fx.a, 16 * MiB, &a)); /* the whole limit is free again */
    /* the request's allocation draws its claim: held, not counted twice */
    void *p;
    SP(sp_request_alloc(pool, a, &p, 8 * MiB));
    sp_request_stats rs = {.size = sizeof rs};
    SP(sp_request_end(pool, a, 0, &rs));
    assert_int_equal(rs.freed_at_end, 1);
    st = stats_of(pool);
    assert_int_equal(st.held.current, 8 * MiB); /* cached now */
    assert_int_equal(st.active.current, 0);
    /* 8 MiB held and cached: an admission of the other 8 needs no give-back */
    cudasimResetCallCounts();
    SP(admit(pool, fx.a, 8 * MiB, &b));
    assert_int_equal(cudasimCallCount(NULL), 0);
    SP(sp_request_end(pool, b, 0, NULL));
    /* the whole limit again: the cached 8 MiB goes back to make the room */
    SP(admit(pool, fx.a, 16 * MiB, &c));
    assert_int_equal(stats_of(pool).held.current, 0);
    SP(sp_request_end(pool, c, 0, NULL));
}

/* Plain sp_alloc tells the two cases apart too, and the OOM report says which in words. */
static void alloc_larger_than_limit_never_fits(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "tenant", 16 * MiB, 0, UINT64_MAX);
    void *p, *q = NULL;
    assert_int_equal(sp_alloc(pool, &q, 16 * MiB + 1, fx.a), SP_ERR_NEVER_FITS);
    sp_oom_report r = {.size = sizeof r};
    char json[8192];
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.status, SP_ERR_NEVER_FITS);
    assert_true(sp_oom_report_json(&r, json, sizeof json) < sizeof json);
    assert_non_null(strstr(json, "\"status\":\"SP_ERR_NEVER_FITS\",\"reason\":\"larger than the "
                                 "pool's limit can ever hold\""));
    SP(sp_alloc(pool, &p, 10 * MiB, fx.a));
    assert_int_equal(sp_alloc(pool, &q, 8 * MiB, fx.a), SP_ERR_LIMIT);
    SP(sp_runtime_last_oom(fx.rt, &r));
    assert_int_equal(r.status, SP_ERR_LIMIT);
    assert_true(sp_oom_report_json(&r, json, sizeof json) < sizeof json);
    assert_non_null(strstr(json, "\"status\":\"SP_ERR_LIMIT\",\"reason\":\"the pool's limit would "
                                 "be exceeded now (retry after frees)\""));
    assert_null(q);
    assert_int_equal(stats_of(pool).limit_rejections, 2);
    SP(sp_free(pool, p, fx.a));
}

/* Bad input: a missing config or one without its size, and a footprint past SP_MAX_ALLOC. */
static void bad_configs_are_refused(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "tenant", 16 * MiB, 0, UINT64_MAX);
    sp_request req;
    assert_int_equal(sp_request_begin_with(pool, NULL, NULL, &req), SP_ERR_INVALID);
    sp_request_config cfg = {0};
    assert_int_equal(sp_request_begin_with(pool, NULL, &cfg, &req), SP_ERR_INVALID);
    assert_non_null(strstr(sp_config_error(), "sp_request_begin_with"));
    cfg = (sp_request_config)SP_REQUEST_CONFIG_INIT;
    cfg.expected_bytes = SP_MAX_ALLOC + 1;
    assert_int_equal(sp_request_begin_with(pool, NULL, &cfg, &req), SP_ERR_TOO_LARGE);
    cfg.expected_bytes = 0; /* no admission: a plain request */
    SP(sp_request_begin_with(pool, NULL, &cfg, &req));
    SP(sp_request_end(pool, req, 0, NULL));
    assert_int_equal(stats_of(pool).admissions, 0);
}

/* The filler's steps, told by the test thread: fill the pool to its limit, or free all. */
enum { IDLE, FILL, EMPTY, QUIT };

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
    atomic_int order, done; /* the step asked, and the last step finished */
    void *held[64];
    size_t n;
    unsigned long refused; /* its allocations the limit refused */
} filler;

/* Orders carry a sequence number above the step (order = seq << 2 | step), so that the same
 * step asked twice in a row is seen twice. */
static void *fill(void *arg)
{
    filler *f = arg;
    for (int seen = IDLE;;) {
        int asked;
        while ((asked = atomic_load(&f->order)) == seen)
            sched_yield();
        int order = asked & 3;
        if (order == QUIT)
            return NULL;
        if (order == FILL) { /* 2 MiB blocks until the limit says no */
            int rc = SP_OK;
            while (f->n < 64 && (rc = sp_alloc(f->pool, &f->held[f->n], 2 * MiB, f->stream)) == SP_OK)
                f->n++;
            f->refused += rc == SP_ERR_LIMIT;
        } else {
            for (size_t i = 0; i < f->n; i++)
                (void)sp_free(f->pool, f->held[i], f->stream);
            f->n = 0;
        }
        seen = asked;
        atomic_store(&f->done, asked);
    }
}

static void step(filler *f, int order)
{
    int seq = (atomic_load(&f->order) >> 2) + 1;
    atomic_store(&f->order, seq << 2 | order);
}

/* Waits for the step asked last. */
static void wait_step(filler *f)
{
    while (atomic_load(&f->done) != atomic_load(&f->order))
        sched_yield();
}

/* A flood fills the pool to its limit: a request that states its footprint is refused ("not
 * now"). Once the flood's memory is freed it is admitted, and while the next flood fills the
 * pool to the limit at the same time, every allocation within its footprint succeeds. */
static void admitted_request_never_meets_the_limit(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "tenant", 64 * MiB, 0, UINT64_MAX);
    filler f = {.pool = pool, .stream = new_stream()};
    atomic_init(&f.order, IDLE);
    atomic_init(&f.done, IDLE);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fill, &f), 0);
    cudaStream_t s = new_stream();
    step(&f, FILL);
    wait_step(&f);
    unsigned failed = 0;
    const unsigned rounds = 50;
    for (unsigned i = 0; i < rounds; i++) {
        sp_request req;
        assert_int_equal(admit(pool, s, 12 * MiB, &req), SP_ERR_LIMIT); /* full: not now */
        step(&f, EMPTY);
        wait_step(&f);
        SP(admit(pool, s, 12 * MiB, &req)); /* three 4 MiB allocations: 12 MiB fresh */
        step(&f, FILL);                      /* the flood races the request's allocations */
        for (int k = 0; k < 3; k++) {
            void *p;
            if (sp_request_alloc(pool, req, &p, 4 * MiB) != SP_OK)
                failed++;
        }
        wait_step(&f);
        SP(sp_request_end(pool, req, 0, NULL));
        step(&f, FILL); /* the request's freed memory too: the pool is full of live blocks */
        wait_step(&f);
        assert_true(stats_of(pool).held.peak <= 64 * MiB);
    }
    step(&f, EMPTY);
    wait_step(&f);
    step(&f, QUIT);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("# admission under a flood: %u rounds, the flood refused %lu times, %u failures "
                  "within the footprint\n", rounds, f.refused, failed);
    assert_int_equal(failed, 0);
    assert_int_equal(f.refused, 2 * rounds + 1); /* every flood met the limit */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.admissions, rounds);
    assert_int_equal(st.admission_refusals, rounds);
    assert_int_equal(st.admitted_bytes, rounds * 12 * MiB);
    drop_stream(fx.rt, s);
    drop_stream(fx.rt, f.stream);
}

TEST_MAIN("tests",
    cmocka_unit_test(codes_say_now_or_never),
    FX(refusal_makes_no_cuda_call),
    FX(claim_released_exactly_at_end),
    FX(alloc_larger_than_limit_never_fits),
    FX(bad_configs_are_refused),
    FX(admitted_request_never_meets_the_limit)
)
