/* Issue 22 items 19 and 20, as a user's program meets them: built against NVIDIA's own
 * libcudart (not cudasim), bound at load time (-z now), and run on cudasim's drop-in
 * libcudart.so.<major>. Every entry point it names must be there under the runtime's version
 * node, or the program does not start; each must answer as documented. TAP output. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

static int n, failed;

static void check(const char *what, int ok)
{
    printf("%s %d - %s\n", ok ? "ok" : "not ok", ++n, what);
    failed += !ok;
}

int main(void)
{
    uint64_t v = 42;
    check("cudaDeviceGetGraphMemAttribute: no graph memory yet",
          cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &v) ==
              cudaSuccess && v == 0);
    v = 0;
    check("cudaDeviceSetGraphMemAttribute: a high watermark to 0",
          cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v) == cudaSuccess);
    check("cudaDeviceSetGraphMemAttribute: not a current figure",
          cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v) ==
              cudaErrorInvalidValue);
    check("cudaDeviceGraphMemTrim", cudaDeviceGraphMemTrim(0) == cudaSuccess);
    cudaMemPool_t pool;
    int fd = -1;
    check("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    check("cudaMemPoolExportToShareableHandle: no IPC",
          cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) ==
              cudaErrorInvalidValue);
    cudaMemPool_t imported = NULL;
    check("cudaMemPoolImportFromShareableHandle: no IPC",
          cudaMemPoolImportFromShareableHandle(&imported, &fd, cudaMemHandleTypePosixFileDescriptor,
                                               0) == cudaErrorInvalidValue && !imported);
    void *p = NULL, *q = NULL;
    struct cudaMemPoolPtrExportData data;
    memset(&data, 0, sizeof data);
    check("cudaMallocAsync", cudaMallocAsync(&p, 4096, 0) == cudaSuccess);
    check("cudaMemPoolExportPointer: no IPC",
          cudaMemPoolExportPointer(&data, p) == cudaErrorInvalidValue);
    check("cudaMemPoolImportPointer: no IPC",
          cudaMemPoolImportPointer(&q, pool, &data) == cudaErrorInvalidValue && !q);
    check("cudaFreeAsync", cudaFreeAsync(p, 0) == cudaSuccess);
    (void)cudaGetLastError();
    cudaStream_t s;
    check("cudaStreamCreate", cudaStreamCreate(&s) == cudaSuccess);
    check("cudaDeviceReset", cudaDeviceReset() == cudaSuccess);
    check("cudaDeviceReset destroyed the stream",
          cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    check("a later call starts afresh", cudaStreamCreate(&s) == cudaSuccess &&
                                            cudaStreamDestroy(s) == cudaSuccess);
    printf("1..%d\n", n);
    return failed ? 1 : 0;
}
