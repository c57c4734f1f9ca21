/* The only file that calls CUDA. Each wrapper maps cudaError_t to an SP_ERR_* status and keeps
 * the raw error for sp_last_cuda_error(); calls that create per-device objects switch to the
 * runtime's device and back, so the caller's current device is left as it was. */
#include <string.h>

#include "cuda.h"
#include "status.h"

static int check(cudaError_t err)
{
    if (sp_likely(err == cudaSuccess))
        return SP_OK;
    sp__status_set_cuda((int)err);
    (void)cudaGetLastError(); /* streampool handled it: do not leave it for the application */
    switch (err) {
    case cudaErrorMemoryAllocation: return SP_ERR_OUT_OF_MEMORY;
    case cudaErrorNotSupported: return SP_ERR_NOT_SUPPORTED;
    case cudaErrorInvalidDevice: return SP_ERR_NO_DEVICE;
    default: return SP_ERR_CUDA;
    }
}

/* Runs with `device` current, restoring the caller's device after. */
typedef struct {
    int previous;
    bool switched;
} device_scope;

static int device_enter(int device, device_scope *scope)
{
    scope->switched = false;
    int rc = check(cudaGetDevice(&scope->previous));
    if (rc == SP_OK && scope->previous != device) {
        rc = check(cudaSetDevice(device));
        scope->switched = rc == SP_OK;
    }
    return rc;
}

static void device_leave(const device_scope *scope)
{
    if (scope->switched)
        (void)cudaSetDevice(scope->previous);
}

/* rc = check(call) made with `device` current, the caller's device current again after; the call
 * is not made, and rc is why, if the device cannot be made current. */
#define ON_DEVICE(rc, device, call)                                                                \
    do {                                                                                           \
        device_scope scope_;                                                                       \
        (rc) = device_enter((device), &scope_);                                                    \
        if ((rc) == SP_OK)                                                                         \
            (rc) = check(call);                                                                    \
        device_leave(&scope_);                                                                     \
    } while (0)

/* The device count the latest sp__cuda_check_device saw (0: none yet): with one device, every
 * stream is of the pool's device, and peer.c need not ask a stream's. */
static atomic_int known_devices;

int sp__cuda_known_device_count(void)
{
    return atomic_load_explicit(&known_devices, memory_order_relaxed);
}

int sp__cuda_check_device(int device)
{
    int count = 0, pools = 0;
    int rc = check(cudaGetDeviceCount(&count));
    if (rc != SP_OK)
        return rc;
    atomic_store_explicit(&known_devices, count, memory_order_relaxed);
    if (device < 0 || device >= count) { /* what CUDA itself says of such a device */
        sp__status_set_cuda((int)cudaErrorInvalidDevice);
        return SP_ERR_NO_DEVICE;
    }
    rc = check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    if (rc == SP_OK && !pools)
        rc = SP_ERR_NOT_SUPPORTED; /* rule 5: some vGPU and Windows TCC setups */
    return rc;
}

bool sp__cuda_context_lost(void)
{
    switch ((cudaError_t)sp__status_cuda) {
    /* "the process is left in an inconsistent state and any further CUDA work will return the
     * same error" (the Runtime API on each): every allocation went with the context */
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    /* the runtime unloading at the process's exit: nothing can be given back any more */
    case cudaErrorCudartUnloading:
        return true;
    default:
        return false;
    }
}

int sp__cuda_current_device(int *device)
{
    return check(cudaGetDevice(device));
}

const char *sp__cuda_error_name(int err)
{
    return cudaGetErrorName((cudaError_t)err);
}

const char *sp__cuda_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}

int sp__cuda_pool_create(int device, uint64_t max_size, cudaMemPool_t *out)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
#if CUDART_VERSION >= 12020
    props.maxSize = (size_t)max_size; /* the driver enforces the pool's limit as well */
#else
    (void)max_size;
#endif
    return check(cudaMemPoolCreate(out, &props));
}

int sp__cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total)
{
    size_t f = 0, t = 0;
    int rc;
    ON_DEVICE(rc, device, cudaMemGetInfo(&f, &t));
    *free_bytes = f;
    *total = t;
    return rc;
}

int sp__cuda_pool_destroy(cudaMemPool_t pool)
{
    return check(cudaMemPoolDestroy(pool));
}

/* Potentially unsafe calls during a graph capture. cudaEventQuery and cudaEventSynchronize are
 * "potentially unsafe" while a graph capture is under way: in CUDA's default (global) mode they
 * fail with cudaErrorStreamCaptureUnsupported and invalidate the capture, this thread's or any
 * other thread's global one. streampool never asks
 * about a capturing stream's events (rule 25), so with `relaxed` (a capture may be under way) it
 * makes them in relaxed mode, as PyTorch's allocator does, and puts the thread's mode back. */
static enum cudaStreamCaptureMode relax(bool relaxed)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (relaxed && cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
        (void)cudaGetLastError(); /* the call after it fails alike and says why */
        mode = cudaStreamCaptureModeRelaxed; /* unchanged: nothing to put back */
    }
    return mode;
}

static void unrelax(bool relaxed, enum cudaStreamCaptureMode mode)
{
    if (relaxed && mode != cudaStreamCaptureModeRelaxed)
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

/* Reading or setting a cudaMemPool's attributes and trimming it are potentially unsafe calls
 * too: in a non-relaxed mode they fail and invalidate the captures that mode covers
 * (NVIDIA/cccl#11360 moves libcu++'s pool-attribute access to relaxed mode for this). They are
 * no stream work, which a capture would record, so relaxed mode changes nothing else. Always
 * relaxed, not only while sp__capture_possible: stats reads, trims and out-of-memory paths make
 * them under no lock that sp_stream_capture_begin waits for, so a capture may begin between
 * such a check and the call. */
int sp__cuda_pool_set_threshold(cudaMemPool_t pool, uint64_t bytes)
{
    enum cudaStreamCaptureMode mode = relax(true);
    cudaError_t err = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes);
    unrelax(true, mode);
    return check(err);
}

int sp__cuda_pool_usage(cudaMemPool_t pool, uint64_t *reserved, uint64_t *used)
{
    enum cudaStreamCaptureMode mode = relax(true);
    cudaError_t err = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, reserved);
    if (err == cudaSuccess)
        err = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, used);
    unrelax(true, mode);
    return check(err);
}

int sp__cuda_pool_trim(cudaMemPool_t pool, size_t keep)
{
    enum cudaStreamCaptureMode mode = relax(true);
    cudaError_t err = cudaMemPoolTrimTo(pool, keep);
    unrelax(true, mode);
    return check(err);
}

int sp__cuda_malloc(cudaMemPool_t pool, void **ptr, size_t bytes, cudaStream_t stream)
{
    return check(cudaMallocFromPoolAsync(ptr, bytes, pool, stream));
}

int sp__cuda_free(void *ptr, cudaStream_t stream)
{
    return check(cudaFreeAsync(ptr, stream));
}

int sp__cuda_event_create(int device, cudaEvent_t *out)
{
    int rc;
    ON_DEVICE(rc, device, cudaEventCreateWithFlags(out, cudaEventDisableTiming));
    return rc;
}

int sp__cuda_event_destroy(cudaEvent_t event)
{
    return check(cudaEventDestroy(event));
}

int sp__cuda_event_record(cudaEvent_t event, cudaStream_t stream)
{
    return check(cudaEventRecord(event, stream));
}

int sp__cuda_event_query(cudaEvent_t event, bool relaxed, bool *done)
{
    enum cudaStreamCaptureMode mode = relax(relaxed);
    cudaError_t err = cudaEventQuery(event);
    unrelax(relaxed, mode);
    *done = err == cudaSuccess;
    return err == cudaErrorNotReady ? SP_OK : check(err);
}

int sp__cuda_event_sync(cudaEvent_t event, bool relaxed)
{
    enum cudaStreamCaptureMode mode = relax(relaxed);
    cudaError_t err = cudaEventSynchronize(event);
    unrelax(relaxed, mode);
    return check(err);
}

int sp__cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event)
{
    return check(cudaStreamWaitEvent(stream, event, 0));
}

int sp__cuda_stream_create(int device, cudaStream_t *out)
{
    int rc;
    ON_DEVICE(rc, device, cudaStreamCreateWithFlags(out, cudaStreamNonBlocking));
    return rc;
}

int sp__cuda_stream_destroy(cudaStream_t stream)
{
    return check(cudaStreamDestroy(stream));
}

int sp__cuda_stream_sync(cudaStream_t stream)
{
    return check(cudaStreamSynchronize(stream));
}

int sp__cuda_stream_query(cudaStream_t stream, bool *idle)
{
    cudaError_t err = cudaStreamQuery(stream);
    *idle = err == cudaSuccess;
    return err == cudaErrorNotReady ? SP_OK : check(err);
}

int sp__cuda_stream_is_capturing(cudaStream_t stream, bool *capturing)
{
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    int rc = check(cudaStreamIsCapturing(stream, &status));
    *capturing = status != cudaStreamCaptureStatusNone;
    return rc;
}

int sp__cuda_device_sync(int device)
{
    int rc;
    ON_DEVICE(rc, device, cudaDeviceSynchronize());
    return rc;
}

/* ---- many devices and processes (peer.c, share.c) ---- */

int sp__cuda_pool_create_shareable(int device, uint64_t max_size, cudaMemPool_t *out)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
#if CUDART_VERSION >= 12020
    props.maxSize = (size_t)max_size;
#else
    (void)max_size;
#endif
    return check(cudaMemPoolCreate(out, &props));
}

int sp__cuda_stream_device(cudaStream_t stream, int *device)
{
#if CUDART_VERSION >= 12080
    return check(cudaStreamGetDevice(stream, device));
#else
    (void)stream; /* older runtimes cannot say: the caller's device is the stream's */
    return check(cudaGetDevice(device));
#endif
}

int sp__cuda_device_count(int *count)
{
    return check(cudaGetDeviceCount(count));
}

int sp__cuda_can_access_peer(int device, int peer, bool *can)
{
    int yes = 0;
    int rc = check(cudaDeviceCanAccessPeer(&yes, device, peer));
    *can = rc == SP_OK && yes;
    return rc;
}

int sp__cuda_pool_set_access(cudaMemPool_t pool, int device, int flags)
{
    struct cudaMemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = device;
    desc.flags = flags == 3   ? cudaMemAccessFlagsProtReadWrite
                 : flags == 1 ? cudaMemAccessFlagsProtRead
                              : cudaMemAccessFlagsProtNone;
    return check(cudaMemPoolSetAccess(pool, &desc, 1));
}

int sp__cuda_pool_get_access(cudaMemPool_t pool, int device, int *flags)
{
    struct cudaMemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    int rc = check(cudaMemPoolGetAccess(&f, pool, &loc));
    *flags = f == cudaMemAccessFlagsProtReadWrite ? 3 : f == cudaMemAccessFlagsProtRead ? 1 : 0;
    return rc;
}

int sp__cuda_pool_export_fd(cudaMemPool_t pool, int *fd)
{
    int handle = -1;
    int rc = check(cudaMemPoolExportToShareableHandle(&handle, pool,
                                                      cudaMemHandleTypePosixFileDescriptor, 0));
    *fd = handle;
    return rc;
}

int sp__cuda_pool_import_fd(int fd, cudaMemPool_t *out)
{
    /* the handle of a POSIX fd is the fd itself, passed by value in the pointer */
    return check(cudaMemPoolImportFromShareableHandle(out, (void *)(intptr_t)fd,
                                                      cudaMemHandleTypePosixFileDescriptor, 0));
}

int sp__cuda_pool_export_pointer(void *ptr, unsigned char data[64])
{
    struct cudaMemPoolPtrExportData d;
    memset(&d, 0, sizeof d);
    int rc = check(cudaMemPoolExportPointer(&d, ptr));
    memcpy(data, &d, sizeof d < 64 ? sizeof d : 64);
    return rc;
}

int sp__cuda_pool_import_pointer(cudaMemPool_t pool, const unsigned char data[64], void **ptr)
{
    struct cudaMemPoolPtrExportData d;
    memset(&d, 0, sizeof d);
    memcpy(&d, data, sizeof d < 64 ? sizeof d : 64);
    return check(cudaMemPoolImportPointer(ptr, pool, &d));
}
