/* A CNMeM program as its users write it (cnmem.h and the CUDA runtime only), linked against
 * libstreampool_cnmem: 8 MiB for device 0 that may not grow, two streams with 2 MiB each, a
 * stream that outgrows its share and takes the root's, a request that does not fit, and the
 * memory state at each step. Exits non-zero if any call answers other than CNMeM documents. */
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

#include "cnmem.h"

#define MiB ((size_t)1 << 20)

static int failures;

static void expect(const char *what, cnmemStatus_t got, cnmemStatus_t want)
{
    printf("%-48s -> %s\n", what, cnmemGetErrorString(got));
    if (got != want) {
        printf("    expected %s\n", cnmemGetErrorString(want));
        failures++;
    }
}

static void info(const char *name, cudaStream_t stream)
{
    size_t free_b = 0, total = 0;
    expect("cnmemMemGetInfo", cnmemMemGetInfo(&free_b, &total, stream), CNMEM_STATUS_SUCCESS);
    printf("    %-8s total %5zu KiB, free %5zu KiB\n", name, total >> 10, free_b >> 10);
}

int main(void)
{
    cudaStream_t streams[2];
    if (cudaStreamCreate(&streams[0]) != cudaSuccess ||
        cudaStreamCreate(&streams[1]) != cudaSuccess) {
        fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    void *p = NULL;
    expect("cnmemMalloc before cnmemInit", cnmemMalloc(&p, 1024, NULL),
           CNMEM_STATUS_NOT_INITIALIZED);

    size_t stream_sizes[2] = {2 * MiB, 2 * MiB};
    cnmemDevice_t device = {0, 8 * MiB, 2, streams, stream_sizes};
    expect("cnmemInit(8 MiB, 2 streams x 2 MiB, CANNOT_GROW)",
           cnmemInit(1, &device, CNMEM_FLAGS_CANNOT_GROW), CNMEM_STATUS_SUCCESS);
    info("root", NULL);
    info("stream 0", streams[0]);

    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    expect("cnmemMalloc(1.5 MiB) on stream 0", cnmemMalloc(&a, 3 * MiB / 2, streams[0]),
           CNMEM_STATUS_SUCCESS);
    expect("cnmemMalloc(1 MiB) on stream 0 (from the root)", cnmemMalloc(&b, MiB, streams[0]),
           CNMEM_STATUS_SUCCESS);
    expect("cnmemMalloc(3 MiB) on the NULL stream", cnmemMalloc(&c, 3 * MiB, NULL),
           CNMEM_STATUS_SUCCESS);
    info("root", NULL);
    info("stream 0", streams[0]);
    expect("cnmemMalloc(2 MiB) on the NULL stream (steals)", cnmemMalloc(&d, 2 * MiB, NULL),
           CNMEM_STATUS_SUCCESS);
    void *e = (void *)0x1;
    expect("cnmemMalloc(1 MiB) on the NULL stream", cnmemMalloc(&e, MiB, NULL),
           CNMEM_STATUS_OUT_OF_MEMORY);
    expect("cnmemFree on the wrong stream", cnmemFree(a, streams[1]),
           CNMEM_STATUS_INVALID_ARGUMENT);
    printf("--- cnmemPrintMemoryState(stdout, stream 0)\n");
    expect("cnmemPrintMemoryState", cnmemPrintMemoryState(stdout, streams[0]),
           CNMEM_STATUS_SUCCESS);

    expect("cnmemFree(a) on stream 0", cnmemFree(a, streams[0]), CNMEM_STATUS_SUCCESS);
    expect("cnmemFree(b) on stream 0", cnmemFree(b, streams[0]), CNMEM_STATUS_SUCCESS);
    expect("cnmemFree(c) on the NULL stream", cnmemFree(c, NULL), CNMEM_STATUS_SUCCESS);
    expect("cnmemFree(d) on the NULL stream", cnmemFree(d, NULL), CNMEM_STATUS_SUCCESS);
    info("root", NULL);
    info("stream 0", streams[0]);
    info("stream 1", streams[1]);
    expect("cnmemFinalize", cnmemFinalize(), CNMEM_STATUS_SUCCESS);
    expect("cnmemFinalize again", cnmemFinalize(), CNMEM_STATUS_NOT_INITIALIZED);
    cudaStreamDestroy(streams[0]);
    cudaStreamDestroy(streams[1]);
    printf("%s\n", failures ? "FAILED" : "all as CNMeM documents");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
