/* Peers: which other devices may read or write a pool's memory (cudaMemPoolSetAccess, for the
 * whole pool at once), and the check that hands a block only to a stream whose device may
 * write it. A stream's device is asked once per (pool, stream) and kept in its cache, so that
 * the pool's own streams pay one predictable branch per allocation and no CUDA call. */
#include <stdlib.h>

#include "peer.h"
#include "cuda.h"
#include "status.h"

/* One grant change at a time, across its CUDA call, so that the pool's record and the driver's
 * never disagree (rank SP_RANK_PEER: above pool->lock, which it takes to record). */
static sp_mutex grants_lock = SP_MUTEX_INITIALIZER(SP_RANK_PEER, "grants_lock");

#define MAX_PEERS 64 /* a bit each in sp_pool_config.peers_read_write / peers_read */

int sp__peer_admit(sp_pool *pool, sp_stream_cache *c, cudaStream_t stream)
{
    int state = atomic_load_explicit(&c->peer, memory_order_relaxed);
    if (state == SP_PEER_UNKNOWN) {
        /* the NULL, legacy and per-thread handles name the current device's stream: CUDA
         * answers with it, which is kept like any other stream's */
        int device = pool->dev->device;
        /* one device on the machine: every stream is the pool's, and no CUDA call is made */
        int rc = sp__cuda_known_device_count() == 1 ? SP_OK
                                                    : sp__cuda_stream_device(stream, &device);
        if (rc != SP_OK)
            return rc;
        state = device == pool->dev->device ? SP_PEER_OWN : device + 1;
        atomic_store_explicit(&c->peer, state, memory_order_relaxed);
        if (state == SP_PEER_OWN)
            return SP_OK;
    }
    /* a peer's stream: the grant is read at every allocation, so that a revoke holds at once
     * for the blocks its own cache keeps as for fresh ones */
    int device = state - 1;
    uint64_t writers = atomic_load_explicit(&pool->peer_writers, memory_order_acquire);
    if (device < MAX_PEERS && (writers >> device & 1))
        return SP_OK;
    return SP_ERR_NO_ACCESS;
}

/* device is a device of this machine other than the pool's, and one CUDA lets reach the pool's
 * memory (only asked for a grant: a revoke always goes through). */
static int check_peer(sp_pool *pool, int device, sp_access access)
{
    int count = 0;
    int rc = sp__cuda_device_count(&count);
    if (rc != SP_OK)
        return rc;
    if (device < 0 || device >= count) {
        sp__status_set_cuda((int)cudaErrorInvalidDevice); /* what CUDA says of such a device */
        return SP_ERR_NO_DEVICE;
    }
    if (device == pool->dev->device) /* the owner always reads and writes */
        return access == SP_ACCESS_READ_WRITE ? SP_OK : SP_ERR_INVALID;
    if (device >= MAX_PEERS)
        return SP_ERR_NOT_SUPPORTED;
    bool can = false;
    if (access != SP_ACCESS_NONE && (rc = sp__cuda_can_access_peer(device, pool->dev->device,
                                                                   &can)) != SP_OK)
        return rc;
    return access == SP_ACCESS_NONE || can ? SP_OK : SP_ERR_NOT_SUPPORTED;
}

/* The pool's record of a grant the driver made (grants_lock held). */
static void record(sp_pool *pool, int device, sp_access access)
{
    sp_mutex_assert_owner(&grants_lock);
    uint64_t bit = (uint64_t)1 << device;
    sp_mutex_lock(&pool->lock);
    pool->cfg.peers_read_write &= ~bit;
    pool->cfg.peers_read &= ~bit;
    if (access == SP_ACCESS_READ_WRITE)
        pool->cfg.peers_read_write |= bit;
    else if (access == SP_ACCESS_READ)
        pool->cfg.peers_read |= bit;
    atomic_store_explicit(&pool->peer_writers, pool->cfg.peers_read_write, memory_order_release);
    sp_mutex_unlock(&pool->lock);
}

/* A peer that may no longer write: its streams' caches go, as at sp_stream_release (their
 * blocks back to the pool's slabs and segments behind a final fence, or a synchronize where a
 * fence of the pool's device cannot be recorded on the peer's stream), so that what they kept
 * serves the pool's own streams. Only the explicit streams: another thread's per-thread stream
 * cannot be named from here; its cache keeps its blocks, refused to it by sp__peer_admit. */
static void release_peer_caches(sp_pool *pool, int device)
{
    for (;;) {
        sp_stream_key key = {0};
        bool found = false;
        sp_mutex_lock(&pool->lock);
        for (sp_stream_cache *c = pool->caches; c && !found; c = c->next_in_pool) {
            if (atomic_load_explicit(&c->peer, memory_order_relaxed) == device + 1 &&
                c->key.thread == 0 && c->key.stream != NULL && c->key.stream != cudaStreamLegacy) {
                key = c->key;
                found = true;
            }
        }
        sp_mutex_unlock(&pool->lock);
        if (!found)
            return;
        (void)sp__pool_release_stream(pool, key); /* detached: not found again */
    }
}

static int set_access_locked(sp_pool *pool, int device, sp_access access)
{
    sp_mutex_assert_owner(&grants_lock);
    int rc = sp__cuda_pool_set_access(pool->cuda_pool, device, (int)access);
    if (rc != SP_OK)
        return rc;
    record(pool, device, access);
    return SP_OK;
}

int sp_pool_set_access(sp_pool *pool, int device, sp_access access)
{
    sp__cuda_error_clear();
    if (!pool || (access != SP_ACCESS_NONE && access != SP_ACCESS_READ &&
                  access != SP_ACCESS_READ_WRITE))
        return SP_ERR_INVALID;
    int rc = check_peer(pool, device, access);
    if (rc != SP_OK || device == pool->dev->device)
        return rc;
    sp_mutex_lock(&grants_lock);
    rc = set_access_locked(pool, device, access);
    sp_mutex_unlock(&grants_lock);
    if (rc == SP_OK && access != SP_ACCESS_READ_WRITE)
        release_peer_caches(pool, device);
    return rc;
}

int sp_pool_get_access(sp_pool *pool, int device, sp_access *out)
{
    sp__cuda_error_clear();
    if (!pool || !out)
        return SP_ERR_INVALID;
    int count = 0;
    int rc = sp__cuda_device_count(&count);
    if (rc != SP_OK)
        return rc;
    if (device < 0 || device >= count)
        return SP_ERR_NO_DEVICE;
    if (device == pool->dev->device) {
        *out = SP_ACCESS_READ_WRITE;
        return SP_OK;
    }
    sp_access a = SP_ACCESS_NONE;
    if (device < MAX_PEERS) {
        uint64_t bit = (uint64_t)1 << device;
        sp_mutex_lock(&pool->lock);
        a = pool->cfg.peers_read_write & bit ? SP_ACCESS_READ_WRITE
            : pool->cfg.peers_read & bit     ? SP_ACCESS_READ
                                             : SP_ACCESS_NONE;
        sp_mutex_unlock(&pool->lock);
    }
    *out = a;
    return SP_OK;
}

int sp__peer_grant_initial(sp_pool *pool)
{
    uint64_t rw = pool->cfg.peers_read_write, ro = pool->cfg.peers_read & ~rw;
    if (!(rw | ro))
        return SP_OK;
    /* the record starts empty and holds what the driver granted */
    pool->cfg.peers_read_write = pool->cfg.peers_read = 0;
    int rc = SP_OK;
    sp_mutex_lock(&grants_lock);
    for (int d = 0; d < MAX_PEERS && rc == SP_OK; d++) {
        uint64_t bit = (uint64_t)1 << d;
        if (!((rw | ro) & bit) || d == pool->dev->device)
            continue;
        sp_access a = rw & bit ? SP_ACCESS_READ_WRITE : SP_ACCESS_READ;
        rc = check_peer(pool, d, a);
        if (rc == SP_OK)
            rc = set_access_locked(pool, d, a);
    }
    sp_mutex_unlock(&grants_lock);
    return rc;
}

void sp__peer_stats(sp_pool *pool, sp_stats *st)
{
    sp_mutex_lock(&pool->lock);
    uint64_t rw = pool->cfg.peers_read_write, ro = pool->cfg.peers_read;
    sp_mutex_unlock(&pool->lock);
    st->peers_read_write += (uint64_t)__builtin_popcountll(rw);
    st->peers_read += (uint64_t)__builtin_popcountll(ro);
}
