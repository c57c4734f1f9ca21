/* The importing process of the multi suite's tests and of nothing else: runs the commands of
 * tests/multi_proto.h that arrive on the socket numbered argv[1], on device argv[2] (0 if none),
 * and answers each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multi_proto.h"

#define MAX_IMPORTS 4096

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int sock = atoi(argv[1]);
    int device = argc > 2 ? atoi(argv[2]) : 0;
    if (cudaSetDevice(device) != cudaSuccess)
        return 3;
    sp_runtime *rt = NULL;
    if (sp_runtime_create(device, NULL, &rt) != SP_OK)
        return 4;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return 5;
    sp_import *imp = NULL;
    static void *ptrs[MAX_IMPORTS];
    uint32_t n = 0;
    unsigned char *host = NULL;
    size_t host_len = 0;
    for (;;) {
        multi_cmd c;
        if (multi_io(sock, &c, sizeof c, 0) != 0)
            c.op = OP_EXIT; /* the test closed its end */
        multi_reply r = {0, 0};
        switch (c.op) {
        case OP_IMPORT_POOL:
            r.rc = sp_pool_import(rt, sock, "from-exporter", &imp);
            break;
        case OP_IMPORT_BLOCK:
            if (n == MAX_IMPORTS) {
                r.rc = SP_ERR_LIMIT;
                break;
            }
            r.rc = sp_import_block(imp, &c.handle, &ptrs[n]);
            if (r.rc == SP_OK)
                r.index = n++;
            break;
        case OP_CHECK:
        case OP_FILL:
            if (c.index >= n) {
                r.rc = SP_ERR_INVALID;
                break;
            }
            if (host_len < c.len) {
                free(host);
                host = malloc(c.len);
                host_len = host ? c.len : 0;
            }
            if (!host) {
                r.rc = SP_ERR_NO_HOST_MEMORY;
                break;
            }
            if (c.op == OP_FILL) {
                memset(host, (int)c.byte, c.len);
                r.rc = cudaMemcpyAsync(ptrs[c.index], host, c.len, cudaMemcpyHostToDevice, s) ||
                       cudaStreamSynchronize(s);
            } else {
                r.rc = cudaMemcpyAsync(host, ptrs[c.index], c.len, cudaMemcpyDeviceToHost, s) ||
                       cudaStreamSynchronize(s);
                for (uint64_t i = 0; i < c.len && r.rc == 0; i++)
                    r.rc = host[i] != c.byte;
            }
            break;
        case OP_RELEASE:
            r.rc = c.index < n ? sp_import_release(imp, ptrs[c.index], s) : SP_ERR_INVALID;
            break;
        case OP_RELEASE_PTR:
            r.rc = sp_import_release(imp, (void *)(uintptr_t)c.len, s);
            break;
        case OP_CLOSE:
            r.rc = sp_import_close(imp);
            imp = NULL;
            break;
        case OP_EXIT:
            /* what is left goes: the import (releasing its imports), the stream, the runtime */
            free(host);
            r.rc = imp ? sp_import_close(imp) : SP_OK;
            (void)cudaStreamDestroy(s);
            if (r.rc == SP_OK)
                r.rc = sp_runtime_destroy(rt);
            return r.rc == SP_OK ? 0 : 7;
        default:
            r.rc = SP_ERR_INVALID;
        }
        if (multi_io(sock, &r, sizeof r, 1) != 0)
            return 6;
    }
}
