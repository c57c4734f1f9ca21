/* PyTorch's pluggable-allocator entry points on streampool: one runtime per device, created on
 * the device's first use; each thread allocates from the pool it chose by name (a tenant) or
 * from the device's default pool; frees go to whichever pool streampool says made the pointer.
 * Only this file and record_stream.c call CUDA themselves (device memory size, events), as a
 * library on streampool's public API may. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streampool_torch.h"
#include "torch_internal.h"

typedef struct {
    _Atomic(sp_runtime *) rt;  /* written under devices_lock, read without it */
    uint64_t default_limit;    /* from the memory fraction; 0: none */
    sp_pool **tenants;         /* pools made by sp_torch_pool_create, for empty_cache */
    size_t ntenants, cap;
} device_slot;

/* Guards runtime creation and destruction, the limits and the tenant lists. Never taken on the
 * allocation or free path once a device's runtime exists. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static device_slot devices[SP_TORCH_MAX_DEVICES];
/* Moves whenever a pool or runtime is destroyed: threads then drop the pools they cached. */
static atomic_uint pools_epoch;

/* The calling thread's choice, and the pools it resolved to on each device, so that an
 * allocation costs no lookup by name. */
static _Thread_local struct {
    char name[SP_POOL_NAME_MAX + 1]; /* "": the default pools */
    unsigned epoch;
    sp_pool *pools[SP_TORCH_MAX_DEVICES];
} current;
static _Thread_local int last_status;

int sp_torch_last_status(void)
{
    return last_status;
}

static bool device_ok(int device)
{
    return device >= 0 && device < SP_TORCH_MAX_DEVICES;
}

/* The device's runtime; with `create`, made now if it does not exist (else SP_ERR_NOT_FOUND).
 * Captures are detected by asking CUDA (SP_CAPTURE_ALWAYS): PyTorch's torch.cuda.graph tells a
 * pluggable allocator of its captures only through C++ hooks a C library cannot take. */
static int runtime_of(int device, bool create, sp_runtime **out)
{
    if (!device_ok(device))
        return SP_ERR_NO_DEVICE;
    sp_runtime *rt = atomic_load_explicit(&devices[device].rt, memory_order_acquire);
    if (!rt && create) {
        pthread_mutex_lock(&devices_lock);
        rt = atomic_load_explicit(&devices[device].rt, memory_order_relaxed);
        int rc = SP_OK;
        if (!rt) {
            sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
            char conf[48];
            cfg.capture_check = SP_CAPTURE_ALWAYS;
            if (devices[device].default_limit) {
                snprintf(conf, sizeof conf, "default.limit:%" PRIu64,
                         devices[device].default_limit);
                cfg.alloc_conf = conf;
            }
            rc = sp_runtime_create(device, &cfg, &rt);
            if (rc == SP_OK)
                atomic_store_explicit(&devices[device].rt, rt, memory_order_release);
        }
        pthread_mutex_unlock(&devices_lock);
        if (rc != SP_OK)
            return rc;
    }
    if (!rt)
        return SP_ERR_NOT_FOUND;
    *out = rt;
    return SP_OK;
}

/* Pool `name` of the device's runtime ("" or NULL: its default pool). */
static int pool_of(sp_runtime *rt, const char *name, sp_pool **out)
{
    return name && name[0] ? sp_pool_find(rt, name, out) : sp_runtime_default_pool(rt, out);
}

/* The calling thread's pool on `device`. */
static int current_pool(int device, sp_pool **out)
{
    if (!device_ok(device))
        return SP_ERR_NO_DEVICE;
    unsigned epoch = atomic_load_explicit(&pools_epoch, memory_order_acquire);
    if (current.epoch != epoch) {
        memset(current.pools, 0, sizeof current.pools);
        current.epoch = epoch;
    }
    if (current.pools[device]) {
        *out = current.pools[device];
        return SP_OK;
    }
    sp_runtime *rt = NULL;
    int rc = runtime_of(device, true, &rt);
    if (rc == SP_OK)
        rc = pool_of(rt, current.name, &current.pools[device]);
    if (rc == SP_OK)
        *out = current.pools[device];
    return rc;
}

void *sp_torch_malloc(size_t size, int device, cudaStream_t stream)
{
    sp_pool *pool = NULL;
    void *ptr = NULL;
    int rc = current_pool(device, &pool);
    if (rc == SP_OK)
        rc = sp_alloc(pool, &ptr, size, stream);
    last_status = rc;
    if (rc != SP_OK)
        sp__torch_failure(current.name, device, size, stream, rc);
    return rc == SP_OK ? ptr : NULL;
}

void sp_torch_free(void *ptr, size_t size, int device, cudaStream_t stream)
{
    if (!ptr) {
        last_status = SP_OK;
        return;
    }
    sp_runtime *rt = NULL;
    int rc = runtime_of(device, false, &rt);
    if (rc == SP_ERR_NOT_FOUND) /* nothing was ever allocated on that device */
        rc = SP_ERR_BAD_POINTER;
    sp_ptr_info info = {.size = sizeof info};
    if (rc == SP_OK)
        rc = sp_pointer_info(rt, ptr, &info);
    sp_pool *pool = info.pool;
    if (rc == SP_OK && info.state == SP_POINTER_LIVE && info.requested != size) {
        /* Not the allocation the caller describes (a stale pointer since handed out again,
         * most likely): freeing it would free another tensor's memory. */
        rc = SP_ERR_INVALID;
    } else if (rc == SP_OK) {
        /* An unknown pointer goes to the default pool all the same, so that streampool
         * refuses it there and counts it as a bad free, where operators look. */
        if (!pool)
            rc = sp_runtime_default_pool(rt, &pool);
        if (rc == SP_OK && info.state == SP_POINTER_LIVE)
            rc = sp__torch_recorded_order(ptr, stream);
        if (rc == SP_OK)
            rc = sp_free(pool, ptr, stream);
    }
    last_status = rc;
}

void sp_torch_record_stream(void *ptr, cudaStream_t stream)
{
    int rc = SP_ERR_BAD_POINTER;
    for (int d = 0; d < SP_TORCH_MAX_DEVICES && rc == SP_ERR_BAD_POINTER; d++) {
        sp_runtime *rt = atomic_load_explicit(&devices[d].rt, memory_order_acquire);
        sp_ptr_info info = {.size = sizeof info};
        if (!rt || sp_pointer_info(rt, ptr, &info) != SP_OK || info.state != SP_POINTER_LIVE)
            continue;
        /* Its own stream needs no record: the free is in that stream's order already. */
        rc = info.stream == stream ? SP_OK : sp__torch_recorded_add(ptr, d, stream);
    }
    last_status = rc;
}

/* The device's total memory, with it made current for the query. */
static int device_total(int device, uint64_t *total)
{
    int previous = -1;
    size_t free_bytes = 0, bytes = 0;
    cudaError_t err = cudaGetDevice(&previous);
    if (err == cudaSuccess && previous != device)
        err = cudaSetDevice(device);
    if (err == cudaSuccess)
        err = cudaMemGetInfo(&free_bytes, &bytes);
    if (previous >= 0 && previous != device)
        (void)cudaSetDevice(previous);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* PyTorch's next error check must not see ours */
        return err == cudaErrorInvalidDevice ? SP_ERR_NO_DEVICE : SP_ERR_CUDA;
    }
    *total = bytes;
    return SP_OK;
}

void sp_torch_set_memory_fraction(double fraction, int device)
{
    int rc = SP_OK;
    if (!(fraction > 0.0 && fraction <= 1.0))
        rc = SP_ERR_INVALID;
    else if (!device_ok(device))
        rc = SP_ERR_NO_DEVICE;
    if (rc == SP_OK) {
        pthread_mutex_lock(&devices_lock);
        uint64_t total = 0;
        sp_runtime *rt = atomic_load_explicit(&devices[device].rt, memory_order_relaxed);
        sp_pool *pool = NULL;
        if ((rc = device_total(device, &total)) == SP_OK) {
            uint64_t limit = (uint64_t)(fraction * (double)total);
            /* an existing default pool changes its limit now; a runtime made later (the first
             * allocation, or after sp_torch_shutdown) is created with it */
            if (rt && (rc = sp_runtime_default_pool(rt, &pool)) == SP_OK)
                rc = sp_pool_set_limit(pool, limit);
            if (rc == SP_OK)
                devices[device].default_limit = limit;
        }
        pthread_mutex_unlock(&devices_lock);
    }
    last_status = rc;
    /* PyTorch gives the hook no way to fail, and a limit silently not applied is worse than a
     * line on stderr. */
    if (rc == SP_ERR_CONFIG)
        fprintf(stderr, "streampool_torch: memory fraction %g for device %d not applied: %s\n",
                fraction, device, sp_config_error());
    else if (rc != SP_OK)
        fprintf(stderr, "streampool_torch: memory fraction %g for device %d not applied: %s\n",
                fraction, device, sp_strerror(rc));
}

void sp_torch_empty_cache(void)
{
    int rc = SP_OK;
    pthread_mutex_lock(&devices_lock);
    for (int d = 0; d < SP_TORCH_MAX_DEVICES; d++) {
        sp_runtime *rt = atomic_load_explicit(&devices[d].rt, memory_order_relaxed);
        sp_pool *pool = NULL;
        if (!rt)
            continue;
        int trc = sp_runtime_default_pool(rt, &pool);
        if (trc == SP_OK)
            trc = sp_pool_trim(pool, 0);
        rc = rc == SP_OK ? trc : rc;
        for (size_t i = 0; i < devices[d].ntenants; i++) {
            trc = sp_pool_trim(devices[d].tenants[i], 0);
            rc = rc == SP_OK ? trc : rc;
        }
    }
    pthread_mutex_unlock(&devices_lock);
    last_status = rc;
}

int sp_torch_pool_create(const char *name, int device, uint64_t limit)
{
    sp_runtime *rt = NULL;
    sp_pool *pool = NULL;
    int rc = runtime_of(device, true, &rt);
    if (rc != SP_OK)
        return rc;
    pthread_mutex_lock(&devices_lock);
    device_slot *slot = &devices[device];
    if (slot->ntenants == slot->cap) {
        size_t cap = slot->cap ? 2 * slot->cap : 8;
        sp_pool **grown = realloc(slot->tenants, cap * sizeof *grown);
        if (grown) {
            slot->tenants = grown;
            slot->cap = cap;
        }
    }
    if (slot->ntenants == slot->cap) {
        rc = SP_ERR_NO_HOST_MEMORY;
    } else {
        sp_pool_config cfg = SP_POOL_CONFIG_INIT;
        cfg.limit = limit;
        rc = sp_pool_create(rt, name, &cfg, &pool);
        if (rc == SP_OK)
            slot->tenants[slot->ntenants++] = pool;
    }
    pthread_mutex_unlock(&devices_lock);
    return rc;
}

int sp_torch_pool_destroy(const char *name, int device)
{
    sp_runtime *rt = NULL;
    sp_pool *pool = NULL;
    if (!name || !name[0])
        return SP_ERR_INVALID; /* the default pool goes only with its runtime */
    int rc = runtime_of(device, false, &rt);
    pthread_mutex_lock(&devices_lock);
    if (rc == SP_OK)
        rc = sp_pool_find(rt, name, &pool);
    if (rc == SP_OK)
        rc = sp_pool_destroy(pool);
    if (rc == SP_OK) {
        device_slot *slot = &devices[device];
        for (size_t i = 0; i < slot->ntenants; i++)
            if (slot->tenants[i] == pool)
                slot->tenants[i] = slot->tenants[--slot->ntenants];
        atomic_fetch_add_explicit(&pools_epoch, 1, memory_order_release);
    }
    pthread_mutex_unlock(&devices_lock);
    return rc;
}

int sp_torch_set_pool(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n > SP_POOL_NAME_MAX)
        return SP_ERR_INVALID;
    memcpy(current.name, n ? name : "", n + 1);
    memset(current.pools, 0, sizeof current.pools);
    return SP_OK;
}

const char *sp_torch_current_pool(void)
{
    return current.name;
}

int sp_torch_runtime(int device, sp_runtime **out)
{
    return out ? runtime_of(device, true, out) : SP_ERR_INVALID;
}

int sp_torch_pool_stats(const char *name, int device, sp_stats *out)
{
    sp_runtime *rt = NULL;
    sp_pool *pool = NULL;
    int rc = out ? runtime_of(device, false, &rt) : SP_ERR_INVALID;
    if (rc == SP_OK)
        rc = pool_of(rt, name, &pool);
    return rc == SP_OK ? sp_pool_stats(pool, out) : rc;
}

int sp_torch_pool_stats_json(const char *name, int device, char *buf, size_t len, size_t *needed)
{
    sp_stats st = {.size = sizeof st};
    int rc = needed && (buf || len == 0) ? sp_torch_pool_stats(name, device, &st) : SP_ERR_INVALID;
    if (rc == SP_OK)
        *needed = sp_stats_json(&st, buf, len);
    return rc;
}

int sp_torch_shutdown(void)
{
    int rc = SP_OK;
    pthread_mutex_lock(&devices_lock);
    for (int d = 0; d < SP_TORCH_MAX_DEVICES; d++) {
        sp_runtime *rt = atomic_load_explicit(&devices[d].rt, memory_order_relaxed);
        if (!rt)
            continue;
        int drc = sp_runtime_destroy(rt);
        if (drc == SP_OK) {
            atomic_store_explicit(&devices[d].rt, NULL, memory_order_relaxed);
            free(devices[d].tenants);
            devices[d].tenants = NULL;
            devices[d].ntenants = devices[d].cap = 0;
        }
        rc = rc == SP_OK ? drc : rc;
    }
    atomic_fetch_add_explicit(&pools_epoch, 1, memory_order_release);
    pthread_mutex_unlock(&devices_lock);
    return rc;
}
