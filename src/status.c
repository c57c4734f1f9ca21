/* Status codes and versions: sp_strerror, sp_status_name and sp_version come from the one list
 * in streampool.h; the thread's last CUDA error backs sp_last_cuda_error. */
#include "status.h"

#define SP_STR2(x) #x
#define SP_STR(x) SP_STR2(x)

_Thread_local int sp__status_cuda __attribute__((tls_model("initial-exec")));

unsigned sp_version(void)
{
    return SP_VERSION_HEX;
}

const char *sp_version_string(void)
{
    return SP_STR(SP_VERSION_MAJOR) "." SP_STR(SP_VERSION_MINOR) "." SP_STR(SP_VERSION_PATCH);
}

const char *sp_strerror(int status)
{
    switch (status) {
#define SP_STATUS_TEXT(name, value, text) case value: return text;
        SP_STATUS_MAP(SP_STATUS_TEXT)
#undef SP_STATUS_TEXT
    default: return "unknown status";
    }
}

const char *sp_status_name(int status)
{
    switch (status) {
#define SP_STATUS_NAME(name, value, text) case value: return "SP_ERR_" #name;
        SP_STATUS_MAP(SP_STATUS_NAME)
#undef SP_STATUS_NAME
    default: return "unknown status";
    }
}

int sp_last_cuda_error(void)
{
    return sp__status_cuda;
}

void sp__status_set_cuda(int cuda_error)
{
    sp__status_cuda = cuda_error;
}
