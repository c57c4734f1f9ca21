/* Shared fixtures: what most streampool tests set up before the behaviour they state and tear
 * down after it, made by a cmocka setup and undone by its teardown, so that a test's body is
 * only that behaviour. One fixture, `fx`: a runtime on device 0 and its default pool (created
 * with defaults, or with exact figures: stats_flush_bytes 0), and three non-blocking streams.
 * The teardown opens every gate, releases the streams from the runtime's pools, synchronizes and
 * destroys them, destroys the runtime and leaves a fresh device. Any of those failing (a
 * runtime that still holds live allocations: SP_ERR_BUSY) fails the test there, as the
 * drop_stream and destroy_runtime at the end of a test did. Register a test with FX(fn),
 * FX_EXACT(fn) or (cudasim) FX_DEVICE(fn, bytes). */
#ifndef SP_TEST_FIXTURES_H
#define SP_TEST_FIXTURES_H

#include "cuda_fixture.h"
#include "sp_test_support.h"

typedef struct {
    sp_runtime *rt;
    sp_pool *pool;          /* rt's default pool */
    cudaStream_t a, b, c;   /* non-blocking streams */
} sp_fixture;

static sp_fixture fx;

/* A setup with any runtime configuration; *state is &fx, for tests that read it from there. */
static inline int fx_setup_with(void **state, const sp_runtime_config *cfg)
{
    memset(&fx, 0, sizeof fx);
    *state = &fx;
    if (sp_runtime_create(0, cfg, &fx.rt) != SP_OK)
        return -1;
    tracked_runtimes[tracked_count++] = fx.rt; /* destroyed by the teardown, whatever happened */
    if (sp_runtime_default_pool(fx.rt, &fx.pool) != SP_OK)
        return -1;
    return streams_create((cudaStream_t *[]){&fx.a, &fx.b, &fx.c}, 3);
}

/* cmocka setups: the runtime with defaults, or with figures exact at every read (peaks and
 * stream figures too). */
static inline int fx_setup(void **state)
{
    return fx_setup_with(state, NULL);
}

static inline int fx_setup_exact(void **state)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0;
    return fx_setup_with(state, &cfg);
}

#ifdef SP_CUDASIM
/* The exact runtime on a device of *(uint64_t *)*state bytes (cudasimSetDeviceMemory, before
 * the runtime exists): FX_DEVICE(fn, bytes). */
static inline int fx_setup_device(void **state)
{
    if (!*state || cudasimSetDeviceMemory(0, *(const uint64_t *)*state) != cudaSuccess)
        return -1;
    return fx_setup_exact(state);
}
#define FX_DEVICE(fn, bytes)                                                                   \
    cmocka_unit_test_prestate_setup_teardown(fn, fx_setup_device, fx_teardown,               \
                                             &(uint64_t){(bytes)})
#endif

static inline int fx_teardown(void **state)
{
    cudaStream_t streams[] = {fx.a, fx.b, fx.c};
    int failed = 0;
    for (int i = 0; fx.rt && i < 3; i++) /* released first, so that no pool keeps them */
        failed += sp_stream_release(fx.rt, streams[i]) != SP_OK;
    failed += streams_destroy(streams, 3);
    memset(&fx, 0, sizeof fx);
    int busy = teardown_runtimes(state);
    return failed || busy ? -1 : 0;
}

#define FX(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
#define FX_EXACT(fn) cmocka_unit_test_setup_teardown(fn, fx_setup_exact, fx_teardown)

#endif
