/* A stand-in libcuda.so.1 for programs that open the driver library beside the runtime, as
 * PyTorch does: its libcaffe2_nvrtc.so (loaded when torch.cuda first asks whether a device has
 * a primary context) names libcuda.so.1 as NEEDED and binds the 23 driver functions it imports
 * when loaded. It answers from cudasim's state what the emulator knows (devices, their
 * attributes, whether a device's context exists); what needs device code (modules, linking,
 * launches, functions, tensor maps) is CUDA_ERROR_NOT_SUPPORTED. Only the pytorch suite puts
 * it on the library path: it is no driver for NVIDIA's own runtime. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudasim.h"

/* The runtime's error for a driver call is the same code (cudaErrorInvalidValue is
 * CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidDevice is CUDA_ERROR_INVALID_DEVICE, ...). */
static CUresult from_runtime(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorNoDevice: return CUDA_ERROR_NO_DEVICE;
    default: return CUDA_ERROR_UNKNOWN;
    }
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    return from_runtime(cudaDriverGetVersion(driverVersion));
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    cudaError_t err = cudaGetDeviceCount(count);
    if (err == cudaErrorNoDevice) { /* the driver answers 0, the runtime an error */
        *count = 0;
        return CUDA_SUCCESS;
    }
    return from_runtime(err);
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    int n = 0;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (cudaGetDeviceCount(&n) != cudaSuccess || ordinal < 0 || ordinal >= n)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* CUdevice_attribute and cudaDeviceAttr share their values. */
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    return from_runtime(cudaDeviceGetAttribute(pi, (enum cudaDeviceAttr)attrib, dev));
}

/* Active once the runtime has initialised the device (its primary context, on a GPU). The
 * flags are the defaults: cudasim takes none (cudaSetDeviceFlags is not emulated). */
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    int on = 0;
    cudaError_t err = cudasimDeviceInitialized(dev, &on);
    if (err)
        return from_runtime(err);
    *flags = 0;
    *active = on;
    return CUDA_SUCCESS;
}

/* No CUcontext objects: the emulator's contexts are not the driver's. */
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    (void)pctx, (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    (void)pctx;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    (void)ctx;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The driver's own names and strings for what this library returns. */
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *pStr = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_UNKNOWN: *pStr = "CUDA_ERROR_UNKNOWN"; break;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "invalid argument"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "invalid device ordinal"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *pStr = "operation not supported"; break;
    case CUDA_ERROR_UNKNOWN: *pStr = "unknown error"; break;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* cudaPointerGetAttributes answers for device, managed and host memory alike. */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct cudaPointerAttributes a;
    if (!data || cudaPointerGetAttributes(&a, (const void *)(uintptr_t)ptr) != cudaSuccess)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (a.type == cudaMemoryTypeUnregistered)
            return CUDA_ERROR_INVALID_VALUE; /* the driver knows no such pointer */
        *(unsigned *)data = a.type == cudaMemoryTypeHost ? CU_MEMORYTYPE_HOST
                                                         : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (a.type == cudaMemoryTypeUnregistered)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = a.device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = a.type == cudaMemoryTypeManaged;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- device code: none runs on the emulator ---- */

CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    (void)module, (void)fname;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    (void)module, (void)image;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    (void)module, (void)image, (void)numOptions, (void)options, (void)optionValues;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* No module was ever loaded: no handle is one. */
CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    (void)hmod;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    (void)hfunc, (void)hmod, (void)name;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    (void)pi, (void)attrib, (void)hfunc;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    (void)hfunc, (void)attrib, (void)value;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    (void)hfunc, (void)config;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                             int blockSize, size_t dynamicSMemSize)
{
    (void)numBlocks, (void)func, (void)blockSize, (void)dynamicSMemSize;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
                              CUlinkState *stateOut)
{
    (void)numOptions, (void)options, (void)optionValues, (void)stateOut;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
                               const char *name, unsigned int numOptions, CUjit_option *options,
                               void **optionValues)
{
    (void)state, (void)type, (void)data, (void)size, (void)name, (void)numOptions;
    (void)options, (void)optionValues;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    (void)state, (void)cubinOut, (void)sizeOut;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress,
                                        const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                        const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    (void)tensorMap, (void)tensorDataType, (void)tensorRank, (void)globalAddress, (void)globalDim;
    (void)globalStrides, (void)boxDim, (void)elementStrides, (void)interleave, (void)swizzle;
    (void)l2Promotion, (void)oobFill;
    return CUDA_ERROR_NOT_SUPPORTED;
}
