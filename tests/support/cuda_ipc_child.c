/* The importing half of test_cuda_peer_ipc's fork+exec case, a process of its own:
 *   cuda_ipc_child fd   FD   HEX DEVICE N SEED BYTE   (the pool's descriptor inherited)
 *   cuda_ipc_child sock SOCK     DEVICE N SEED BYTE   (descriptor and export data sent over a
 *                                                       Unix socket, SCM_RIGHTS)
 * It imports the pool and the block, checks that the block reads the exporter's bytes (SEED's
 * pattern), writes BYTE over it, frees its import and waits for the free, then exits 0. Any
 * failure exits with the step's number and says which on stderr. Only the Runtime API. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#ifdef SP_CUDASIM
#include "cudasim.h"
#endif

static int fail(int step, const char *what, cudaError_t err)
{
    fprintf(stderr, "cuda_ipc_child: step %d, %s: %s\n", step, what,
            err == cudaSuccess ? "wrong bytes" : cudaGetErrorName(err));
    return step;
}

static int from_hex(const char *hex, unsigned char *out, size_t n)
{
    if (strlen(hex) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* Receives the export data with the pool's descriptor attached. */
static int receive(int sock, struct cudaMemPoolPtrExportData *data)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = data, .iov_len = sizeof *data};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)sizeof *data)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

int main(int argc, char **argv)
{
    bool sock = argc == 7 && strcmp(argv[1], "sock") == 0;
    if (!sock && !(argc == 8 && strcmp(argv[1], "fd") == 0)) {
        fprintf(stderr, "usage: cuda_ipc_child fd FD HEX DEVICE N SEED BYTE | "
                        "sock SOCK DEVICE N SEED BYTE\n");
        return 64;
    }
    char **rest = argv + (sock ? 3 : 4);
    int device = atoi(rest[0]);
    size_t n = strtoull(rest[1], NULL, 10);
    unsigned seed = (unsigned)atoi(rest[2]);
    int byte = atoi(rest[3]);
    struct cudaMemPoolPtrExportData data;
    int fd;
    if (sock) {
        fd = receive(atoi(argv[2]), &data);
        if (fd < 0)
            return fail(1, "receiving the descriptor", cudaSuccess);
    } else {
        fd = atoi(argv[2]);
        if (from_hex(argv[3], data.reserved, sizeof data.reserved) != 0)
            return fail(1, "reading the export data", cudaSuccess);
    }
    cudaError_t err = cudaSetDevice(device);
    if (err)
        return fail(2, "cudaSetDevice", err);
    cudaMemPool_t pool;
    err = cudaMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                               cudaMemHandleTypePosixFileDescriptor, 0);
    if (err)
        return fail(3, "cudaMemPoolImportFromShareableHandle", err);
    close(fd); /* the imported pool keeps what it needs */
    void *p = NULL;
    if ((err = cudaMemPoolImportPointer(&p, pool, &data)))
        return fail(4, "cudaMemPoolImportPointer", err);
#ifdef SP_CUDASIM
    /* the exporter's device counts the pages, once: nothing is charged here */
    size_t free_b = 0, total = 0;
    if ((err = cudaMemGetInfo(&free_b, &total)) || free_b != total)
        return fail(5, "cudaMemGetInfo after the import", err);
#endif
    unsigned char *h = malloc(n);
    if (!h)
        return fail(6, "malloc", cudaSuccess);
    if ((err = cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost)))
        return fail(6, "cudaMemcpy from the imported block", err);
    for (size_t i = 0; i < n; i++)
        if (h[i] != (unsigned char)(i * 31u + seed))
            return fail(6, "the exporter's bytes", cudaSuccess);
    cudaStream_t s;
    if ((err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ||
        (err = cudaMemsetAsync(p, byte, n, s)) || (err = cudaFreeAsync(p, s)) ||
        (err = cudaStreamSynchronize(s)))
        return fail(7, "write, free and wait", err);
    if ((err = cudaStreamDestroy(s)) || (err = cudaMemPoolDestroy(pool)))
        return fail(8, "cleaning up", err);
    free(h);
    return 0;
}
