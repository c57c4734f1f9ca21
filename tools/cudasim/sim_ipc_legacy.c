/* cudasim: CUDA's legacy IPC calls (cudaIpcGetMemHandle and the rest), which PyTorch imports for
 * sharing tensors between processes. cudasim's cudaMalloc memory is private to its process (the
 * pools that another process can import, cudaMemPoolExportToShareableHandle's, are sim_pool.c's),
 * so legacy IPC is a feature this platform does not support: each call checks its arguments as
 * CUDA documents, then answers cudaErrorNotSupported, one of the errors the Runtime API lists for
 * each of them. */
#include "sim_internal.h"

static cudaError_t not_supported(sim_api api, bool args_ok)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    return sim_ret(args_ok ? cudaErrorNotSupported : cudaErrorInvalidValue);
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    return not_supported(SIM_API_cudaIpcGetMemHandle, handle && devPtr);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    (void)handle;
    return not_supported(SIM_API_cudaIpcOpenMemHandle,
                         devPtr && (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess) == 0);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    return not_supported(SIM_API_cudaIpcCloseMemHandle, devPtr != NULL);
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    if (!handle || !event)
        return not_supported(SIM_API_cudaIpcGetEventHandle, false);
    cudaError_t err = sim_enter(SIM_API_cudaIpcGetEventHandle);
    if (err)
        return sim_ret(err);
    sim_lock();
    bool valid = sim_handle_valid(event, SIM_H_EVENT);
    bool interprocess = valid && (event->flags & cudaEventInterprocess);
    sim_unlock();
    if (!valid)
        return sim_ret(cudaErrorInvalidResourceHandle);
    /* an event made without cudaEventInterprocess has no IPC handle, on any platform */
    return sim_ret(interprocess ? cudaErrorNotSupported : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    (void)handle;
    return not_supported(SIM_API_cudaIpcOpenEventHandle, event != NULL);
}
