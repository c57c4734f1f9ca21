/* Pools across processes: the exporter's calls (sp_pool_export, sp_export_block,
 * sp_pool_share_poll) and the importer's (sp_pool_import and the calls on an sp_import). The
 * transport is one message on a connected AF_UNIX socket carrying three descriptors: the
 * cudaMemPool's POSIX fd, the guard's table (a memfd) and the importer's end of the liveness
 * pair (share_guard.c holds the other). The top of the library: it frees held blocks through
 * sp_free once the guard lets them go. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "share_guard.h"
#include "names.h"
#include "cuda.h"
#include "format.h"
#include "heap.h"
#include "ptrmap.h"
#include "runtime.h"
#include "status.h"

/* What the export's message says beside its descriptors. */
typedef struct {
    uint64_t magic, token;
    uint32_t device, nslots;
} export_msg;

/* ---- the exporter ---- */

/* Sends msg with three descriptors; SP_ERR_IO if the socket takes less. */
static int send_fds(int sock, const export_msg *msg, const int fds[3])
{
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = sizeof *msg};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(3 * sizeof(int));
    memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *msg ? SP_OK : SP_ERR_IO;
}

int sp_pool_export(sp_pool *pool, int sock, sp_export **out)
{
    sp__cuda_error_clear();
    if (!pool || !out || sock < 0)
        return SP_ERR_INVALID;
    if (pool->cfg.share != SP_SHARE_POSIX_FD || !pool->owns_cuda_pool)
        return SP_ERR_NOT_SUPPORTED;
    int pool_fd = -1, table_fd = -1, importer_fd = -1;
    int rc = sp__cuda_pool_export_fd(pool->cuda_pool, &pool_fd);
    if (rc != SP_OK)
        return rc;
    sp_export *e = NULL;
    rc = sp__share_export_new(pool, &e, &table_fd, &importer_fd);
    if (rc == SP_OK) {
        export_msg msg = {SP_SHARE_MAGIC, e->table->token, (uint32_t)pool->dev->device,
                          SP_SHARE_SLOTS};
        int fds[3] = {pool_fd, table_fd, importer_fd};
        rc = send_fds(sock, &msg, fds);
        /* the importer has its copies: ours close, so that only the importer's end of the
         * pair keeps the export alive (unsent, the export is gone at once) */
        close(table_fd);
        close(importer_fd);
    }
    close(pool_fd);
    if (rc == SP_OK)
        *out = e;
    return rc;
}

typedef struct {
    bool live, in_request;
    void *base;
    uint64_t requested;
} block_view;

/* Reads a live block's driver allocation under its shard's lock (no lock taken, no call). */
static void view_block(sp_block *b, void *arg)
{
    block_view *v = arg;
    if (!b || atomic_load_explicit(&b->state, memory_order_acquire) == SP_BLOCK_CACHED)
        return;
    v->live = true;
    v->base = b->seg ? b->seg->ptr : b->ptr; /* a capture's bypass block is its own */
    v->requested = b->requested;
    v->in_request = b->req != NULL;
}

int sp_export_block(sp_export *exp, void *ptr, sp_block_handle *out)
{
    sp__cuda_error_clear();
    if (!exp || !ptr || !out)
        return SP_ERR_INVALID;
    sp_pool *pool = exp->pool;
    sp_ptr_lookup l = sp__ptrmap_lookup(&pool->dev->ptrmap, ptr);
    if (l.info.state == SP_POINTER_UNKNOWN)
        return SP_ERR_BAD_POINTER;
    if (l.info.pool != pool)
        return SP_ERR_WRONG_POOL;
    block_view v = {0};
    sp__ptrmap_visit(&pool->dev->ptrmap, ptr, view_block, &v);
    if (l.info.state != SP_POINTER_LIVE || !v.live)
        return SP_ERR_BAD_POINTER; /* freed: nothing to export */
    /* a request's end frees its allocations whatever another process holds: the guard could
     * not keep such a block, so it is not exported */
    if (v.in_request)
        return SP_ERR_NOT_SUPPORTED;
    sp_block_handle h;
    memset(&h, 0, sizeof h);
    int rc = sp__cuda_pool_export_pointer(v.base, h.cuda);
    if (rc == SP_OK)
        rc = sp__share_export_slot(exp, ptr, &h.slot, &h.gen);
    if (rc != SP_OK)
        return rc;
    h.token = exp->table->token;
    h.bytes = v.requested;
    h.offset = (uint64_t)((char *)ptr - (char *)v.base);
    *out = h;
    return SP_OK;
}

int sp_pool_share_poll(sp_pool *pool, size_t *freed)
{
    sp__cuda_error_clear();
    if (!pool)
        return SP_ERR_INVALID;
    size_t total = 0;
    int err = SP_OK;
    sp_share_freed batch[64];
    for (size_t n; (n = sp__share_reap(pool, batch, sizeof batch / sizeof *batch)) > 0;) {
        for (size_t i = 0; i < n; i++) {
            /* its slots are free now: sp_free finds nothing held and frees it as usual */
            int rc = sp_free(pool, batch[i].ptr, batch[i].stream);
            if (rc == SP_OK)
                total++;
            else if (err == SP_OK)
                err = rc;
        }
    }
    if (freed)
        *freed = total;
    return err;
}

/* ---- the importer ---- */

/* A driver allocation of the exporter mapped here: its blocks share it. */
typedef struct {
    unsigned char cuda[sizeof ((sp_block_handle *)0)->cuda]; /* the handle's export data */
    char *base;
    uint32_t imports;          /* live imports of its blocks: unmapped at 0 */
} mapping;

/* One imported block: (slot, gen) and its address; count 0: released (kept to tell a double
 * release from an unknown pointer). */
typedef struct {
    void *ptr;
    uint32_t slot, gen, count;
    size_t map;
} import_rec;

struct sp_import {
    sp_runtime *rt;
    char name[SP_POOL_NAME_MAX + 1];
    cudaMemPool_t cuda_pool;
    sp_share_table *table;
    size_t table_bytes;
    int alive_fd;
    sp_mutex lock;             /* the records below (SP_RANK_OUTER: no lock of ours under it) */
    mapping *maps;
    size_t nmaps, cap_maps;
    import_rec *recs;
    size_t nrecs, cap_recs;
    sp_import *next;
};

/* The process's imports, by (runtime, name). */
static sp_mutex imports_lock = SP_MUTEX_INITIALIZER(SP_RANK_OUTER, "imports_lock");
static sp_import *imports;

static sp_import *find_import_locked(sp_runtime *rt, const char *name)
{
    sp_mutex_assert_owner(&imports_lock);
    for (sp_import *i = imports; i; i = i->next)
        if (i->rt == rt && strcmp(i->name, name) == 0)
            return i;
    return NULL;
}

/* Receives an export's message and its three descriptors; SP_ERR_IO if none comes. */
static int recv_fds(int sock, export_msg *msg, int fds[3])
{
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof *msg};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (n < 0 && errno == EINTR);
    struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    bool whole = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                 c->cmsg_len == CMSG_LEN(3 * sizeof(int));
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int tmp[3] = {-1, -1, -1};
        memcpy(tmp, CMSG_DATA(c), (got < 3 ? got : 3) * sizeof(int));
        if (!whole || n != (ssize_t)sizeof *msg || msg->magic != SP_SHARE_MAGIC) {
            for (size_t i = 0; i < got && i < 3; i++)
                close(tmp[i]);
            return SP_ERR_IO;
        }
        memcpy(fds, tmp, sizeof tmp);
        return SP_OK;
    }
    return SP_ERR_IO;
}

int sp_pool_import(sp_runtime *rt, int sock, const char *name, sp_import **out)
{
    sp__cuda_error_clear();
    if (!rt || !name || !out || sock < 0 || sp__names_check_pool(name) != SP_OK)
        return SP_ERR_INVALID;
    sp_import *imp = calloc(1, sizeof *imp);
    if (!imp || sp_mutex_init(&imp->lock, SP_RANK_OUTER, "import->lock") != 0) {
        free(imp);
        return SP_ERR_NO_HOST_MEMORY;
    }
    imp->rt = rt;
    strcpy(imp->name, name);
    export_msg msg;
    int fds[3] = {-1, -1, -1};
    int rc = recv_fds(sock, &msg, fds);
    if (rc == SP_OK && msg.device != (uint32_t)rt->dev.device)
        rc = SP_ERR_NO_DEVICE; /* the pool lives on another device than rt's */
    if (rc == SP_OK)
        rc = sp__share_table_map(fds[1], &imp->table, &imp->table_bytes);
    if (rc == SP_OK && imp->table->token != msg.token)
        rc = SP_ERR_INVALID;
    if (rc == SP_OK)
        rc = sp__cuda_pool_import_fd(fds[0], &imp->cuda_pool);
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    imp->alive_fd = fds[2];
    if (rc == SP_OK) {
        sp_mutex_lock(&imports_lock);
        if (find_import_locked(rt, name)) {
            rc = SP_ERR_EXISTS;
        } else {
            imp->next = imports;
            imports = imp;
        }
        sp_mutex_unlock(&imports_lock);
    }
    if (rc != SP_OK) {
        if (imp->cuda_pool)
            (void)sp__cuda_pool_destroy(imp->cuda_pool);
        sp__share_table_unmap(imp->table, imp->table_bytes);
        if (imp->alive_fd >= 0)
            close(imp->alive_fd); /* the exporter sees the export gone */
        sp_mutex_destroy(&imp->lock);
        free(imp);
        return rc;
    }
    *out = imp;
    return SP_OK;
}

int sp_import_find(sp_runtime *rt, const char *name, sp_import **out)
{
    if (!rt || !name || !out)
        return SP_ERR_INVALID;
    sp_mutex_lock(&imports_lock);
    sp_import *i = find_import_locked(rt, name);
    sp_mutex_unlock(&imports_lock);
    if (!i)
        return SP_ERR_NOT_FOUND;
    *out = i;
    return SP_OK;
}

static bool grow(void **arr, size_t *cap, size_t n, size_t each)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, c * each);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/* The mapping of the allocation h names, made if needed (imp->lock held). */
static int map_of(sp_import *imp, const sp_block_handle *h, size_t *out)
{
    sp_mutex_assert_owner(&imp->lock);
    for (size_t i = 0; i < imp->nmaps; i++)
        if (imp->maps[i].imports && memcmp(imp->maps[i].cuda, h->cuda, sizeof h->cuda) == 0) {
            *out = i;
            return SP_OK;
        }
    size_t slot = imp->nmaps;
    for (size_t i = 0; i < imp->nmaps; i++)
        if (!imp->maps[i].imports)
            slot = i;
    if (slot == imp->nmaps && !grow((void **)&imp->maps, &imp->cap_maps, imp->nmaps,
                                    sizeof *imp->maps))
        return SP_ERR_NO_HOST_MEMORY;
    void *base = NULL;
    int rc = sp__cuda_pool_import_pointer(imp->cuda_pool, h->cuda, &base);
    if (rc != SP_OK)
        return rc;
    if (slot == imp->nmaps)
        imp->nmaps++;
    memcpy(imp->maps[slot].cuda, h->cuda, sizeof h->cuda);
    imp->maps[slot].base = base;
    imp->maps[slot].imports = 0;
    *out = slot;
    return SP_OK;
}

int sp_import_block(sp_import *imp, const sp_block_handle *h, void **ptr)
{
    sp__cuda_error_clear();
    if (!imp || !h || !ptr)
        return SP_ERR_INVALID;
    if (h->token != imp->table->token || h->slot >= imp->table->nslots)
        return SP_ERR_FOREIGN_HANDLE;
    /* claimed first: from here the exporter's sp_free holds the block for us */
    int rc = sp__share_claim(imp->table, h->slot, h->gen);
    if (rc != SP_OK)
        return rc;
    sp_mutex_lock(&imp->lock);
    size_t m = 0;
    rc = map_of(imp, h, &m);
    import_rec *r = NULL;
    if (rc == SP_OK) {
        char *p = imp->maps[m].base + h->offset;
        for (size_t i = 0; i < imp->nrecs && !r; i++)
            if (imp->recs[i].ptr == p)
                r = &imp->recs[i]; /* imported again, or a released record reused */
        if (!r && grow((void **)&imp->recs, &imp->cap_recs, imp->nrecs, sizeof *imp->recs)) {
            r = &imp->recs[imp->nrecs++];
            r->count = 0;
        }
        if (!r) {
            rc = SP_ERR_NO_HOST_MEMORY;
        } else {
            if (!r->count)
                *r = (import_rec){p, h->slot, h->gen, 0, m};
            r->count++;
            imp->maps[m].imports++;
            *ptr = p;
        }
    }
    sp_mutex_unlock(&imp->lock);
    if (rc != SP_OK)
        (void)sp__share_unclaim(imp->table, h->slot, h->gen);
    return rc;
}

/* Releases one import of r (imp->lock held): the mapping goes when its last import does, after
 * this process's work on it (stream order, then a synchronize), and only then is the exporter
 * told, so that it never reuses memory this process may still touch. */
static int release_locked(sp_import *imp, import_rec *r, cudaStream_t stream)
{
    sp_mutex_assert_owner(&imp->lock);
    mapping *m = &imp->maps[r->map];
    if (m->imports == 1) {
        int rc = sp__cuda_free(m->base, stream);
        if (rc == SP_OK)
            rc = sp__cuda_stream_sync(stream);
        if (rc != SP_OK)
            return rc; /* still mapped and claimed: release again */
    } else {
        int rc = sp__cuda_stream_sync(stream);
        if (rc != SP_OK)
            return rc;
    }
    m->imports--;
    r->count--;
    return sp__share_unclaim(imp->table, r->slot, r->gen);
}

int sp_import_release(sp_import *imp, void *ptr, cudaStream_t stream)
{
    sp__cuda_error_clear();
    if (!imp || !ptr)
        return SP_ERR_INVALID;
    sp_mutex_lock(&imp->lock);
    import_rec *r = NULL;
    bool known = false;
    for (size_t i = 0; i < imp->nrecs && !r; i++)
        if (imp->recs[i].ptr == ptr) {
            known = true;
            if (imp->recs[i].count)
                r = &imp->recs[i];
        }
    int rc = r ? release_locked(imp, r, stream)
               : known ? SP_ERR_IMPORT_RELEASED : SP_ERR_BAD_POINTER;
    sp_mutex_unlock(&imp->lock);
    return rc;
}

int sp_import_close(sp_import *imp)
{
    sp__cuda_error_clear();
    if (!imp)
        return SP_ERR_INVALID;
    int err = SP_OK;
    sp_mutex_lock(&imp->lock);
    for (size_t i = 0; i < imp->nrecs; i++)
        while (imp->recs[i].count && err == SP_OK)
            err = release_locked(imp, &imp->recs[i], NULL);
    sp_mutex_unlock(&imp->lock);
    if (err != SP_OK)
        return err; /* the import stays, to be closed again */
    sp_mutex_lock(&imports_lock);
    for (sp_import **p = &imports; *p; p = &(*p)->next)
        if (*p == imp) {
            *p = imp->next;
            break;
        }
    sp_mutex_unlock(&imports_lock);
    err = sp__cuda_pool_destroy(imp->cuda_pool);
    sp__share_table_unmap(imp->table, imp->table_bytes);
    close(imp->alive_fd); /* the exporter's next look finds the export gone */
    sp_mutex_destroy(&imp->lock);
    free(imp->maps);
    free(imp->recs);
    free(imp);
    return err;
}
