/* The shared fixture of the suites that call only the CUDA runtime (conformance, cudasim,
 * capture): three non-blocking streams made before a test; after it every gate is opened, the
 * streams synchronized and destroyed, and the device left fresh (reset_device). Register a test
 * with CFX(fn); it finds its streams in cfx. */
#ifndef SP_TEST_CUDA_FIXTURE_H
#define SP_TEST_CUDA_FIXTURE_H

#include "test_support.h"

typedef struct {
    cudaStream_t a, b, c;
} cuda_fixture;

static cuda_fixture cfx;

/* Makes n non-blocking streams: 0, or -1 if one could not be made. */
static inline int streams_create(cudaStream_t *const *streams, int n)
{
    for (int i = 0; i < n; i++)
        if (cudaStreamCreateWithFlags(streams[i], cudaStreamNonBlocking) != cudaSuccess)
            return -1;
    return 0;
}

/* Opens every gate a failed test left closed, then synchronizes and destroys the streams that
 * were made (NULL ones are skipped); how many of those calls failed. */
static inline int streams_destroy(const cudaStream_t *streams, int n)
{
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    int failed = 0;
    for (int i = 0; i < n; i++)
        if (streams[i])
            failed += (cudaStreamSynchronize(streams[i]) != cudaSuccess) +
                      (cudaStreamDestroy(streams[i]) != cudaSuccess);
    return failed;
}

static inline int cfx_setup(void **state)
{
    (void)state;
    memset(&cfx, 0, sizeof cfx);
    return streams_create((cudaStream_t *[]){&cfx.a, &cfx.b, &cfx.c}, 3);
}

static inline int cfx_teardown(void **state)
{
    int failed = streams_destroy((cudaStream_t[]){cfx.a, cfx.b, cfx.c}, 3);
    memset(&cfx, 0, sizeof cfx);
    reset_device(state);
    return failed ? -1 : 0;
}

#define CFX(fn) cmocka_unit_test_setup_teardown(fn, cfx_setup, cfx_teardown)

#endif
