/* The thread's last CUDA error in words, for people: a newcomer without a GPU otherwise sees
 * only "CUDA runtime error" and a number. Names come from cuda.c (the only file that calls
 * CUDA); the hint is streampool's own. */
#include <stdio.h>

#include "cuda.h"
#include "status.h"

/* Errors that mean "no usable driver or device here": the machine, not the program. */
static bool no_gpu(int err)
{
    return err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
           err == cudaErrorSystemDriverMismatch || err == cudaErrorCompatNotSupportedOnDevice;
}

const char *sp_last_cuda_error_string(void)
{
    static _Thread_local char text[512];
    int err = sp_last_cuda_error();
    if (err == 0)
        return "";
    snprintf(text, sizeof text, "%s (%d): %s%s", sp__cuda_error_name(err), err,
             sp__cuda_error_string(err),
             no_gpu(err) ? ". No usable CUDA driver or GPU here: to run on the CPU, put cudasim "
                           "first in LD_LIBRARY_PATH (build/tools/cudasim, or lib/cudasim of an "
                           "install with -Dinstall_cudasim=true; README, \"Choosing the CUDA "
                           "runtime\")"
                         : "");
    return text;
}
