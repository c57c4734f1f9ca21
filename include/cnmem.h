/* cnmem.h: NVIDIA CNMeM's C API (version 1.0.0), implemented by libstreampool_cnmem on top of
 * streampool. A program written for CNMeM builds against this header and links with
 * -lstreampool_cnmem unchanged (pkg-config streampool_cnmem, or CMake streampool::cnmem).
 *
 * The model is CNMeM's: per device a root manager that owns `size` bytes from cnmemInit, and a
 * child manager per named stream (given to cnmemInit or cnmemRegisterStream) that takes its
 * bytes from the root. An allocation on a named stream is served from its child's free bytes,
 * else from the root's; the root grows (unless CNMEM_FLAGS_CANNOT_GROW) and otherwise takes a
 * child's free bytes (unless CNMEM_FLAGS_CANNOT_STEAL). Sizes are rounded up to 512 bytes, and
 * cnmemMemGetInfo reports a manager's figures in those bytes.
 *
 * Underneath, each device is a streampool runtime with one pool that reserves `size` bytes at
 * cnmemInit; a block is allocated and freed in stream order on the stream the call names, so a
 * stream reuses its own frees at once and other streams' only behind an event fence: nothing
 * synchronizes a stream to "steal". CNMEM_FLAGS_CANNOT_GROW caps the bytes handed out at `size`
 * exactly; the device memory under them is the reservation plus streampool's rounding to whole
 * slabs and segments (2 MiB units), which a pool limit of `size` would refuse too early.
 * With CNMEM_FLAGS_MANAGED each allocation is one cudaMallocManaged (cudaMemAttachGlobal) on the
 * current device and each free a cudaFree; cnmemInit checks that `size` bytes can be had by
 * allocating and freeing them once, and the byte accounting is the same.
 *
 * Where this library differs from CNMeM 1.0.0's code, it follows the documentation below:
 *  - an allocation refused under CNMEM_FLAGS_CANNOT_STEAL is CNMEM_STATUS_OUT_OF_MEMORY (CNMeM's
 *    code returns CNMEM_STATUS_INVALID_ARGUMENT there);
 *  - a failed cnmemInit leaves the library uninitialized and holds nothing; cnmemInit while the
 *    library is initialized is CNMEM_STATUS_INVALID_ARGUMENT (CNMeM replaced, and leaked, its
 *    context); a device listed twice, a negative numStreams, a NULL or repeated stream in
 *    `streams` are CNMEM_STATUS_INVALID_ARGUMENT;
 *  - free bytes are counted, not blocks: a request that fits a manager's free bytes is never
 *    refused because they are split;
 *  - cnmemFree on the NULL stream accepts a block allocated on any stream of the device (it is
 *    freed in the legacy stream's order) and returns its bytes to the manager that allocated it;
 *    on a named stream, only blocks allocated on that stream;
 *  - registering a stream twice is a no-op; cnmemInit does not write the rounded sizes back
 *    into streamSizes.
 */
#ifndef STREAMPOOL_CNMEM_H
#define STREAMPOOL_CNMEM_H

#ifdef __cplusplus
#include <cstdio>
#else
#include <stdio.h>
#endif
#include <stddef.h>
#include <cuda_runtime_api.h>

#if defined(__GNUC__)
#define CNMEM_API __attribute__((visibility("default")))
#else
#define CNMEM_API
#endif

#define CNMEM_VERSION 100 /* CNMeM 1.0.0's API */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CNMEM_STATUS_SUCCESS = 0,
    CNMEM_STATUS_CUDA_ERROR,
    CNMEM_STATUS_INVALID_ARGUMENT,
    CNMEM_STATUS_NOT_INITIALIZED,
    CNMEM_STATUS_OUT_OF_MEMORY,
    CNMEM_STATUS_UNKNOWN_ERROR
} cnmemStatus_t;

typedef enum {
    CNMEM_FLAGS_DEFAULT = 0,      /* grow on demand, take children's free bytes when short */
    CNMEM_FLAGS_CANNOT_GROW = 1,  /* the root never holds more than its initial size */
    CNMEM_FLAGS_CANNOT_STEAL = 2, /* never take another manager's free bytes */
    CNMEM_FLAGS_MANAGED = 4,      /* memory from cudaMallocManaged */
} cnmemManagerFlags_t;

typedef struct cnmemDevice_t_ {
    int device;                   /* the CUDA device */
    size_t size;                  /* bytes for the device; 0: half its global memory */
    int numStreams;               /* named streams in `streams` (never the NULL stream) */
    cudaStream_t *streams;        /* may be NULL when numStreams is 0 */
    size_t *streamSizes;          /* bytes each stream's manager takes from the root at init;
                                     NULL or 0 entries: none */
} cnmemDevice_t;

/* Sets up a root manager per listed device with `size` bytes (rounded up to 512; it must be
 * less than the device's total memory) and a child per named stream, reserving its streamSizes
 * entry from the root. Restores the current device. Not thread-safe.
 * SUCCESS, INVALID_ARGUMENT (numDevices < 1, devices NULL, a negative device, a bad size or
 * stream list), OUT_OF_MEMORY (the device cannot give `size`, or the root cannot give a
 * stream's size under CANNOT_GROW), CUDA_ERROR (a CUDA call failed, e.g. no such device). */
cnmemStatus_t CNMEM_API cnmemInit(int numDevices, const cnmemDevice_t *devices, unsigned flags);

/* Drops one reference (as cnmemRelease); the last one frees every block still allocated and
 * gives all memory back to the devices. Call it after the threads that allocate have joined.
 * SUCCESS, NOT_INITIALIZED, CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemFinalize(void);

/* Take and drop a reference to the library (thread-safe): cnmemInit holds one; the library is
 * finalized when the count reaches 0. SUCCESS, NOT_INITIALIZED. */
cnmemStatus_t CNMEM_API cnmemRetain(void);
cnmemStatus_t CNMEM_API cnmemRelease(void);

/* Adds a child manager for `stream` on the current device (thread-safe).
 * SUCCESS, NOT_INITIALIZED, INVALID_ARGUMENT (NULL stream, or a device cnmemInit did not
 * list), CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemRegisterStream(cudaStream_t stream);

/* Allocates `size` bytes (rounded up to 512) for use on `stream` (NULL: the root manager) on
 * the current device (thread-safe). size 0: *ptr = NULL and SUCCESS; ptr NULL with size 0:
 * SUCCESS. SUCCESS, NOT_INITIALIZED, INVALID_ARGUMENT (ptr NULL, a stream not registered, a
 * device not listed), OUT_OF_MEMORY (*ptr is then unchanged), CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemMalloc(void **ptr, size_t size, cudaStream_t stream);

/* Frees a block from cnmemMalloc (thread-safe). ptr NULL: SUCCESS. INVALID_ARGUMENT for a
 * pointer not allocated (or already freed) on this device, or freed on a named stream other
 * than the one it was allocated on. SUCCESS, NOT_INITIALIZED, INVALID_ARGUMENT, CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemFree(void *ptr, cudaStream_t stream);

/* The bytes the manager of `stream` (NULL: the root) on the current device holds (*totalMem)
 * and how many of them are not allocated (*freeMem). A root's total is its initial size plus
 * what it grew by; what its children took counts as allocated. SUCCESS, NOT_INITIALIZED,
 * INVALID_ARGUMENT (a NULL output, a stream not registered), CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemMemGetInfo(size_t *freeMem, size_t *totalMem, cudaStream_t stream);

/* Writes the manager of `stream` and, for a child, then its root, to `file`: a header line
 * ">> [root|child] device=D, stream=0x..., used=NB, free=NB", then its used blocks as
 * "| list=\"used\", size=N" and one "| | data=0x..., size=N" line each, and its free bytes as
 * "| list=\"free\", size=N". SUCCESS, NOT_INITIALIZED, INVALID_ARGUMENT (file NULL, a stream
 * not registered), CUDA_ERROR. */
cnmemStatus_t CNMEM_API cnmemPrintMemoryState(FILE *file, cudaStream_t stream);

/* The status's name ("CNMEM_STATUS_OUT_OF_MEMORY"); "CNMEM_STATUS_UNKNOWN_ERROR" for any value
 * that is not a status. */
CNMEM_API const char *cnmemGetErrorString(cnmemStatus_t status);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_CNMEM_H */
