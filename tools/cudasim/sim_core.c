/* cudasim core: global state and its lock, per-thread current device and last error, the
 * registry of live handles (so a stale handle gives cudaErrorInvalidResourceHandle rather
 * than a crash), per-API call counters, fault injection, devices and versions. */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* Writer-preferring: a synchronize (exclusive) is not starved by streams' allocator calls
 * (shared), which is also why no thread may take the lock shared twice. */
sim_state sim_g = {.lock = {.excl = PTHREAD_MUTEX_INITIALIZER,
                            .drain_lock = PTHREAD_MUTEX_INITIALIZER,
                            .drain_cv = PTHREAD_COND_INITIALIZER},
                   .workers_lock = PTHREAD_MUTEX_INITIALIZER,
                   .workers_cv = PTHREAD_COND_INITIALIZER};

_Thread_local bool sim_in_host_fn;
static _Thread_local int tls_device;
static _Thread_local cudaError_t tls_last_error;

/* ---- counters and faults ---- */

static const char *const api_names[SIM_API_COUNT] = {
#define SIM_API_NAME(name) #name,
    SIM_APIS(SIM_API_NAME)
#undef SIM_API_NAME
};

static _Atomic unsigned long long call_counts[SIM_API_COUNT];

typedef struct {
    bool active, persistent;
    unsigned long countdown;   /* calls left before the first failure (nth mode) */
    unsigned per_million;      /* rate mode when non-zero */
    uint64_t rng;
    cudaError_t error;
} sim_fault;

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_fault faults[SIM_API_COUNT];
static atomic_int faults_armed; /* lets the common case skip fault_lock */

static int api_index(const char *name)
{
    for (int i = 0; i < SIM_API_COUNT; i++)
        if (name && strcmp(api_names[i], name) == 0)
            return i;
    return -1;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static cudaError_t fault_check(sim_api api)
{
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&fault_lock);
    sim_fault *f = &faults[api];
    if (f->active) {
        if (f->per_million) {
            if (splitmix64(&f->rng) % 1000000u < f->per_million)
                err = f->error;
        } else if (f->countdown > 1) {
            f->countdown--;
        } else {
            err = f->error;
            if (!f->persistent)
                f->active = false;
        }
    }
    pthread_mutex_unlock(&fault_lock);
    return err;
}

cudaError_t sim_enter(sim_api api)
{
    atomic_fetch_add_explicit(&call_counts[api], 1, memory_order_relaxed);
    if (sim_in_host_fn)
        return cudaErrorNotPermitted; /* rule 19: host functions must not call CUDA */
    if (atomic_load_explicit(&faults_armed, memory_order_acquire))
        return fault_check(api);
    return cudaSuccess;
}

cudaError_t sim_ret(cudaError_t err)
{
    if (err != cudaSuccess)
        tls_last_error = err;
    return err;
}

cudaError_t cudasimInjectFault(const char *api, unsigned long nth, cudaError_t error, int persistent)
{
    int i = api_index(api);
    if (i < 0 || nth == 0 || error == cudaSuccess)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&fault_lock);
    faults[i] = (sim_fault){.active = true, .persistent = persistent != 0, .countdown = nth,
                            .error = error};
    atomic_store(&faults_armed, 1);
    pthread_mutex_unlock(&fault_lock);
    return cudaSuccess;
}

cudaError_t cudasimInjectFaultRate(const char *api, unsigned per_million, cudaError_t error,
                                   unsigned long long seed)
{
    int i = api_index(api);
    if (i < 0 || per_million == 0 || per_million > 1000000u || error == cudaSuccess)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&fault_lock);
    faults[i] = (sim_fault){.active = true, .per_million = per_million, .rng = seed,
                            .error = error};
    atomic_store(&faults_armed, 1);
    pthread_mutex_unlock(&fault_lock);
    return cudaSuccess;
}

void cudasimClearFaults(void)
{
    pthread_mutex_lock(&fault_lock);
    memset(faults, 0, sizeof faults);
    atomic_store(&faults_armed, 0);
    pthread_mutex_unlock(&fault_lock);
}

unsigned long long cudasimCallCount(const char *api)
{
    if (!api) {
        unsigned long long total = 0;
        for (int i = 0; i < SIM_API_COUNT; i++)
            total += atomic_load_explicit(&call_counts[i], memory_order_relaxed);
        return total;
    }
    int i = api_index(api);
    return i < 0 ? 0 : atomic_load_explicit(&call_counts[i], memory_order_relaxed);
}

void cudasimResetCallCounts(void)
{
    for (int i = 0; i < SIM_API_COUNT; i++)
        atomic_store_explicit(&call_counts[i], 0, memory_order_relaxed);
}

/* ---- maps: open addressing on the pointer, deletion by backward shift ---- */

static size_t map_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static void map_grow(sim_map *m)
{
    size_t old_cap = m->cap;
    sim_map_slot *old = m->slots;
    m->cap = old_cap ? old_cap * 2 : 256;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots)
        abort(); /* the emulator cannot go on without its registry */
    m->len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            sim_map_put(m, old[i].key, old[i].type, old[i].value);
    free(old);
}

void sim_map_put(sim_map *m, const void *key, int type, void *value)
{
    if ((m->len + 1) * 2 > m->cap)
        map_grow(m);
    size_t i = map_hash(key) & (m->cap - 1);
    while (m->slots[i].key && m->slots[i].key != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].key)
        m->len++;
    m->slots[i] = (sim_map_slot){key, value, type};
}

static size_t map_find(const sim_map *m, const void *key)
{
    if (!m->cap || !key)
        return SIZE_MAX;
    size_t i = map_hash(key) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].key == key)
            return i;
        i = (i + 1) & (m->cap - 1);
    }
    return SIZE_MAX;
}

void *sim_map_get(const sim_map *m, const void *key, int type)
{
    size_t i = map_find(m, key);
    return i != SIZE_MAX && m->slots[i].type == type ? m->slots[i].value : NULL;
}

void sim_map_remove(sim_map *m, const void *key)
{
    size_t i = map_find(m, key);
    if (i == SIZE_MAX)
        return;
    m->slots[i].key = NULL;
    m->len--;
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = map_hash(m->slots[j].key) & mask;
        /* move j back into the hole at i if its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            m->slots[i] = m->slots[j];
            m->slots[j].key = NULL;
            i = j;
        }
    }
}

void sim_map_free(sim_map *m)
{
    free(m->slots);
    *m = (sim_map){0};
}

/* ---- handle registry: written under the exclusive lock only, read in either mode ---- */

static sim_map handles;

void sim_handle_add(const void *key, int type)
{
    sim_map_put(&handles, key, type, NULL);
}

void sim_handle_put(const void *key, int type, void *value)
{
    sim_map_put(&handles, key, type, value);
}

bool sim_handle_valid(const void *key, int type)
{
    size_t i = map_find(&handles, key);
    return i != SIZE_MAX && handles.slots[i].type == type;
}

void *sim_handle_get(const void *key, int type)
{
    return sim_map_get(&handles, key, type);
}

void sim_handle_remove(const void *key)
{
    sim_map_remove(&handles, key);
}

size_t sim_handles_of_type(int type, void ***out)
{
    size_t n = 0;
    *out = calloc(handles.len + 1, sizeof **out);
    if (!*out)
        abort();
    for (size_t i = 0; i < handles.cap; i++)
        if (handles.slots[i].key && handles.slots[i].type == type)
            (*out)[n++] = (void *)handles.slots[i].key;
    return n;
}

/* ---- state, devices ---- */

size_t sim_parse_size(const char *s, bool *ok)
{
    *ok = false;
    if (!s)
        return 0;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return 0;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return 0;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if ((*end == 'B' || *end == 'b') && shift)
        end++;
    if (*end != '\0' || (shift && v > (SIZE_MAX >> shift)))
        return 0;
    *ok = true;
    return (size_t)(v << shift);
}

static void sim_start(void)
{
    if (sim_g.started)
        return;
    sim_g.started = true;
    sim_g.device_count = 1;
    sim_g.env_capacity = SIM_DEFAULT_CAPACITY;
    const char *count = getenv("CUDASIM_DEVICE_COUNT");
    if (count) {
        int n = atoi(count);
        if (n >= 0 && n <= SIM_MAX_DEVICES)
            sim_g.device_count = n;
        else
            fprintf(stderr, "cudasim: CUDASIM_DEVICE_COUNT=%s ignored (0..%d)\n", count,
                    SIM_MAX_DEVICES);
    }
    const char *peers = getenv("CUDASIM_PEER_ACCESS");
    sim_g.peer_access = peers && strcmp(peers, "1") == 0;
    memset(sim_g.peer_enabled, 0, sizeof sim_g.peer_enabled);
    const char *mem = getenv("CUDASIM_DEVICE_MEMORY");
    if (mem) {
        bool ok;
        size_t v = sim_parse_size(mem, &ok);
        if (ok && v > 0)
            sim_g.env_capacity = v;
        else
            fprintf(stderr, "cudasim: CUDASIM_DEVICE_MEMORY=%s ignored\n", mem);
    }
}

/* The mode this thread holds sim_g.lock in, for sim_unlock (the lock is never held twice). */
static _Thread_local bool tls_shared;

/* Exclusive: holding excl keeps new shared holders out (writer preference); then the ones
 * inside are waited out. `draining` is stored before `readers` is read, and a leaving shared
 * holder decrements `readers` before reading `draining` (both sequentially consistent), so
 * either this sees 0 or the last one to leave sees the flag and signals under drain_lock,
 * which this holds from its check until it sleeps. */
void sim_lock(void)
{
    sim_rwlock *l = &sim_g.lock;
    pthread_mutex_lock(&l->excl);
    if (atomic_load(&l->readers)) {
        atomic_store(&l->draining, true);
        pthread_mutex_lock(&l->drain_lock);
        while (atomic_load(&l->readers))
            pthread_cond_wait(&l->drain_cv, &l->drain_lock);
        pthread_mutex_unlock(&l->drain_lock);
        atomic_store(&l->draining, false);
    }
    tls_shared = false;
    sim_start();
}

bool sim_lock_shared(void)
{
    sim_rwlock *l = &sim_g.lock;
    pthread_mutex_lock(&l->excl);
    bool started = sim_g.started; /* sim_start writes: if not, the caller goes exclusive */
    if (started)
        atomic_fetch_add(&l->readers, 1);
    pthread_mutex_unlock(&l->excl);
    tls_shared = started;
    return started;
}

void sim_unlock(void)
{
    sim_rwlock *l = &sim_g.lock;
    if (!tls_shared) {
        pthread_mutex_unlock(&l->excl);
        return;
    }
    tls_shared = false;
    if (atomic_fetch_sub(&l->readers, 1) == 1 && atomic_load(&l->draining)) {
        pthread_mutex_lock(&l->drain_lock);
        pthread_cond_signal(&l->drain_cv);
        pthread_mutex_unlock(&l->drain_lock);
    }
}

int sim_current_device(void)
{
    return tls_device;
}

sim_device *sim_dev(int device)
{
    if (device < 0 || device >= sim_g.device_count)
        return NULL;
    sim_device *d = &sim_g.devices[device];
    if (!d->ready && sim_device_memory_init(d, device) != cudaSuccess)
        return NULL;
    return d;
}

sim_device *sim_dev_ready(int device)
{
    if (device < 0 || device >= sim_g.device_count || !sim_g.devices[device].ready)
        return NULL;
    return &sim_g.devices[device];
}

void cudasimReset(void)
{
    sim_lock();
    sim_graphs_reset();  /* ends captures, drops graphs (before their streams go) */
    sim_streams_reset(); /* drains all work, destroys streams and events */
    sim_pools_reset();   /* releases all memory */
    sim_map_free(&handles);
    sim_g.started = false;
    sim_g.generation++;
    sim_start();
    sim_unlock();
    cudasimClearFaults();
    cudasimResetCallCounts();
    tls_last_error = cudaSuccess;
    tls_device = 0;
}

/* The Runtime API: destroys the current device's resources in this process and resets its
 * state; the next call initialises it again. Its note keeps cudaMallocAsync and
 * cudaMallocFromPoolAsync memory out of it ("need to be destroyed explicitly"), and so pools
 * (device objects, not the context's) stay with their allocations and attributes, as on a GPU
 * where a reset does not return them. Waits for the device's work first: the caller must keep
 * other threads off the device meanwhile, as CUDA requires. */
cudaError_t cudaDeviceReset(void)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceReset);
    if (err)
        return sim_ret(err);
    sim_lock();
    int dev = tls_device;
    if (!sim_dev(dev)) {
        sim_unlock();
        return sim_ret(cudaErrorInvalidDevice);
    }
    sim_device_sync(dev);          /* graph launches included */
    sim_graphs_device_reset(dev);  /* captures, executable graphs, graph memory */
    sim_streams_device_reset(dev); /* events, streams */
    sim_pools_device_reset(dev);   /* cudaMalloc and pinned memory */
    sim_peer_device_reset(dev);    /* peer access to and from it */
    sim_g.devices[dev].sticky = cudaSuccess; /* a new context: the fault is gone with the old */
    sim_unlock();
    return cudaSuccess;
}

bool sim_device_charge(int device, size_t bytes, bool release)
{
    sim_device *d = &sim_g.devices[device];
    if (release) {
        atomic_fetch_sub(&d->reserved, bytes);
        return true;
    }
    /* capacity changes only under the exclusive lock; reserved under either */
    size_t cur = atomic_load(&d->reserved);
    do {
        if (bytes > d->capacity - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&d->reserved, &cur, cur + bytes));
    return true;
}

cudaError_t cudasimSetDeviceMemory(int device, size_t bytes)
{
    sim_lock();
    sim_device *d = sim_dev(device);
    cudaError_t err = cudaSuccess;
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (bytes == 0 || bytes < d->reserved || bytes > d->arena_size / 2)
        err = cudaErrorNotPermitted;
    else
        d->capacity = bytes;
    sim_unlock();
    return err;
}

/* ---- device and version calls ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t err = sim_enter(SIM_API_cudaGetDeviceCount);
    if (err)
        return sim_ret(err);
    if (!count)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    int n = sim_g.device_count;
    sim_unlock();
    if (n == 0)
        return sim_ret(cudaErrorNoDevice);
    *count = n;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaSetDevice);
    if (err)
        return sim_ret(err);
    sim_lock();
    bool ok = sim_dev(device) != NULL;
    sim_unlock();
    if (!ok)
        return sim_ret(cudaErrorInvalidDevice);
    tls_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    cudaError_t err = sim_enter(SIM_API_cudaGetDevice);
    if (err)
        return sim_ret(err);
    if (!device)
        return sim_ret(cudaErrorInvalidValue);
    *device = tls_device;
    return cudaSuccess;
}

/* Without CUDASIM_PEER_ACCESS=1 emulated devices share no memory bus: no device can map a
 * peer's memory. With it, every pair of distinct devices is a peer pair. A device is never its
 * own peer (CUDA answers 0 for device == peerDevice). */
cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceCanAccessPeer);
    if (err)
        return sim_ret(err);
    if (!canAccessPeer)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    bool ok = sim_dev(device) && sim_dev(peerDevice);
    bool can = ok && device != peerDevice && sim_peers_possible();
    sim_unlock();
    if (!ok)
        return sim_ret(cudaErrorInvalidDevice);
    *canAccessPeer = can;
    return cudaSuccess;
}

/* The Id is unique for the life of the program (stream ids are never reused, even across
 * cudasimReset); 0, cudaStreamLegacy and cudaStreamPerThread are accepted. */
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamGetId);
    if (err)
        return sim_ret(err);
    if (!streamId)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(hStream, &err);
    unsigned long long id = s ? s->id : 0;
    sim_unlock();
    if (err)
        return sim_ret(err);
    *streamId = id;
    return cudaSuccess;
}

/* The device of a stream (CUDA 12.8); the NULL, legacy and per-thread handles name the current
 * device's own stream. */
cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamGetDevice);
    if (err)
        return sim_ret(err);
    if (!device)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    int dev = sim_current_device();
    if (hStream != NULL && hStream != cudaStreamLegacy && hStream != cudaStreamPerThread) {
        sim_stream *s = sim_stream_resolve(hStream, &err);
        if (s)
            dev = s->device;
    }
    sim_unlock();
    if (err)
        return sim_ret(err);
    *device = dev;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceGetAttribute);
    if (err)
        return sim_ret(err);
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    bool ok = sim_dev(device) != NULL;
    sim_unlock();
    if (!ok)
        return sim_ret(cudaErrorInvalidDevice);
    int v;
    switch (attr) {
    case cudaDevAttrMemoryPoolsSupported: v = 1; break;
    case cudaDevAttrMemoryPoolSupportedHandleTypes: v = cudaMemHandleTypePosixFileDescriptor; break;
    case cudaDevAttrComputeCapabilityMajor: v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: v = 0; break;
    case cudaDevAttrMultiProcessorCount: v = 2; break;
    case cudaDevAttrWarpSize: v = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
    case cudaDevAttrUnifiedAddressing: v = 1; break;
    case cudaDevAttrManagedMemory: v = 1; break;
    case cudaDevAttrConcurrentManagedAccess: v = 0; break;
    case cudaDevAttrIntegrated: v = 0; break;
    default: return sim_ret(cudaErrorInvalidValue); /* documented subset only */
    }
    *value = v;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    cudaError_t err = sim_enter(SIM_API_cudaGetDeviceProperties);
    if (err)
        return sim_ret(err);
    if (!prop)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_device *d = sim_dev(device);
    size_t capacity = d ? d->capacity : 0;
    sim_unlock();
    if (!d)
        return sim_ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "cudasim");
    prop->totalGlobalMem = capacity;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 2;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->unifiedAddressing = 1;
    prop->memoryPoolsSupported = 1;
    prop->managedMemory = 1; /* cudaMallocManaged; concurrentManagedAccess stays 0 */
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    cudaError_t err = sim_enter(SIM_API_cudaDriverGetVersion);
    if (err)
        return sim_ret(err);
    if (!version)
        return sim_ret(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    cudaError_t err = sim_enter(SIM_API_cudaRuntimeGetVersion);
    if (err)
        return sim_ret(err);
    if (!version)
        return sim_ret(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

/* A sticky error on the current device outlives cudaGetLastError, as a device fault does. */
static cudaError_t current_sticky(void)
{
    sim_lock();
    cudaError_t sticky = tls_device < sim_g.device_count ? sim_g.devices[tls_device].sticky
                                                         : cudaSuccess;
    sim_unlock();
    return sticky;
}

cudaError_t cudaGetLastError(void)
{
    (void)sim_enter(SIM_API_cudaGetLastError); /* never fails, even in a host function */
    cudaError_t sticky = current_sticky();
    if (sticky)
        return sticky;
    cudaError_t err = tls_last_error;
    tls_last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void)
{
    (void)sim_enter(SIM_API_cudaPeekAtLastError);
    cudaError_t sticky = current_sticky();
    return sticky ? sticky : tls_last_error;
}

#define SIM_ERRORS(X) \
    X(cudaSuccess, "no error") \
    X(cudaErrorInvalidValue, "invalid argument") \
    X(cudaErrorMemoryAllocation, "out of memory") \
    X(cudaErrorInitializationError, "initialization error") \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected") \
    X(cudaErrorInvalidDevice, "invalid device ordinal") \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle") \
    X(cudaErrorNotReady, "device not ready") \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered") \
    X(cudaErrorNotPermitted, "operation not permitted") \
    X(cudaErrorNotSupported, "operation not supported") \
    X(cudaErrorLaunchFailure, "unspecified launch failure") \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing") \
    X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
    X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences") \
    X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began") \
    X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work") \
    X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream") \
    X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
    X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state") \
    X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device") \
    X(cudaErrorInvalidDeviceFunction, "invalid device function") \
    X(cudaErrorMissingConfiguration, "__global__ function call is not configured") \
    X(cudaErrorInvalidPitchValue, "invalid pitch argument") \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy") \
    X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
    X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
    X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled") \
    X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled") \
    X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorName(cudaError_t error)
{
    (void)sim_enter(SIM_API_cudaGetErrorName);
    switch (error) {
#define SIM_ERR_NAME(code, text) case code: return #code;
        SIM_ERRORS(SIM_ERR_NAME)
#undef SIM_ERR_NAME
    default: return "unrecognized error code";
    }
}

const char *cudaGetErrorString(cudaError_t error)
{
    (void)sim_enter(SIM_API_cudaGetErrorString);
    switch (error) {
#define SIM_ERR_TEXT(code, text) case code: return text;
        SIM_ERRORS(SIM_ERR_TEXT)
#undef SIM_ERR_TEXT
    default: return "unrecognized error code";
    }
}
