/* cudasim: the rest of the runtime names a PyTorch CUDA build imports (torch 2.15.0+cu132 takes
 * 113 from libcudart.so.13). Two kinds:
 *  - what PyTorch's memory path needs, emulated: cudaMemset, cudaMemcpy2DAsync, stream
 *    priorities, cudaEventRecordWithFlags, cudaStreamAddCallback, cudaDeviceGetPCIBusId, the
 *    driver entry-point query, the profiler switches (cudaPointerGetAttributes and
 *    cudaHostRegister are sim_host.c's);
 *  - what needs device code, which an emulator has none of: the fatbinaries the program
 *    registers are accepted, and every kernel, function and symbol of theirs has no image for
 *    the emulated device, so launches, cudaFunc*, occupancy and symbol calls answer
 *    cudaErrorNoKernelImageForDevice (recorded as the last error, which is how PyTorch's
 *    C10_CUDA_KERNEL_LAUNCH_CHECK learns a launch failed); cudaLibrary* loads nothing; explicit
 *    graph construction and user objects answer cudaErrorNotSupported.
 * Copies, peers and IPC are sim_copy.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "sim_internal.h"

/* ---- the memory path ---- */

/* On the legacy stream, asynchronous with respect to the host for device memory and
 * synchronous for a Unified Memory region (the Runtime API's "API synchronization behavior"):
 * for device memory, a later call that synchronizes (or the legacy stream's implicit ordering)
 * is what makes it visible. Pinned host memory as the target is not emulated (a bad address,
 * as for cudaMemsetAsync). */
cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemset);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(cudaStreamLegacy, &err);
    bool managed = false;
    if (s)
        err = sim_memset_locked(s, devPtr, value, count);
    if (s && !err && count && sim_device_of_address(devPtr, &managed) >= 0 && managed)
        sim_stream_wait_done(s, s->submitted);
    sim_unlock();
    return sim_ret(err);
}

/* Row by row, all rows enqueued under one lock so that no other op interleaves: each row is
 * checked against live allocations and stream order as a cudaMemcpyAsync of it would be. */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemcpy2DAsync);
    if (err)
        return sim_ret(err);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return sim_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch)
        return sim_ret(cudaErrorInvalidPitchValue);
    if (width && height && (!dst || !src))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                   (kind == cudaMemcpyDefault && sim_is_device_address(dst));
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                   (kind == cudaMemcpyDefault && sim_is_device_address(src));
    for (size_t row = 0; s && !err && width && row < height; row++)
        err = sim_copy_enqueue(s, (char *)dst + row * dpitch, (const char *)src + row * spitch,
                               width, dst_dev, src_dev, true);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamGetPriority);
    if (err)
        return sim_ret(err);
    if (!priority)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(hStream, &err);
    int p = s ? s->priority : 0;
    sim_unlock();
    if (err)
        return sim_ret(err);
    *priority = p;
    return cudaSuccess;
}

/* An H100's range: 0 the least, -5 the greatest (cudaStreamCreateWithPriority clamps to it).
 * Either pointer may be NULL, as the Runtime API allows. */
cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceGetStreamPriorityRange);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_device *d = sim_dev(sim_current_device());
    err = !d ? cudaErrorInvalidDevice : d->sticky;
    sim_unlock();
    if (err)
        return sim_ret(err);
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return cudaSuccess;
}

/* cudaEventRecordDefault is cudaEventRecord. cudaEventRecordExternal differs only inside a
 * capture (an external event node), which sim_graph.c does not emulate: refused there. */
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventRecordWithFlags);
    if (err)
        return sim_ret(err);
    if (flags & ~(unsigned)cudaEventRecordExternal)
        return sim_ret(cudaErrorInvalidValue);
    if (flags & cudaEventRecordExternal) {
        sim_lock();
        sim_stream *s = sim_stream_resolve(stream, &err);
        bool capturing = s && s->capture;
        sim_unlock();
        if (capturing)
            return sim_ret(cudaErrorNotSupported);
    }
    return sim_ret(sim_event_record(event, stream));
}

/* The callback gets the stream's handle and its status: cudaSuccess, or the device's sticky
 * error when the stream's earlier work faulted. It runs as a host function (calling CUDA from
 * it is cudaErrorNotPermitted). Not allowed in a capture: cudaLaunchHostFunc is. */
typedef struct {
    cudaStreamCallback_t fn;
    void *arg;
    cudaStream_t stream;
    int device;
} sim_callback;

static void run_callback(void *p)
{
    sim_callback *cb = p;
    bool shared = sim_lock_shared(); /* the worker holds no lock: sticky is read under one */
    if (!shared)
        sim_lock();
    cudaError_t status = sim_g.devices[cb->device].sticky;
    sim_unlock();
    cb->fn(cb->stream, status, cb->arg);
    free(cb);
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void *userData, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamAddCallback);
    if (err)
        return sim_ret(err);
    if (!callback || flags != 0)
        return sim_ret(cudaErrorInvalidValue); /* "flags: reserved for future use, must be 0" */
    sim_callback *cb = malloc(sizeof *cb);
    if (!cb)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    if (s && s->capture)
        err = cudaErrorStreamCaptureUnsupported;
    else if (s) {
        *cb = (sim_callback){.fn = callback, .arg = userData, .stream = stream,
                             .device = s->device};
        err = sim_host_fn_locked(s, run_callback, cb);
    }
    sim_unlock();
    if (err)
        free(cb);
    return sim_ret(err);
}

/* "[domain]:[bus]:[device].[function]", one bus per emulated device. */
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceGetPCIBusId);
    if (err)
        return sim_ret(err);
    if (!pciBusId || len <= 0)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    bool ok = sim_dev(device) != NULL;
    sim_unlock();
    if (!ok)
        return sim_ret(cudaErrorInvalidDevice);
    char id[32];
    int n = snprintf(id, sizeof id, "00000000:%02X:00.0", 0x10 + device);
    if (n >= len)
        return sim_ret(cudaErrorInvalidValue);
    memcpy(pciBusId, id, (size_t)n + 1);
    return cudaSuccess;
}

/* There is no driver API behind cudasim: every symbol is "not found", with cudaSuccess and a
 * NULL function, as the Runtime API documents for a function the platform does not support.
 * A version newer than the driver's is cudaErrorInvalidValue. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    cudaError_t err = sim_enter(SIM_API_cudaGetDriverEntryPointByVersion);
    if (err)
        return sim_ret(err);
    const unsigned long long known = cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream;
    if (!symbol || !funcPtr || (flags & ~known) || cudaVersion > CUDART_VERSION)
        return sim_ret(cudaErrorInvalidValue);
    *funcPtr = NULL;
    if (driverStatus)
        *driverStatus = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

/* No profiler is attached: starting and stopping collection succeed and collect nothing. */
cudaError_t cudaProfilerStart(void)
{
    cudaError_t err = sim_enter(SIM_API_cudaProfilerStart);
    return sim_ret(err);
}

cudaError_t cudaProfilerStop(void)
{
    cudaError_t err = sim_enter(SIM_API_cudaProfilerStop);
    return sim_ret(err);
}

cudaError_t cudasimDeviceInitialized(int device, int *initialized)
{
    if (!initialized)
        return cudaErrorInvalidValue;
    sim_lock();
    bool ok = device >= 0 && device < sim_g.device_count;
    bool ready = ok && sim_g.devices[device].ready;
    sim_unlock();
    if (!ok)
        return cudaErrorInvalidDevice;
    *initialized = ready;
    return cudaSuccess;
}

/* ---- device code: registered, never runnable ---- */

/* What nvcc's generated code calls, declared here as crt/host_runtime.h declares them for C++. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                       const char *deviceName, int ext, size_t size, int constant, int global);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *funcAddr);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);

/* The handle a module's constructor keeps and gives back at exit: it holds the fatbinary's
 * address, so that each registration has a handle of its own. */
void **__cudaRegisterFatBinary(void *fatCubin)
{
    (void)sim_enter(SIM_API___cudaRegisterFatBinary);
    void **handle = malloc(sizeof *handle);
    if (handle)
        *handle = fatCubin;
    return handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)sim_enter(SIM_API___cudaRegisterFatBinaryEnd);
    (void)fatCubinHandle;
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    (void)sim_enter(SIM_API___cudaUnregisterFatBinary);
    free(fatCubinHandle);
}

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)sim_enter(SIM_API___cudaRegisterFunction);
    (void)fatCubinHandle, (void)hostFun, (void)deviceFun, (void)deviceName, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
}

void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                       const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)sim_enter(SIM_API___cudaRegisterVar);
    (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext;
    (void)size, (void)constant, (void)global;
}

/* kernel<<<grid, block, shared, stream>>>(...) pushes its configuration, and the kernel's stub
 * pops it before launching; a thread's pushes nest (a launch in another launch's arguments). */
typedef struct {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
} sim_launch_config;

#define SIM_CONFIG_DEPTH 16
static _Thread_local sim_launch_config config_stack[SIM_CONFIG_DEPTH];
static _Thread_local unsigned config_depth;

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream)
{
    (void)sim_enter(SIM_API___cudaPushCallConfiguration);
    if (config_depth == SIM_CONFIG_DEPTH)
        return 1; /* nonzero: the generated code then skips the launch */
    config_stack[config_depth++] = (sim_launch_config){gridDim, blockDim, sharedMem, stream};
    return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream)
{
    (void)sim_enter(SIM_API___cudaPopCallConfiguration);
    if (config_depth == 0)
        return sim_ret(cudaErrorMissingConfiguration);
    sim_launch_config c = config_stack[--config_depth];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shared;
    *(cudaStream_t *)stream = c.stream;
    return cudaSuccess;
}

/* Every entry point that needs a kernel's or a symbol's image: the emulated device has none. */
static cudaError_t no_image(sim_api api)
{
    cudaError_t err = sim_enter(api);
    return sim_ret(err ? err : cudaErrorNoKernelImageForDevice);
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *funcAddr)
{
    (void)kernel, (void)funcAddr;
    return no_image(SIM_API___cudaGetKernel);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream)
{
    (void)kernel, (void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
    return no_image(SIM_API___cudaLaunchKernel);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream)
{
    (void)func, (void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
    return no_image(SIM_API_cudaLaunchKernel);
}

cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                        void **args, size_t sharedMem, cudaStream_t stream)
{
    (void)func, (void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
    return no_image(SIM_API_cudaLaunchCooperativeKernel);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    (void)config, (void)func, (void)args;
    return no_image(SIM_API_cudaLaunchKernelExC);
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    (void)attr, (void)func;
    return no_image(SIM_API_cudaFuncGetAttributes);
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    (void)func, (void)attr, (void)value;
    return no_image(SIM_API_cudaFuncSetAttribute);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                          int blockSize, size_t dynamicSMemSize)
{
    (void)numBlocks, (void)func, (void)blockSize, (void)dynamicSMemSize;
    return no_image(SIM_API_cudaOccupancyMaxActiveBlocksPerMultiprocessor);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                   const void *func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags)
{
    (void)numBlocks, (void)func, (void)blockSize, (void)dynamicSMemSize, (void)flags;
    return no_image(SIM_API_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
}

cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    (void)devPtr, (void)symbol;
    return no_image(SIM_API_cudaGetSymbolAddress);
}

cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind)
{
    (void)symbol, (void)src, (void)count, (void)offset, (void)kind;
    return no_image(SIM_API_cudaMemcpyToSymbol);
}

/* No cudaKernel_t can be had (cudaLibraryGetKernel and __cudaGetKernel give none). */
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute attr,
                                            int value, int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaKernelSetAttributeForDevice);
    (void)kernel, (void)attr, (void)value, (void)device;
    return sim_ret(err ? err : cudaErrorInvalidDeviceFunction);
}

/* ---- libraries: code to load, which the emulated device cannot run ---- */

cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                unsigned int numJitOptions, enum cudaLibraryOption *libraryOptions,
                                void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions, (void)libraryOptions;
    (void)libraryOptionValues, (void)numLibraryOptions;
    if (!library || !code) {
        cudaError_t err = sim_enter(SIM_API_cudaLibraryLoadData);
        return sim_ret(err ? err : cudaErrorInvalidValue);
    }
    return no_image(SIM_API_cudaLibraryLoadData);
}

cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *fileName,
                                    enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                    unsigned int numJitOptions,
                                    enum cudaLibraryOption *libraryOptions,
                                    void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions, (void)libraryOptions;
    (void)libraryOptionValues, (void)numLibraryOptions;
    if (!library || !fileName) {
        cudaError_t err = sim_enter(SIM_API_cudaLibraryLoadFromFile);
        return sim_ret(err ? err : cudaErrorInvalidValue);
    }
    return no_image(SIM_API_cudaLibraryLoadFromFile);
}

/* No library is ever loaded, so every handle these get is not one. */
static cudaError_t no_library(sim_api api)
{
    cudaError_t err = sim_enter(api);
    return sim_ret(err ? err : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    (void)library;
    return no_library(SIM_API_cudaLibraryUnload);
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library, const char *name)
{
    (void)pKernel, (void)library, (void)name;
    return no_library(SIM_API_cudaLibraryGetKernel);
}

cudaError_t cudaLibraryGetKernelCount(unsigned int *count, cudaLibrary_t lib)
{
    (void)count, (void)lib;
    return no_library(SIM_API_cudaLibraryGetKernelCount);
}

cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t library,
                                 const char *name)
{
    (void)dptr, (void)bytes, (void)library, (void)name;
    return no_library(SIM_API_cudaLibraryGetGlobal);
}

cudaError_t cudaLibraryGetManaged(void **dptr, size_t *bytes, cudaLibrary_t library,
                                  const char *name)
{
    (void)dptr, (void)bytes, (void)library, (void)name;
    return no_library(SIM_API_cudaLibraryGetManaged);
}

cudaError_t cudaLibraryGetUnifiedFunction(void **fptr, cudaLibrary_t library, const char *symbol)
{
    (void)fptr, (void)library, (void)symbol;
    return no_library(SIM_API_cudaLibraryGetUnifiedFunction);
}

/* ---- explicit graphs and user objects: not emulated (sim_graph.c builds graphs by capture
 * only) ---- */

static cudaError_t not_emulated(sim_api api)
{
    cudaError_t err = sim_enter(api);
    return sim_ret(err ? err : cudaErrorNotSupported);
}

cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                             const cudaGraphNode_t *pDependencies,
                             const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                             struct cudaGraphNodeParams *nodeParams)
{
    (void)pGraphNode, (void)graph, (void)pDependencies, (void)dependencyData;
    (void)numDependencies, (void)nodeParams;
    return not_emulated(SIM_API_cudaGraphAddNode);
}

cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out,
                                             cudaGraph_t graph, unsigned int defaultLaunchValue,
                                             unsigned int flags)
{
    (void)pHandle_out, (void)graph, (void)defaultLaunchValue, (void)flags;
    return not_emulated(SIM_API_cudaGraphConditionalHandleCreate);
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    (void)graph, (void)nodes, (void)numNodes;
    return not_emulated(SIM_API_cudaGraphGetNodes);
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                         cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    (void)node, (void)pDependencies, (void)edgeData, (void)pNumDependencies;
    return not_emulated(SIM_API_cudaGraphNodeGetDependencies);
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const cudaGraphNode_t *dependencies,
                                          const cudaGraphEdgeData *dependencyData,
                                          size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    (void)stream, (void)graph, (void)dependencies, (void)dependencyData, (void)numDependencies;
    (void)mode;
    return not_emulated(SIM_API_cudaStreamBeginCaptureToGraph);
}

cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream,
                                                cudaGraphNode_t *dependencies,
                                                const cudaGraphEdgeData *dependencyData,
                                                size_t numDependencies, unsigned int flags)
{
    (void)stream, (void)dependencies, (void)dependencyData, (void)numDependencies, (void)flags;
    return not_emulated(SIM_API_cudaStreamUpdateCaptureDependencies);
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
                                 unsigned int initialRefcount, unsigned int flags)
{
    (void)object_out, (void)ptr, (void)destroy, (void)initialRefcount, (void)flags;
    return not_emulated(SIM_API_cudaUserObjectCreate);
}

cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
    (void)object, (void)count;
    return not_emulated(SIM_API_cudaUserObjectRelease);
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                      unsigned int count, unsigned int flags)
{
    (void)graph, (void)object, (void)count, (void)flags;
    return not_emulated(SIM_API_cudaGraphRetainUserObject);
}
