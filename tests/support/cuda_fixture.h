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

static inline int cfx_setup(void **state)
{
    (void)state;
    memset(&cfx, 0, sizeof cfx);
    cudaStream_t *streams[] = {&cfx.a, &cfx.b, &cfx.c};
    for (int i = 0; i < 3; i++)
        if (cudaStreamCreateWithFlags(streams[i], cudaStreamNonBlocking) != cudaSuccess)
            return -1;
    return 0;
}

static inline int cfx_teardown(void **state)
{
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    cudaStream_t streams[] = {cfx.a, cfx.b, cfx.c};
    for (int i = 0; i < 3; i++) {
        if (!streams[i])
            continue;
        (void)cudaStreamSynchronize(streams[i]);
        (void)cudaStreamDestroy(streams[i]);
    }
    memset(&cfx, 0, sizeof cfx);
    return reset_device(state);
}

#define CFX(fn) cmocka_unit_test_setup_teardown(fn, cfx_setup, cfx_teardown)

#endif
