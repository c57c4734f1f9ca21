/* The lifetime guard of exported blocks. CUDA leaves it to the application to make sure every
 * importing process has freed its import of a block before the exporter frees the block; a
 * server that gets it wrong hands memory another process still writes to its next request.
 * Here an sp_free of such a block keeps it live until the importer releases it or is gone,
 * and the exporter learns the importer is gone from the kernel: the importer holds the only
 * other end of a socket pair, which its exit (a crash, a SIGKILL) closes.
 * The tables are plain shared memory (a memfd each export, mapped by both processes) whose
 * words both sides change only by compare-exchange (share_guard.h says what each bit means). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "share_guard.h"
#include "ptrmap.h"

typedef struct {
    void *ptr;
    cudaStream_t stream;
    uint64_t bytes;
} held_block;

/* A pool's exports and the blocks held for their importers, under `lock` (SP_RANK_SHARE:
 * nothing but the pointer map's shard locks under it, no CUDA call). */
struct sp_share {
    sp_mutex lock;
    sp_export *exports;
    held_block *held;
    size_t nheld, cap;
    atomic_uint_least64_t reclaims;
};

/* ---- the table ---- */

size_t sp__share_table_bytes(uint32_t nslots)
{
    return sizeof(sp_share_table) + (size_t)nslots * sizeof(atomic_uint_least64_t);
}

int sp__share_table_map(int fd, sp_share_table **out, size_t *bytes)
{
    size_t len = sp__share_table_bytes(SP_SHARE_SLOTS);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return SP_ERR_INVALID;
    sp_share_table *t = m;
    if (t->magic != SP_SHARE_MAGIC || t->nslots != SP_SHARE_SLOTS) {
        munmap(m, len);
        return SP_ERR_INVALID;
    }
    *out = t;
    *bytes = len;
    return SP_OK;
}

void sp__share_table_unmap(sp_share_table *t, size_t bytes)
{
    if (t)
        munmap(t, bytes);
}

int sp__share_claim(sp_share_table *t, uint32_t slot, uint32_t gen)
{
    atomic_uint_least64_t *w = &t->slots[slot];
    uint64_t cur = atomic_load_explicit(w, memory_order_acquire);
    do {
        /* the exporter freed the block, or exported another one into the slot since */
        if (SP_SLOT_GEN(cur) != gen || (cur & SP_SLOT_CLOSED))
            return SP_ERR_STALE_HANDLE;
        if (SP_SLOT_IMPORTS(cur) == SP_SLOT_CLOSED - 1)
            return SP_ERR_LIMIT;
    } while (!atomic_compare_exchange_weak_explicit(w, &cur, cur + 1, memory_order_acq_rel,
                                                    memory_order_acquire));
    return SP_OK;
}

int sp__share_unclaim(sp_share_table *t, uint32_t slot, uint32_t gen)
{
    atomic_uint_least64_t *w = &t->slots[slot];
    uint64_t cur = atomic_load_explicit(w, memory_order_acquire);
    do {
        if (SP_SLOT_GEN(cur) != gen || SP_SLOT_IMPORTS(cur) == 0)
            return SP_ERR_IMPORT_RELEASED;
    } while (!atomic_compare_exchange_weak_explicit(w, &cur, cur - 1, memory_order_acq_rel,
                                                    memory_order_acquire));
    /* the release ordering above publishes the importer's synchronize before the count drops */
    atomic_fetch_add_explicit(&t->releases, 1, memory_order_release);
    return SP_OK;
}

/* ---- the exporter's pool state ---- */

/* the first export of a pool (SP_RANK_OUTER: no lock of ours is held around it) */
static sp_mutex create_lock = SP_MUTEX_INITIALIZER(SP_RANK_OUTER, "share create_lock");

static struct sp_share *share_of(sp_pool *pool, bool create)
{
    struct sp_share *s = atomic_load_explicit(&pool->share, memory_order_acquire);
    if (s || !create)
        return s;
    sp_mutex_lock(&create_lock);
    s = atomic_load_explicit(&pool->share, memory_order_acquire);
    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        if (sp_mutex_init(&s->lock, SP_RANK_SHARE, "share->lock") != 0) {
            free(s);
            s = NULL;
        } else {
            atomic_store_explicit(&pool->share, s, memory_order_release);
        }
    }
    sp_mutex_unlock(&create_lock);
    return s;
}

/* Whether the importer still holds its end of the pair (exp's share lock held). A hang-up, an
 * error, or an end of file on a read that would not block: it closed its import or exited. */
static bool importer_alive(sp_export *e)
{
    if (e->gone)
        return false;
    struct pollfd p = {.fd = e->alive_fd, .events = POLLIN};
    int n = poll(&p, 1, 0);
    if (n == 0 || (n < 0 && errno == EINTR))
        return true;
    bool gone = n < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL));
    if (!gone && (p.revents & POLLIN)) {
        /* readable without a hang-up: an end of file is a close; bytes (it never writes any)
         * or a read that would block are not */
        char byte;
        ssize_t r = recv(e->alive_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    if (gone)
        e->gone = true;
    return !gone;
}

int sp__share_export_new(sp_pool *pool, sp_export **out, int *table_fd, int *importer_fd)
{
    struct sp_share *s = share_of(pool, true);
    if (!s)
        return SP_ERR_NO_HOST_MEMORY;
    sp_export *e = calloc(1, sizeof *e);
    if (!e)
        return SP_ERR_NO_HOST_MEMORY;
    int pair[2] = {-1, -1};
    size_t len = sp__share_table_bytes(SP_SHARE_SLOTS);
    int fd = memfd_create("streampool-share", MFD_CLOEXEC);
    void *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)len) == 0)
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        if (m != MAP_FAILED)
            munmap(m, len);
        if (fd >= 0)
            close(fd);
        free(e);
        return SP_ERR_NO_HOST_MEMORY;
    }
    sp_share_table *t = m; /* zero-filled: every slot never used (generation 0) */
    t->nslots = SP_SHARE_SLOTS;
    t->device = (uint32_t)pool->dev->device;
    /* a random token: a handle of another export, of this or any pool, is told apart */
    while (getrandom(&t->token, sizeof t->token, 0) != (ssize_t)sizeof t->token || !t->token)
        ;
    for (uint32_t i = 0; i < SP_SHARE_SLOTS; i++)
        atomic_init(&t->slots[i], SP_SLOT_CLOSED);
    t->magic = SP_SHARE_MAGIC;
    e->pool = pool;
    e->table = t;
    e->table_bytes = len;
    e->alive_fd = pair[0];
    sp_mutex_lock(&s->lock);
    e->next = s->exports;
    s->exports = e;
    sp_mutex_unlock(&s->lock);
    *out = e;
    *table_fd = fd;
    *importer_fd = pair[1];
    return SP_OK;
}

static int find_slot(const sp_export *e, const void *ptr)
{
    for (uint32_t i = 0; i < e->high; i++)
        if (e->ptrs[i] == ptr)
            return (int)i;
    return -1;
}

int sp__share_export_slot(sp_export *e, void *ptr, uint32_t *slot, uint32_t *gen)
{
    struct sp_share *s = share_of(e->pool, false);
    sp_mutex_lock(&s->lock);
    int rc = importer_alive(e) ? SP_OK : SP_ERR_IO;
    int i = rc == SP_OK ? find_slot(e, ptr) : -1;
    if (rc == SP_OK && i < 0) {
        /* a slot no block is exported in: never used, or its block freed for good */
        for (uint32_t k = 0; k < SP_SHARE_SLOTS && i < 0; k++)
            if (!e->ptrs[k])
                i = (int)k;
        if (i < 0) {
            rc = SP_ERR_LIMIT;
        } else {
            uint64_t w = atomic_load_explicit(&e->table->slots[i], memory_order_acquire);
            uint32_t g = SP_SLOT_GEN(w) + 1 ? SP_SLOT_GEN(w) + 1 : 1;
            atomic_store_explicit(&e->table->slots[i], (uint64_t)g << 32, memory_order_release);
            e->ptrs[i] = ptr;
            if ((uint32_t)i >= e->high)
                e->high = (uint32_t)i + 1;
        }
    }
    if (rc == SP_OK) {
        *slot = (uint32_t)i;
        *gen = SP_SLOT_GEN(atomic_load_explicit(&e->table->slots[i], memory_order_acquire));
    }
    sp_mutex_unlock(&s->lock);
    return rc;
}

/* Closes ptr's slot in e (the exporter freed it): true if a live importer still holds it. A
 * slot whose importer is gone or holds nothing is free for another export at once. */
static bool close_slot(sp_export *e, int i, bool *reclaimed)
{
    uint64_t w = atomic_fetch_or_explicit(&e->table->slots[i], SP_SLOT_CLOSED,
                                          memory_order_acq_rel);
    if (SP_SLOT_IMPORTS(w) == 0)
        e->ptrs[i] = NULL;
    else if (!importer_alive(e)) {
        e->ptrs[i] = NULL;
        *reclaimed = true;
    }
    return e->ptrs[i] != NULL;
}

static bool live_block_of(sp_pool *pool, void *ptr, uint64_t *bytes)
{
    sp_ptr_lookup l = sp__ptrmap_lookup(&pool->dev->ptrmap, ptr);
    *bytes = l.info.usable;
    return l.info.state == SP_POINTER_LIVE && l.info.pool == pool;
}

int sp__share_hold(sp_pool *pool, void *ptr, cudaStream_t stream)
{
    struct sp_share *s = share_of(pool, false);
    uint64_t bytes = 0;
    if (!s)
        return 0;
    sp_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nheld; i++)
        if (s->held[i].ptr == ptr) {
            sp_mutex_unlock(&s->lock);
            return SP_ERR_DOUBLE_FREE; /* freed once already, still held */
        }
    /* not a live block of the pool: sp_free says what it is */
    bool held = false, reclaimed = false;
    if (live_block_of(pool, ptr, &bytes)) {
        for (sp_export *e = s->exports; e; e = e->next) {
            int i = find_slot(e, ptr);
            if (i >= 0)
                held |= close_slot(e, i, &reclaimed);
        }
    }
    if (reclaimed)
        atomic_fetch_add_explicit(&s->reclaims, 1, memory_order_relaxed);
    if (held && s->nheld == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        held_block *h = realloc(s->held, cap * sizeof *h);
        if (!h) { /* no room to remember it: never freed under an importer, so it fails */
            sp_mutex_unlock(&s->lock);
            return SP_ERR_NO_HOST_MEMORY;
        }
        s->held = h;
        s->cap = cap;
    }
    if (held)
        s->held[s->nheld++] = (held_block){ptr, stream, bytes};
    sp_mutex_unlock(&s->lock);
    return held ? 1 : 0;
}

/* Whether every import of ptr is released or its importer gone; if so its slots are freed. */
static bool releasable(struct sp_share *s, void *ptr)
{
    bool gone_with_imports = false;
    for (sp_export *e = s->exports; e; e = e->next) {
        int i = find_slot(e, ptr);
        if (i < 0)
            continue;
        uint64_t w = atomic_load_explicit(&e->table->slots[i], memory_order_acquire);
        if (SP_SLOT_IMPORTS(w) == 0)
            continue;
        if (importer_alive(e))
            return false;
        gone_with_imports = true;
    }
    for (sp_export *e = s->exports; e; e = e->next) {
        int i = find_slot(e, ptr);
        if (i >= 0)
            e->ptrs[i] = NULL;
    }
    if (gone_with_imports)
        atomic_fetch_add_explicit(&s->reclaims, 1, memory_order_relaxed);
    return true;
}

size_t sp__share_reap(sp_pool *pool, sp_share_freed *out, size_t max)
{
    struct sp_share *s = share_of(pool, false);
    if (!s)
        return 0;
    size_t n = 0;
    sp_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nheld && n < max;) {
        if (releasable(s, s->held[i].ptr)) {
            out[n++] = (sp_share_freed){s->held[i].ptr, s->held[i].stream};
            s->held[i] = s->held[--s->nheld];
        } else {
            i++;
        }
    }
    sp_mutex_unlock(&s->lock);
    return n;
}

void sp__share_stats(sp_pool *pool, sp_stats *st)
{
    struct sp_share *s = share_of(pool, false);
    if (!s)
        return;
    sp_mutex_lock(&s->lock);
    for (sp_export *e = s->exports; e; e = e->next) {
        if (!importer_alive(e))
            continue;
        st->importers++;
        for (uint32_t i = 0; i < e->high; i++)
            st->imported_blocks += e->ptrs[i] &&
                                   SP_SLOT_IMPORTS(atomic_load_explicit(
                                       &e->table->slots[i], memory_order_acquire)) != 0;
    }
    st->importer_held += s->nheld;
    for (size_t i = 0; i < s->nheld; i++)
        st->importer_held_bytes += s->held[i].bytes;
    st->importer_reclaims += atomic_load_explicit(&s->reclaims, memory_order_relaxed);
    sp_mutex_unlock(&s->lock);
}

void sp__share_free(sp_pool *pool)
{
    struct sp_share *s = share_of(pool, false);
    if (!s)
        return;
    for (sp_export *e = s->exports, *next; e; e = next) {
        next = e->next;
        sp__share_table_unmap(e->table, e->table_bytes);
        if (e->alive_fd >= 0)
            close(e->alive_fd);
        free(e);
    }
    free(s->held);
    sp_mutex_destroy(&s->lock);
    free(s);
    atomic_store_explicit(&pool->share, NULL, memory_order_relaxed);
}
