/* cudasim is never more lenient than CUDA: calls a real driver rejects are rejected here too,
 * and misuse a GPU turns into a fault or a race is made a deterministic fault. Emulator-only
 * (several devices from the environment, device faults). */
#include <stdlib.h>

#include "support/test_support.h"

static const size_t MiB = (size_t)1 << 20;

/* cudaEventRecord: "event and stream must be on the same CUDA context" (cuEventRecord:
 * CUDA_ERROR_INVALID_HANDLE otherwise). A wait on another device's event stays legal. */
static void event_record_on_another_devices_stream_is_rejected(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    cudaEvent_t e0;
    cudaStream_t s1;
    CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming)); /* device 0 */
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    assert_int_equal(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CK(cudaEventQuery(e0)); /* still never recorded */
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(e0, 0));
    CK(cudaStreamWaitEvent(s1, e0, 0)); /* cross-device waits are allowed */
    CK(cudaStreamSynchronize(s1));
    CK(cudaEventDestroy(e0));
    CK(cudaStreamDestroy(s1));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_teardown(fn, reset_device)
        T(event_record_on_another_devices_stream_is_rejected),
#undef T
    };
    return cmocka_run_group_tests_name("sim_strict", tests, NULL, NULL);
}
