/* cudasim's entry points for PyTorch (tools/cudasim/sim_torch_exports.c, sim_host.c) and its
 * stand-in libcuda.so.1 (tools/cudasim/driver): each new call, its documented errors, and the
 * last error where CUDA records one. Asynchrony is held by gates, never by sleeping. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_profiler_api.h>

#include "support/test_support.h"

static const size_t MiB = (size_t)1 << 20;

/* nvcc's registration and launch calls, as crt/host_runtime.h declares them for C++. */
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

/* cudaMemset is asynchronous on the legacy stream: held behind a gate there, the bytes are
 * untouched until the gate opens; a blocking stream's later copy sees them set. */
static void memset_runs_in_legacy_stream_order(void **state)
{
    (void)state;
    unsigned char *d = NULL, host[4096];
    CK(cudaMalloc((void **)&d, sizeof host));
    CK(cudaMemsetAsync(d, 0x11, sizeof host, 0));
    CK(cudaDeviceSynchronize());
    gate *g = gate_new();
    gate_hold(g, cudaStreamLegacy);
    CK(cudaMemset(d + 100, 0xab, 1000));
    gate_wait_arrival(g);
    assert_int_equal(d[100], 0x11); /* emulated device memory is host-readable */
    gate_open(g);
    cudaStream_t s;
    CK(cudaStreamCreate(&s)); /* blocking: ordered after the legacy stream's memset */
    CK(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < sizeof host; i++)
        assert_int_equal(host[i], i >= 100 && i < 1100 ? 0xab : 0x11);
    CK(cudaMemset(d, 0, 0)); /* nothing to do */
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    /* a Unified Memory region: synchronous, the bytes set when the call returns */
    unsigned char *m = NULL;
    CK(cudaMallocManaged((void **)&m, 4096, cudaMemAttachGlobal));
    CK(cudaMemset(m, 0x5a, 4096));
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(m[i], 0x5a);
    CK(cudaFree(m));
    assert_int_equal(cudasimCallCount("cudaMemset"), 3);
}

/* Rows of `width` bytes at their pitches; the gaps between rows are untouched. */
static void memcpy2d_copies_rows_at_their_pitches(void **state)
{
    (void)state;
    enum { W = 100, H = 7, SP = 128, DP = 256 };
    unsigned char src[SP * H], back[DP * H];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    unsigned char *d = NULL;
    CK(cudaMalloc((void **)&d, DP * H));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudaMemsetAsync(d, 0xee, DP * H, s));
    CK(cudaMemcpy2DAsync(d, DP, src, SP, W, H, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t r = 0; r < H; r++)
        for (size_t c = 0; c < DP; c++)
            assert_int_equal(back[r * DP + c], c < W ? src[r * SP + c] : 0xee);
    /* device to device, then back with the default kind */
    unsigned char *d2 = NULL, again[SP * H];
    memset(again, 0, sizeof again);
    CK(cudaMalloc((void **)&d2, SP * H));
    CK(cudaMemcpy2DAsync(d2, SP, d, DP, W, H, cudaMemcpyDeviceToDevice, s));
    CK(cudaMemcpy2DAsync(again, SP, d2, SP, W, H, cudaMemcpyDefault, s));
    CK(cudaStreamSynchronize(s));
    for (size_t r = 0; r < H; r++)
        assert_memory_equal(again + r * SP, src + r * SP, W);
    /* the documented refusals, each recorded as the last error */
    assert_int_equal(cudaMemcpy2DAsync(d, 64, src, SP, W, H, cudaMemcpyHostToDevice, s),
                     cudaErrorInvalidPitchValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidPitchValue);
    assert_int_equal(cudaMemcpy2DAsync(d, DP, src, 64, W, H, cudaMemcpyHostToDevice, s),
                     cudaErrorInvalidPitchValue);
    assert_int_equal(cudaMemcpy2DAsync(d, DP, src, SP, W, H, (enum cudaMemcpyKind)9, s),
                     cudaErrorInvalidMemcpyDirection);
    assert_int_equal(cudaMemcpy2DAsync(NULL, DP, src, SP, W, H, cudaMemcpyHostToDevice, s),
                     cudaErrorInvalidValue);
    CK(cudaMemcpy2DAsync(d, DP, src, SP, 0, H, cudaMemcpyHostToDevice, s)); /* empty */
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFree(d2));
}

/* Device memory (pool and cudaMalloc, interior pointers too), managed, pinned and registered
 * host memory, and anything else as unregistered host memory, with cudaSuccess. */
static void pointer_attributes_tell_every_kind(void **state)
{
    (void)state;
    struct cudaPointerAttributes a;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    char *pool_mem = NULL, *plain = NULL, *managed = NULL, *pinned = NULL;
    CK(cudaMallocAsync((void **)&pool_mem, 3 * MiB, s));
    CK(cudaMalloc((void **)&plain, 4096));
    CK(cudaMallocManaged((void **)&managed, 4096, cudaMemAttachGlobal));
    CK(cudaHostAlloc((void **)&pinned, 8192, cudaHostAllocDefault));
    CK(cudaPointerGetAttributes(&a, pool_mem + MiB));
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    assert_int_equal(a.device, 0);
    assert_ptr_equal(a.devicePointer, pool_mem + MiB);
    assert_null(a.hostPointer);
    CK(cudaPointerGetAttributes(&a, plain));
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    CK(cudaPointerGetAttributes(&a, managed + 10));
    assert_int_equal(a.type, cudaMemoryTypeManaged);
    assert_ptr_equal(a.hostPointer, managed + 10);
    assert_ptr_equal(a.devicePointer, managed + 10);
    CK(cudaPointerGetAttributes(&a, pinned + 5000)); /* a view into a pinned block */
    assert_int_equal(a.type, cudaMemoryTypeHost);
    assert_int_equal(a.device, 0);
    assert_ptr_equal(a.hostPointer, pinned + 5000);
    int local = 0;
    CK(cudaPointerGetAttributes(&a, &local));
    assert_int_equal(a.type, cudaMemoryTypeUnregistered);
    assert_null(a.devicePointer);
    assert_null(a.hostPointer);
    CK(cudaPointerGetAttributes(&a, pinned + 8192)); /* one past the block */
    assert_int_equal(a.type, cudaMemoryTypeUnregistered);
    CK(cudaPointerGetAttributes(&a, NULL));
    assert_int_equal(a.type, cudaMemoryTypeUnregistered);
    assert_int_equal(cudaPointerGetAttributes(NULL, plain), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaFreeHost(pinned));
    CK(cudaPointerGetAttributes(&a, pinned));
    assert_int_equal(a.type, cudaMemoryTypeUnregistered); /* freed: the runtime forgot it */
    CK(cudaFree(managed));
    CK(cudaFree(plain));
    CK(cudaFreeAsync(pool_mem, s));
    CK(cudaStreamDestroy(s));
}

/* cudaHostRegister pins the caller's memory: pointer attributes say host, an overlapping
 * registration is refused, cudaFreeHost does not take it, and only its start unregisters. */
static void host_register_and_unregister(void **state)
{
    (void)state;
    char *buf = malloc(3 * 4096);
    assert_non_null(buf);
    struct cudaPointerAttributes a;
    CK(cudaHostRegister(buf, 2 * 4096, cudaHostRegisterDefault));
    CK(cudaPointerGetAttributes(&a, buf + 4096));
    assert_int_equal(a.type, cudaMemoryTypeHost);
    assert_int_equal(cudaHostRegister(buf + 4096, 4096, 0), cudaErrorHostMemoryAlreadyRegistered);
    assert_int_equal(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
    CK(cudaHostRegister(buf + 2 * 4096, 4096, cudaHostRegisterPortable)); /* adjacent: fine */
    assert_int_equal(cudaFreeHost(buf), cudaErrorInvalidValue);
    assert_int_equal(cudaHostUnregister(buf + 4096), cudaErrorHostMemoryNotRegistered);
    CK(cudaHostUnregister(buf));
    CK(cudaHostUnregister(buf + 2 * 4096));
    assert_int_equal(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    CK(cudaPointerGetAttributes(&a, buf));
    assert_int_equal(a.type, cudaMemoryTypeUnregistered);
    assert_int_equal(cudaHostRegister(NULL, 4096, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaHostRegister(buf, 0, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaHostRegister(buf, 4096, 0x100), cudaErrorInvalidValue);
    void *dev = NULL;
    CK(cudaMalloc(&dev, 4096));
    assert_int_equal(cudaHostRegister(dev, 4096, 0), cudaErrorInvalidValue);
    CK(cudaFree(dev));
    /* a device reset forgets the registration and leaves the memory to its owner */
    CK(cudaHostRegister(buf, 4096, 0));
    CK(cudaDeviceReset());
    assert_int_equal(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    (void)cudaGetLastError();
    buf[0] = 1; /* still the caller's */
    free(buf);
}

static void stream_priorities_as_on_an_h100(void **state)
{
    (void)state;
    int least = 99, greatest = 99;
    CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    assert_int_equal(least, 0);
    assert_int_equal(greatest, -5);
    CK(cudaDeviceGetStreamPriorityRange(NULL, &greatest));
    cudaStream_t hi, lo, clamped;
    CK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, -5));
    CK(cudaStreamCreateWithPriority(&lo, cudaStreamDefault, 0));
    CK(cudaStreamCreateWithPriority(&clamped, cudaStreamDefault, -40));
    int p = 1;
    CK(cudaStreamGetPriority(hi, &p));
    assert_int_equal(p, -5);
    CK(cudaStreamGetPriority(lo, &p));
    assert_int_equal(p, 0);
    CK(cudaStreamGetPriority(clamped, &p));
    assert_int_equal(p, -5);
    CK(cudaStreamGetPriority(0, &p));
    assert_int_equal(p, 0);
    assert_int_equal(cudaStreamGetPriority(hi, NULL), cudaErrorInvalidValue);
    CK(cudaStreamDestroy(hi));
    assert_int_equal(cudaStreamGetPriority(hi, &p), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(lo));
    CK(cudaStreamDestroy(clamped));
}

/* The default flag is cudaEventRecord: the event completes when the stream reaches it. */
static void event_record_with_flags(void **state)
{
    (void)state;
    cudaStream_t s;
    cudaEvent_t e;
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    gate *g = gate_new();
    gate_hold(g, s);
    CK(cudaEventRecordWithFlags(e, s, cudaEventRecordDefault));
    assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
    gate_open(g);
    CK(cudaEventSynchronize(e));
    CK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal)); /* outside capture: a record */
    CK(cudaEventSynchronize(e));
    assert_int_equal(cudaEventRecordWithFlags(e, s, 0x8), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaEventDestroy(e));
    assert_int_equal(cudaEventRecordWithFlags(e, s, 0), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(s));
}

typedef struct {
    cudaStream_t stream;
    cudaError_t status;
    order_mark mark;
} callback_seen;

static void CUDART_CB record_callback(cudaStream_t stream, cudaError_t status, void *arg)
{
    callback_seen *seen = arg;
    seen->stream = stream;
    seen->status = status;
    order_mark_fn(&seen->mark);
}

/* A callback runs in stream order, after the work before it, with the stream's handle and
 * cudaSuccess; flags must be 0. */
static void stream_callback_runs_in_order(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    order_log log = {0};
    order_mark first = {&log, 1};
    callback_seen seen = {.status = cudaErrorUnknown, .mark = {&log, 2}};
    gate *g = gate_new();
    gate_hold(g, s);
    mark(s, &first);
    CK(cudaStreamAddCallback(s, record_callback, &seen, 0));
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    assert_int_equal(atomic_load(&log.len), 0);
    gate_open(g);
    CK(cudaStreamSynchronize(s));
    assert_int_equal(atomic_load(&log.len), 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    assert_ptr_equal(seen.stream, s);
    assert_int_equal(seen.status, cudaSuccess);
    /* not in a capture (cudaLaunchHostFunc is what captures take) */
    cudaStream_t c;
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaStreamAddCallback(c, record_callback, &seen, 0),
                     cudaErrorStreamCaptureUnsupported);
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    assert_int_equal(cudaEventRecordWithFlags(e, c, cudaEventRecordExternal), cudaErrorNotSupported);
    cudaGraph_t graph = NULL;
    CK(cudaStreamEndCapture(c, &graph));
    CK(cudaGraphDestroy(graph));
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(c));
    assert_int_equal(atomic_load(&log.len), 2); /* the refused callback never ran */
    assert_int_equal(cudaStreamAddCallback(s, record_callback, &seen, 1), cudaErrorInvalidValue);
    assert_int_equal(cudaStreamAddCallback(s, NULL, &seen, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(s));
}

/* cudasim has no driver API behind it: every symbol is "not found", with cudaSuccess. */
static void driver_entry_points_are_not_found(void **state)
{
    (void)state;
    void *fn = (void *)0x1;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
    CK(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &q));
    assert_null(fn);
    assert_int_equal(q, cudaDriverEntryPointSymbolNotFound);
    CK(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, NULL));
    assert_int_equal(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, CUDART_VERSION + 10,
                                                      cudaEnableDefault, &q),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaGetDriverEntryPointByVersion(NULL, &fn, 12000, 0, &q),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaProfilerStart());
    CK(cudaProfilerStop());
    char bus[32];
    CK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    assert_string_equal(bus, "00000000:10:00.0");
    assert_int_equal(cudaDeviceGetPCIBusId(bus, 8, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaDeviceGetPCIBusId(bus, sizeof bus, 7), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
}

static void fake_kernel(void) {}

/* Registration is accepted; every launch, function, occupancy and symbol call answers
 * cudaErrorNoKernelImageForDevice and records it as the last error (read once), so that a
 * framework's launch check sees it; the configuration stack pops what was pushed. */
static void device_code_has_no_image(void **state)
{
    (void)state;
    static char fatbin[16];
    void **h = __cudaRegisterFatBinary(fatbin);
    assert_non_null(h);
    __cudaRegisterFunction(h, (const char *)fake_kernel, (char *)"fake", "fake", -1, NULL, NULL,
                           NULL, NULL, NULL);
    static int device_var;
    __cudaRegisterVar(h, (char *)&device_var, (char *)"device_var", "device_var", 0,
                      sizeof device_var, 0, 0);
    __cudaRegisterFatBinaryEnd(h);
    dim3 grid = {2, 1, 1}, block = {32, 1, 1}, g2, b2;
    size_t shared = 1;
    cudaStream_t st = (cudaStream_t)0x1;
    assert_int_equal(__cudaPushCallConfiguration(grid, block, 64, NULL), 0);
    CK(__cudaPopCallConfiguration(&g2, &b2, &shared, &st));
    assert_int_equal(g2.x, 2);
    assert_int_equal(b2.x, 32);
    assert_int_equal(shared, 64);
    assert_null(st);
    assert_int_equal(__cudaPopCallConfiguration(&g2, &b2, &shared, &st),
                     cudaErrorMissingConfiguration);
    (void)cudaGetLastError();
    cudaKernel_t k = NULL;
    assert_int_equal(__cudaGetKernel(&k, (const void *)fake_kernel),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(__cudaLaunchKernel(k, grid, block, NULL, 0, 0),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaLaunchKernel((const void *)fake_kernel, grid, block, NULL, 0, 0),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaGetLastError(), cudaErrorNoKernelImageForDevice);
    CK(cudaGetLastError()); /* not sticky */
    assert_int_equal(cudaLaunchCooperativeKernel((const void *)fake_kernel, grid, block, NULL, 0,
                                                 0),
                     cudaErrorNoKernelImageForDevice);
    cudaLaunchConfig_t cfg = {.gridDim = grid, .blockDim = block};
    assert_int_equal(cudaLaunchKernelExC(&cfg, (const void *)fake_kernel, NULL),
                     cudaErrorNoKernelImageForDevice);
    struct cudaFuncAttributes fa;
    assert_int_equal(cudaFuncGetAttributes(&fa, (const void *)fake_kernel),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaFuncSetAttribute((const void *)fake_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, 1024),
                     cudaErrorNoKernelImageForDevice);
    int blocks = -1;
    assert_int_equal(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                         &blocks, (const void *)fake_kernel, 128, 0),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                         &blocks, (const void *)fake_kernel, 128, 0, 0),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(blocks, -1);
    void *sym = NULL;
    assert_int_equal(cudaGetSymbolAddress(&sym, &device_var), cudaErrorNoKernelImageForDevice);
    assert_null(sym);
    assert_int_equal(cudaMemcpyToSymbol(&device_var, &blocks, sizeof blocks, 0,
                                        cudaMemcpyHostToDevice),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaKernelSetAttributeForDevice(NULL, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     1, 0),
                     cudaErrorInvalidDeviceFunction);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
    __cudaUnregisterFatBinary(h);
    /* libraries: nothing loads, so no handle is one */
    cudaLibrary_t lib = NULL;
    assert_int_equal(cudaLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0),
                     cudaErrorNoKernelImageForDevice);
    assert_int_equal(cudaLibraryLoadData(NULL, fatbin, NULL, NULL, 0, NULL, NULL, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaLibraryLoadFromFile(&lib, "/nonexistent.cubin", NULL, NULL, 0, NULL,
                                             NULL, 0),
                     cudaErrorNoKernelImageForDevice);
    unsigned count = 0;
    assert_int_equal(cudaLibraryGetKernel(&k, lib, "k"), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaLibraryGetKernelCount(&count, lib), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaLibraryGetGlobal(&sym, &shared, lib, "g"),
                     cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaLibraryGetManaged(&sym, &shared, lib, "m"),
                     cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaLibraryGetUnifiedFunction(&sym, lib, "f"),
                     cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaLibraryUnload(lib), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
}

/* Explicit graph construction and user objects are not emulated: cudaErrorNotSupported. */
static void explicit_graphs_are_not_supported(void **state)
{
    (void)state;
    cudaGraphNode_t node = NULL;
    size_t n = 0;
    cudaUserObject_t obj = NULL;
    cudaGraphConditionalHandle cond;
    assert_int_equal(cudaGraphAddNode(&node, NULL, NULL, NULL, 0, NULL), cudaErrorNotSupported);
    assert_int_equal(cudaGraphConditionalHandleCreate(&cond, NULL, 0, 0), cudaErrorNotSupported);
    assert_int_equal(cudaGraphGetNodes(NULL, NULL, &n), cudaErrorNotSupported);
    assert_int_equal(cudaGraphNodeGetDependencies(node, NULL, NULL, &n), cudaErrorNotSupported);
    assert_int_equal(cudaStreamBeginCaptureToGraph(0, NULL, NULL, NULL, 0,
                                                   cudaStreamCaptureModeGlobal),
                     cudaErrorNotSupported);
    assert_int_equal(cudaStreamUpdateCaptureDependencies(0, NULL, NULL, 0, 0),
                     cudaErrorNotSupported);
    assert_int_equal(cudaUserObjectCreate(&obj, NULL, count_fn, 1,
                                          cudaUserObjectNoDestructorSync),
                     cudaErrorNotSupported);
    assert_int_equal(cudaUserObjectRelease(obj, 1), cudaErrorNotSupported);
    assert_int_equal(cudaGraphRetainUserObject(NULL, obj, 1, 0), cudaErrorNotSupported);
    assert_int_equal(cudaGetLastError(), cudaErrorNotSupported);
}

/* Legacy IPC: cudasim's cudaMalloc memory is private to its process, so each call answers
 * cudaErrorNotSupported once its arguments pass CUDA's checks. */
static void legacy_ipc_is_not_supported(void **state)
{
    (void)state;
    void *d = NULL;
    CK(cudaMalloc(&d, 4096));
    cudaIpcMemHandle_t mh;
    memset(&mh, 0, sizeof mh);
    assert_int_equal(cudaIpcGetMemHandle(&mh, d), cudaErrorNotSupported);
    assert_int_equal(cudaGetLastError(), cudaErrorNotSupported);
    assert_int_equal(cudaIpcGetMemHandle(NULL, d), cudaErrorInvalidValue);
    void *opened = (void *)0x1;
    assert_int_equal(cudaIpcOpenMemHandle(&opened, mh, cudaIpcMemLazyEnablePeerAccess),
                     cudaErrorNotSupported);
    assert_ptr_equal(opened, (void *)0x1);
    assert_int_equal(cudaIpcOpenMemHandle(&opened, mh, 0x10), cudaErrorInvalidValue);
    assert_int_equal(cudaIpcCloseMemHandle(d), cudaErrorNotSupported);
    cudaEvent_t plain, shared;
    CK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&shared, cudaEventDisableTiming | cudaEventInterprocess));
    cudaIpcEventHandle_t eh;
    assert_int_equal(cudaIpcGetEventHandle(&eh, plain), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaIpcGetEventHandle(&eh, shared), cudaErrorNotSupported);
    cudaEvent_t e2;
    memset(&eh, 0, sizeof eh);
    assert_int_equal(cudaIpcOpenEventHandle(&e2, eh), cudaErrorNotSupported);
    assert_int_equal(cudaIpcOpenEventHandle(NULL, eh), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaEventDestroy(plain));
    CK(cudaEventDestroy(shared));
    CK(cudaFree(d));
}

/* Every error the new calls return has its name and text. */
static void error_table_knows_the_new_errors(void **state)
{
    (void)state;
    const cudaError_t errs[] = {
        cudaErrorNoKernelImageForDevice, cudaErrorInvalidDeviceFunction,
        cudaErrorMissingConfiguration, cudaErrorInvalidPitchValue,
        cudaErrorInvalidMemcpyDirection, cudaErrorHostMemoryAlreadyRegistered,
        cudaErrorHostMemoryNotRegistered, cudaErrorNotSupported, cudaErrorInvalidResourceHandle,
        cudaErrorStreamCaptureUnsupported,
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        assert_string_not_equal(cudaGetErrorName(errs[i]), "unrecognized error code");
        assert_string_not_equal(cudaGetErrorString(errs[i]), "unrecognized error code");
    }
    assert_string_equal(cudaGetErrorName(cudaErrorNoKernelImageForDevice),
                        "cudaErrorNoKernelImageForDevice");
}

/* The stand-in libcuda.so.1 (its path in SIM_LIBCUDA): the primary context is active once the
 * runtime has initialised the device; attributes are the runtime's; device code is refused. */
static void stand_in_driver_library(void **state)
{
    (void)state;
    const char *path = getenv("SIM_LIBCUDA");
    assert_non_null(path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    CUresult (*state_of)(CUdevice, unsigned *, int *) =
        (CUresult(*)(CUdevice, unsigned *, int *))dlsym(h, "cuDevicePrimaryCtxGetState");
    CUresult (*get_attr)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(h, "cuDeviceGetAttribute");
    CUresult (*err_string)(CUresult, const char **) =
        (CUresult(*)(CUresult, const char **))dlsym(h, "cuGetErrorString");
    CUresult (*load)(CUmodule *, const void *) =
        (CUresult(*)(CUmodule *, const void *))dlsym(h, "cuModuleLoadData");
    assert_non_null(state_of);
    assert_non_null(get_attr);
    assert_non_null(err_string);
    assert_non_null(load);
    unsigned flags = 7;
    int active = 7;
    assert_int_equal(state_of(0, &flags, &active), CUDA_SUCCESS);
    assert_int_equal(active, 0); /* a fresh emulator: nothing initialised the device yet */
    CK(cudaSetDevice(0));
    assert_int_equal(state_of(0, &flags, &active), CUDA_SUCCESS);
    assert_int_equal(active, 1);
    assert_int_equal(flags, 0);
    assert_int_equal(state_of(5, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
    int major = 0;
    assert_int_equal(get_attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
                     CUDA_SUCCESS);
    assert_int_equal(major, 9);
    const char *text = NULL;
    assert_int_equal(err_string(CUDA_ERROR_NOT_SUPPORTED, &text), CUDA_SUCCESS);
    assert_string_equal(text, "operation not supported");
    CUmodule m;
    assert_int_equal(load(&m, "x"), CUDA_ERROR_NOT_SUPPORTED);
    dlclose(h);
}

TEST_MAIN("cudasim_torch",
    RESET(stand_in_driver_library), /* first: it needs a device not yet initialised */
    RESET(memset_runs_in_legacy_stream_order),
    RESET(memcpy2d_copies_rows_at_their_pitches),
    RESET(pointer_attributes_tell_every_kind),
    RESET(host_register_and_unregister),
    RESET(stream_priorities_as_on_an_h100),
    RESET(event_record_with_flags),
    RESET(stream_callback_runs_in_order),
    RESET(driver_entry_points_are_not_found),
    RESET(device_code_has_no_image),
    RESET(explicit_graphs_are_not_supported),
    RESET(legacy_ipc_is_not_supported),
    RESET(error_table_knows_the_new_errors)
)
