/* The runtime of one device: its registry of pools by name (the default pool among them), the
 * service stream and fences its pools share, the pointer map that catches bad frees across
 * pools, stream release, and declared graph captures. */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "capture.h"
#include "names.h"
#include "give_back.h"
#include "config.h"
#include "cuda.h"
#include "labels.h"
#include "pool.h"
#include "ptrmap.h"
#include "status.h"
#include "format.h"
#include "free_order.h"
#include "trace.h"
#include "peer.h"
#include "versioned.h"

/* ---- the process's runtimes, for threads that exit ---- */

static sp_mutex runtimes_lock = SP_MUTEX_INITIALIZER(SP_RANK_RUNTIMES, "runtimes_lock");
static sp_runtime *runtimes;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* A thread's exit: its cudaStreamPerThread caches go to their pools behind a final fence that
 * this thread, the only one that can name its per-thread stream, records now. */
static void thread_exit(void *arg)
{
    (void)arg;
    sp_mutex_lock(&runtimes_lock);
    for (sp_runtime *rt = runtimes; rt; rt = rt->next_runtime)
        (void)sp_stream_release(rt, cudaStreamPerThread);
    sp_mutex_unlock(&runtimes_lock);
}

/* The key whose value marks a thread that made a cudaStreamPerThread cache (cache.c's
 * sp__cache_thread_watch sets it): created here, with the destructor above, before any runtime has
 * a pool, so that the stream caches below never call up into the runtime. */
static void exit_key_create(void)
{
    pthread_key_t key;
    if (pthread_key_create(&key, thread_exit) == 0)
        sp__cache_thread_exit_key_set(key);
}

static void runtime_register(sp_runtime *rt)
{
    (void)pthread_once(&exit_once, exit_key_create);
    sp_mutex_lock(&runtimes_lock);
    rt->next_runtime = runtimes;
    runtimes = rt;
    sp_mutex_unlock(&runtimes_lock);
}

static void runtime_unregister(sp_runtime *rt)
{
    sp_mutex_lock(&runtimes_lock);
    sp_runtime **p = &runtimes;
    while (*p && *p != rt)
        p = &(*p)->next_runtime;
    if (*p)
        *p = rt->next_runtime;
    sp_mutex_unlock(&runtimes_lock);
}

int sp_runtime_create(int device, const sp_runtime_config *cfg, sp_runtime **out)
{
    sp__cuda_error_clear();
    sp_runtime_config config = SP_RUNTIME_CONFIG_INIT;
    if (!out)
        return SP_ERR_INVALID;
    if (cfg) {
        int rc = sp__struct_check(cfg, SP__MIN_RUNTIME_CONFIG, "sp_runtime_create",
                                  "sp_runtime_config");
        if (rc != SP_OK)
            return rc;
        if ((unsigned)cfg->capture_check > SP_CAPTURE_ALWAYS)
            return SP_ERR_CONFIG;
        sp__struct_read(&config, sizeof config, cfg);
    }
    /* both strings are parsed whole now, so that a typo fails here, not at some pool */
    sp_conf *conf = NULL;
    int rc = sp__config_new(config.alloc_conf, getenv("SP_ALLOC_CONF"), device, &conf);
    if (rc != SP_OK)
        return rc;
    rc = sp__cuda_check_device(device);
    if (rc != SP_OK) {
        sp__config_free(conf);
        return rc;
    }
    sp_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) {
        sp__config_free(conf);
        return SP_ERR_NO_HOST_MEMORY;
    }
    rt->dev.device = device;
    rt->dev.cfg = config;
    rt->dev.cfg.alloc_conf = NULL; /* the caller's string need not outlive this call */
    rt->dev.conf = conf;
    sp__usage_init(&rt->dev.usage);
    sp__ptrmap_init(&rt->dev.ptrmap);
    if (sp_mutex_init(&rt->lock, SP_RANK_RUNTIME, "runtime->lock") != 0) {
        sp__config_free(rt->dev.conf);
        free(rt);
        return SP_ERR_NO_HOST_MEMORY;
    }
    rc = sp__fence_pool_init(&rt->dev.fences, device);
    if (rc == SP_OK && sp__config_check_free_order(&rt->dev) &&
        !(rt->dev.free_order = sp__free_order_new(device, &rt->dev.fences))) {
        sp__fence_pool_destroy(&rt->dev.fences);
        rc = SP_ERR_NO_HOST_MEMORY;
    }
    if (rc == SP_OK) {
        rc = sp__cuda_stream_create(device, &rt->dev.service);
        if (rc == SP_OK) {
            rc = sp__pool_new(rt, &rt->dev, "default", NULL, NULL, &rt->default_pool);
            if (rc == SP_OK) {
                rt->default_pool->is_default = true;
                sp__config_pool_created(&rt->dev, "default", SP_OK);
                rt->pools = rt->default_pool;
                sp__trace_autostart(rt);
                runtime_register(rt);
                *out = rt;
                return SP_OK;
            }
            (void)sp__cuda_stream_destroy(rt->dev.service);
        }
        sp__free_order_destroy(rt->dev.free_order);
        sp__fence_pool_destroy(&rt->dev.fences);
    }
    sp_mutex_destroy(&rt->lock);
    sp__config_free(rt->dev.conf);
    free(rt);
    return rc;
}

static bool pool_has_live(sp_pool *pool)
{
    return sp__cache_active_bytes(pool) != 0;
}

/* SP_ERR_BUSY with a message naming the pool, its live allocations and bytes (rt->lock may be
 * held). */
static int busy_message(const char *call, sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    (void)sp_pool_stats(pool, &st);
    return sp__config_errorf(SP_ERR_BUSY,
                      "%s: pool '%s' still has %llu live allocation%s (%llu bytes requested): "
                      "sp_free them first (sp_pool_dump_live lists them)",
                      call, pool->name, (unsigned long long)(st.allocs - st.frees),
                      st.allocs - st.frees == 1 ? "" : "s",
                      (unsigned long long)st.requested.current);
}

/* Frees every pool (rt->lock held), the default pool last and only once every other pool is
 * gone, so that a runtime a refused destroy leaves (sp__pool_free) is whole: its default pool
 * and the pools that stay, their cache given back. Returns the first error. */
static int free_pools(sp_runtime *rt)
{
    sp_mutex_assert_owner(&rt->lock);
    int err = SP_OK;
    for (sp_pool **p = &rt->pools; *p;) {
        sp_pool *pool = *p, *next = pool->next;
        int rc = pool->is_default ? SP_ERR_BUSY : sp__pool_free(pool);
        if (rc == SP_OK) {
            *p = next;
            continue;
        }
        if (!pool->is_default && err == SP_OK)
            err = rc;
        p = &pool->next;
    }
    if (err != SP_OK) {
        /* what can go back does: a trim, never below the reservation */
        (void)sp__give_back(rt->default_pool, 0, true, NULL);
        return err;
    }
    err = sp__pool_free(rt->default_pool);
    if (err == SP_OK)
        rt->pools = rt->default_pool = NULL;
    return err;
}

int sp_runtime_destroy(sp_runtime *rt)
{
    sp__cuda_error_clear();
    if (!rt)
        return SP_ERR_INVALID;
    sp_mutex_lock(&rt->lock);
    /* a declared capture forbids the device synchronize that may settle what is left */
    if (atomic_load(&rt->dev.captures) != 0) {
        sp_mutex_unlock(&rt->lock);
        return sp__config_errorf(SP_ERR_BUSY, "sp_runtime_destroy: a graph capture is declared "
                                       "(sp_stream_capture_begin without its end)");
    }
    for (sp_pool *p = rt->pools; p; p = p->next) {
        if (pool_has_live(p)) {
            int rc = busy_message("sp_runtime_destroy", p);
            sp_mutex_unlock(&rt->lock);
            return rc;
        }
    }
    sp_mutex_unlock(&rt->lock);
    /* no exiting thread may reach it from here on (lock order: runtimes_lock > rt->lock) */
    runtime_unregister(rt);
    sp_mutex_lock(&rt->lock);
    sp__config_warn_unused(&rt->dev);
    sp__trace_destroy(rt);
    int err = free_pools(rt);
    sp_mutex_unlock(&rt->lock);
    if (err != SP_OK) {
        runtime_register(rt); /* whole again: exiting threads release their streams in it */
        return err;
    }
    sp__label_forget(rt, NULL);
    /* the pools waited for their own give-backs: nothing of theirs is left on the stream,
     * which a failed synchronize cannot keep from being destroyed (its work completes first) */
    (void)sp__cuda_stream_sync(rt->dev.service);
    (void)sp__cuda_stream_destroy(rt->dev.service);
    sp__free_order_destroy(rt->dev.free_order);
    sp__fence_pool_destroy(&rt->dev.fences);
    sp__ptrmap_free(&rt->dev.ptrmap);
    sp_mutex_destroy(&rt->lock);
    free(rt->capturing);
    sp__config_free(rt->dev.conf);
    free(rt);
    return SP_OK;
}

int sp_runtime_check_config(sp_runtime *rt, char *buf, size_t len)
{
    if (!rt || (!buf && len))
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    sp_mutex_lock(&rt->lock);
    size_t count = sp__config_unseen(&rt->dev, buf, len);
    sp_mutex_unlock(&rt->lock);
    return count > INT32_MAX ? INT32_MAX : (int)count;
}

int sp_runtime_default_pool(sp_runtime *rt, sp_pool **out)
{
    sp__cuda_error_clear();
    if (!rt || !out)
        return SP_ERR_INVALID;
    *out = rt->default_pool;
    return SP_OK;
}

static sp_pool *find_locked(sp_runtime *rt, const char *name)
{
    sp_mutex_assert_owner(&rt->lock);
    for (sp_pool *p = rt->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

static int pool_register(sp_runtime *rt, const char *name, cudaMemPool_t adopt,
                         const sp_pool_config *cfg, sp_pool **out)
{
    sp__cuda_error_clear();
    if (!rt || !name || !out)
        return SP_ERR_INVALID;
    if (sp__names_check_pool(name) != SP_OK)
        return SP_ERR_INVALID;
    if (cfg && sp__struct_check(cfg, SP__MIN_POOL_CONFIG,
                                adopt ? "sp_pool_adopt" : "sp_pool_create", "sp_pool_config"))
        return SP_ERR_INVALID;
    /* share.c: an adopted cudaMemPool has the handle types it was made with */
    if (cfg && cfg->size >= SP__SIZE_THROUGH(sp_pool_config, share) &&
        (cfg->share < SP_SHARE_NONE || cfg->share > SP_SHARE_POSIX_FD ||
         (adopt && cfg->share != SP_SHARE_NONE)))
        return SP_ERR_CONFIG;
    sp_mutex_lock(&rt->lock);
    int rc = find_locked(rt, name) ? SP_ERR_EXISTS : SP_OK;
    sp_pool *pool = NULL;
    if (rc == SP_OK) {
        rc = sp__pool_new(rt, &rt->dev, name, adopt, cfg, &pool);
        /* a pool the device had no memory for is no typo in the conf strings */
        sp__config_pool_created(&rt->dev, name, rc);
    }
    /* peer.c: the grants asked for at creation, or no pool */
    if (rc == SP_OK && (rc = sp__peer_grant_initial(pool)) != SP_OK && sp__pool_free(pool) != SP_OK)
        rc = SP_ERR_CUDA; /* its cudaMemPool could not go: unreachable with what it holds */
    if (rc == SP_OK) {
        pool->next = rt->pools;
        rt->pools = pool;
        *out = pool;
    }
    sp_mutex_unlock(&rt->lock);
    return rc;
}

int sp_pool_create(sp_runtime *rt, const char *name, const sp_pool_config *cfg, sp_pool **out)
{
    return pool_register(rt, name, NULL, cfg, out);
}

int sp_pool_adopt(sp_runtime *rt, const char *name, cudaMemPool_t mem_pool,
                  const sp_pool_config *cfg, sp_pool **out)
{
    sp__cuda_error_clear();
    if (!mem_pool)
        return SP_ERR_INVALID;
    return pool_register(rt, name, mem_pool, cfg, out);
}

int sp_pool_find(sp_runtime *rt, const char *name, sp_pool **out)
{
    sp__cuda_error_clear();
    if (!rt || !name || !out)
        return SP_ERR_INVALID;
    sp_mutex_lock(&rt->lock);
    sp_pool *p = find_locked(rt, name);
    sp_mutex_unlock(&rt->lock);
    if (!p)
        return SP_ERR_NOT_FOUND;
    *out = p;
    return SP_OK;
}

const char *sp_pool_name(const sp_pool *pool)
{
    return pool ? pool->name : NULL;
}

cudaMemPool_t sp_pool_cuda_pool(const sp_pool *pool)
{
    return pool ? pool->cuda_pool : NULL;
}

int sp_pool_destroy(sp_pool *pool)
{
    sp__cuda_error_clear();
    if (!pool || pool->is_default)
        return SP_ERR_INVALID;
    sp_runtime *rt = pool->rt;
    sp_mutex_lock(&rt->lock);
    if (atomic_load(&rt->dev.captures) != 0 || pool_has_live(pool)) {
        int rc = pool_has_live(pool) ? busy_message("sp_pool_destroy", pool) : SP_ERR_BUSY;
        sp_mutex_unlock(&rt->lock);
        return rc;
    }
    sp_pool **p = &rt->pools;
    while (*p != pool)
        p = &(*p)->next;
    sp_pool *next = pool->next;
    /* freed under the lock, as sp_runtime_destroy frees its pools: the free may synchronize the
     * device (frees it cannot order one by one), which a capture declared meanwhile forbids
     * (rule 25); declaring one takes this lock, so it waits for the free. Refused, the pool
     * stays the runtime's, whole. */
    int rc = sp__pool_free(pool);
    if (rc == SP_OK)
        *p = next;
    sp_mutex_unlock(&rt->lock);
    return rc;
}

/* A call on one stream in every pool: the thread's last CUDA error cleared, then `locked` with
 * the stream's key under rt->lock; SP_ERR_INVALID without a runtime. */
static int stream_call(sp_runtime *rt, cudaStream_t stream,
                       int (*locked)(sp_runtime *rt, sp_stream_key key))
{
    sp__cuda_error_clear();
    if (!rt)
        return SP_ERR_INVALID;
    sp_stream_key key = sp__cache_key(stream);
    sp_mutex_lock(&rt->lock);
    int rc = locked(rt, key);
    sp_mutex_unlock(&rt->lock);
    return rc;
}

static int release_locked(sp_runtime *rt, sp_stream_key key)
{
    sp_mutex_assert_owner(&rt->lock);
    int rc = SP_OK;
    for (sp_pool *p = rt->pools; p; p = p->next) {
        int prc = sp__pool_release_stream(p, key);
        if (rc == SP_OK)
            rc = prc;
    }
    return rc;
}

int sp_stream_release(sp_runtime *rt, cudaStream_t stream)
{
    int rc = stream_call(rt, stream, release_locked);
    if (rt)
        sp__label_forget(rt, &stream);
    return rc;
}

/* ---- declared graph captures ---- */

/* Sets or clears the capturing flag of key's cache in every pool (created for `on`, so that the
 * hot path reads one flag and no lock); runtime->lock held. Setting it then waits for every fence
 * step already under way in the pool (sp__cache_drain_fence_steps). Each checks and calls under
 * its cache's fence_lock: one may have found the stream (or the legacy stream, which a capture
 * forbids too) not capturing and be about to query, fence or synchronize it (rule 25), or found
 * no capture counted and be about to query an event in the thread's own capture mode (cuda.c).
 * Once the caller returns and the capture begins, none of them reaches CUDA any more. */
static int capture_flag_all(sp_runtime *rt, sp_stream_key key, bool on)
{
    sp_mutex_assert_owner(&rt->lock);
    for (sp_pool *p = rt->pools; p; p = p->next) {
        sp_stream_cache *c = sp__cache_find(p, key, on);
        if (!c && on)
            return SP_ERR_NO_HOST_MEMORY;
        if (!c)
            continue;
        atomic_store_explicit(&c->declared, on, memory_order_release);
        atomic_store_explicit(&c->capturing, on, memory_order_release);
        if (!on) {
            sp__capture_release_aside(c);
            continue;
        }
        sp__cache_drain_fence_steps(p);
    }
    return SP_OK;
}

static int capture_begin_locked(sp_runtime *rt, sp_stream_key key)
{
    sp_mutex_assert_owner(&rt->lock);
    if (sp__cache_capture_find(rt, key) != SIZE_MAX)
        return SP_OK;
    int rc = SP_OK;
    if (rt->capturing_len == rt->capturing_cap) {
        size_t cap = rt->capturing_cap ? rt->capturing_cap * 2 : 4;
        sp_stream_key *grown = realloc(rt->capturing, cap * sizeof *grown);
        if (!grown)
            rc = SP_ERR_NO_HOST_MEMORY;
        else {
            rt->capturing = grown;
            rt->capturing_cap = cap;
        }
    }
    if (rc == SP_OK) {
        rt->capturing[rt->capturing_len++] = key;
        atomic_fetch_add(&rt->dev.captures, 1);
        rc = capture_flag_all(rt, key, true);
        if (rc != SP_OK) { /* undone: the stream is not declared */
            (void)capture_flag_all(rt, key, false);
            rt->capturing_len--;
            atomic_fetch_sub(&rt->dev.captures, 1);
        }
    }
    return rc;
}

int sp_stream_capture_begin(sp_runtime *rt, cudaStream_t stream)
{
    return stream_call(rt, stream, capture_begin_locked);
}

static int capture_end_locked(sp_runtime *rt, sp_stream_key key)
{
    sp_mutex_assert_owner(&rt->lock);
    size_t i = sp__cache_capture_find(rt, key);
    if (i == SIZE_MAX)
        return SP_ERR_INVALID;
    rt->capturing[i] = rt->capturing[--rt->capturing_len];
    /* the blocks freed during the capture go back to their slabs and segments now */
    (void)capture_flag_all(rt, key, false);
    atomic_fetch_sub(&rt->dev.captures, 1);
    return SP_OK;
}

int sp_stream_capture_end(sp_runtime *rt, cudaStream_t stream)
{
    return stream_call(rt, stream, capture_end_locked);
}

