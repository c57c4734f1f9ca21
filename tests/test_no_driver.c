/* What a server sees on a machine without a CUDA driver (every CI machine and build farm): the
 * real libcudart answers cudaErrorInsufficientDriver (or cudaErrorNoDevice), and streampool turns
 * that into SP_ERR_CUDA with the runtime's error kept for sp_last_cuda_error(), never a crash.
 * Runs against the real runtime even in a cudasim build; skipped where a device is present. */
#include <stdlib.h>
#include <string.h>

#include "support/sp_test_support.h"

static bool driver_missing(cudaError_t err)
{
    return err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice;
}

static void runtime_create_fails_with_the_cuda_error(void **state)
{
    (void)state;
    int count = 0;
    cudaError_t probe = cudaGetDeviceCount(&count);
    if (probe == cudaSuccess && count > 0)
        skip(); /* a driver and a device: nothing to test here */
    assert_true(driver_missing(probe));

    sp_runtime *rt = (sp_runtime *)&count; /* must be left untouched */
    for (int attempt = 0; attempt < 2; attempt++) { /* the CUDA error is sticky: the same again */
        assert_int_equal(sp_runtime_create(0, NULL, &rt), SP_ERR_CUDA);
        assert_ptr_equal(rt, (sp_runtime *)&count);
        int err = sp_last_cuda_error();
        assert_int_equal(err, (int)probe);
        assert_string_equal(cudaGetErrorName((cudaError_t)err),
                            probe == cudaErrorNoDevice ? "cudaErrorNoDevice"
                                                       : "cudaErrorInsufficientDriver");
    }
    /* in words: the error's name, and what to do on a machine without a GPU */
    const char *words = sp_last_cuda_error_string();
    assert_non_null(strstr(words, cudaGetErrorName(probe)));
    assert_non_null(strstr(words, "No usable CUDA driver or GPU here"));
    assert_non_null(strstr(words, "cudasim first in LD_LIBRARY_PATH"));
    assert_non_null(strstr(words, "Choosing the CUDA runtime"));
    sp_pool *none;
    assert_int_equal(sp_runtime_default_pool(NULL, &none), SP_ERR_INVALID);
    assert_string_equal(sp_last_cuda_error_string(), ""); /* no CUDA error: no words */
    assert_string_equal(sp_status_name(SP_ERR_CUDA), "SP_ERR_CUDA");
    assert_non_null(strstr(sp_strerror(SP_ERR_CUDA), "sp_last_cuda_error"));
}

TEST_MAIN("no_driver",
    cmocka_unit_test(runtime_create_fails_with_the_cuda_error)
)
