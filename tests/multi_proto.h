/* The command protocol between test_multi_share and its importer (multi_importer.c), one
 * fixed-size message each way over the socket the pool is exported on. */
#ifndef MULTI_PROTO_H
#define MULTI_PROTO_H

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "streampool.h"

enum {
    OP_IMPORT_POOL = 1, /* the export's message follows on the socket: sp_pool_import */
    OP_IMPORT_BLOCK,    /* handle -> rc, index of the import */
    OP_CHECK,           /* index, byte, len: rc 0 if the len bytes all equal byte, else 1 */
    OP_FILL,            /* index, byte, len: written through a stream, synchronized */
    OP_RELEASE,         /* index -> rc */
    OP_RELEASE_PTR,     /* arg = a pointer value never imported -> rc */
    OP_CLOSE,           /* sp_import_close -> rc */
    OP_EXIT,
};

typedef struct {
    uint32_t op, index;
    uint32_t byte, pad;
    uint64_t len;
    sp_block_handle handle;
} multi_cmd;

typedef struct {
    int32_t rc;
    uint32_t index;
} multi_reply;

static inline int multi_io(int fd, void *buf, size_t len, int writing)
{
    char *p = buf;
    while (len) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#endif
