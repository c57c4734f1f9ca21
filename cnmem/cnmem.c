/* libstreampool_cnmem: NVIDIA CNMeM's C API (include/cnmem.h) on streampool's public API.
 *
 * Two layers. The accounting is CNMeM's tree of managers in bytes: per device a root (what
 * cnmemInit gave it, plus what it grew by) and a child per named stream (what it took from the
 * root or from a sibling); cnmemMemGetInfo and the OUT_OF_MEMORY decisions come from it alone,
 * so they are the same whatever the memory underneath does. The memory is a streampool pool per
 * device (reserve = size), allocated and freed in stream order on
 * the stream the caller names, or under CNMEM_FLAGS_MANAGED one cudaMallocManaged per block. A
 * call first settles the accounting under the library lock, then asks for memory without it,
 * and undoes the accounting if the memory is refused; frees settle both under the lock, so a
 * pointer is freed once however many threads try. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>

#include "cnmem.h"
#include "streampool.h"

/* CNMeM's unit: every request and every stream size is rounded up to it. */
#define GRANULE ((size_t)512)

typedef struct manager {
    cudaStream_t stream; /* NULL: the root */
    size_t total;        /* bytes the manager holds */
    size_t used;         /* allocated from them; a root counts its children's totals too */
} manager;

/* A live block: the table is keyed by ptr (NULL: an empty slot). */
typedef struct block {
    void *ptr;
    size_t size;         /* rounded */
    cudaStream_t stream; /* the manager that allocated it */
} block;

typedef struct device_ctx {
    int device;
    sp_runtime *rt; /* NULL under CNMEM_FLAGS_MANAGED */
    sp_pool *pool;
    manager root;
    manager *children;
    size_t nchildren, children_cap;
    block *blocks; /* open addressing, linear probing; capacity a power of two */
    size_t nblocks, blocks_cap;
} device_ctx;

static struct {
    pthread_mutex_t lock; /* managers and block tables of every device */
    atomic_int refs;      /* 0: not initialized */
    unsigned flags;
    device_ctx *devs;
    int ndevs;
} lib = {.lock = PTHREAD_MUTEX_INITIALIZER};

const char *cnmemGetErrorString(cnmemStatus_t status)
{
    switch (status) {
    case CNMEM_STATUS_SUCCESS: return "CNMEM_STATUS_SUCCESS";
    case CNMEM_STATUS_CUDA_ERROR: return "CNMEM_STATUS_CUDA_ERROR";
    case CNMEM_STATUS_INVALID_ARGUMENT: return "CNMEM_STATUS_INVALID_ARGUMENT";
    case CNMEM_STATUS_NOT_INITIALIZED: return "CNMEM_STATUS_NOT_INITIALIZED";
    case CNMEM_STATUS_OUT_OF_MEMORY: return "CNMEM_STATUS_OUT_OF_MEMORY";
    default: return "CNMEM_STATUS_UNKNOWN_ERROR";
    }
}

/* ---- status mapping ---- */

static cnmemStatus_t from_cuda(cudaError_t e)
{
    if (e == cudaSuccess)
        return CNMEM_STATUS_SUCCESS;
    (void)cudaGetLastError(); /* a refusal the caller hears about as a status is not left set */
    return e == cudaErrorMemoryAllocation ? CNMEM_STATUS_OUT_OF_MEMORY : CNMEM_STATUS_CUDA_ERROR;
}

static cnmemStatus_t from_sp(int rc)
{
    switch (rc) {
    case SP_OK: return CNMEM_STATUS_SUCCESS;
    case SP_ERR_OUT_OF_MEMORY: case SP_ERR_LIMIT: case SP_ERR_NEVER_FITS: case SP_ERR_TOO_LARGE:
    case SP_ERR_NO_HOST_MEMORY: return CNMEM_STATUS_OUT_OF_MEMORY;
    case SP_ERR_INVALID: case SP_ERR_CONFIG: return CNMEM_STATUS_INVALID_ARGUMENT;
    case SP_ERR_CUDA: case SP_ERR_NO_DEVICE: case SP_ERR_NOT_SUPPORTED:
        return CNMEM_STATUS_CUDA_ERROR;
    default: return CNMEM_STATUS_UNKNOWN_ERROR;
    }
}

/* ---- block table ---- */

static size_t home_slot(const void *p, size_t cap)
{
    return (size_t)(((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull >> 32) & (cap - 1);
}

static block *table_find(const device_ctx *d, const void *p)
{
    if (!d->blocks_cap)
        return NULL;
    for (size_t i = home_slot(p, d->blocks_cap);; i = (i + 1) & (d->blocks_cap - 1)) {
        if (!d->blocks[i].ptr)
            return NULL;
        if (d->blocks[i].ptr == p)
            return &d->blocks[i];
    }
}

static void table_insert_fresh(block *slots, size_t cap, block b)
{
    size_t i = home_slot(b.ptr, cap);
    while (slots[i].ptr)
        i = (i + 1) & (cap - 1);
    slots[i] = b;
}

/* Kept at most half full. false: no host memory (the table is as it was). */
static bool table_put(device_ctx *d, block b)
{
    if ((d->nblocks + 1) * 2 > d->blocks_cap) {
        size_t cap = d->blocks_cap ? d->blocks_cap * 2 : 64;
        block *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return false;
        for (size_t i = 0; i < d->blocks_cap; i++)
            if (d->blocks[i].ptr)
                table_insert_fresh(slots, cap, d->blocks[i]);
        free(d->blocks);
        d->blocks = slots;
        d->blocks_cap = cap;
    }
    table_insert_fresh(d->blocks, d->blocks_cap, b);
    d->nblocks++;
    return true;
}

/* Removes a slot and shifts back the entries after it that its emptiness would hide. */
static void table_remove(device_ctx *d, block *slot)
{
    size_t mask = d->blocks_cap - 1, hole = (size_t)(slot - d->blocks);
    for (size_t j = (hole + 1) & mask; d->blocks[j].ptr; j = (j + 1) & mask) {
        size_t home = home_slot(d->blocks[j].ptr, d->blocks_cap);
        /* j's entry may fill the hole unless its home lies cyclically in (hole, j] */
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            d->blocks[hole] = d->blocks[j];
            hole = j;
        }
    }
    d->blocks[hole].ptr = NULL;
    d->nblocks--;
}

/* ---- managers and accounting (under lib.lock) ---- */

static size_t free_of(const manager *m)
{
    return m->total - m->used;
}

static manager *manager_of(device_ctx *d, cudaStream_t stream)
{
    if (!stream)
        return &d->root;
    for (size_t i = 0; i < d->nchildren; i++)
        if (d->children[i].stream == stream)
            return &d->children[i];
    return NULL;
}

static cnmemStatus_t add_child(device_ctx *d, cudaStream_t stream)
{
    if (d->nchildren == d->children_cap) {
        size_t cap = d->children_cap ? d->children_cap * 2 : 8;
        manager *c = realloc(d->children, cap * sizeof *c);
        if (!c)
            return CNMEM_STATUS_OUT_OF_MEMORY;
        d->children = c;
        d->children_cap = cap;
    }
    d->children[d->nchildren++] = (manager){stream, 0, 0};
    return CNMEM_STATUS_SUCCESS;
}

/* Where an allocation's bytes came from, to undo it if the memory is then refused. */
typedef enum { FROM_OWN, FROM_ROOT, FROM_GROWTH, FROM_SIBLING } source;

typedef struct grant {
    source from;
    cudaStream_t stream, donor;
    size_t bytes;
} grant;

static void add(size_t *figure, size_t n, bool undo)
{
    *figure = undo ? *figure - n : *figure + n;
}

/* Applies (or undoes) a grant. A child's figures count what it holds and has allocated; the
 * root's total is its own size (initial and grown) and its used everything of it that is not
 * free, its children's totals included, so bytes moving between children leave it alone. */
static void budget_apply(device_ctx *d, const grant *g, bool undo)
{
    manager *m = manager_of(d, g->stream), *root = &d->root;
    size_t n = g->bytes;
    switch (g->from) {
    case FROM_OWN:
        add(&m->used, n, undo);
        return;
    case FROM_ROOT:
        add(&root->used, n, undo);
        break;
    case FROM_GROWTH:
        add(&root->total, n, undo);
        add(&root->used, n, undo);
        break;
    case FROM_SIBLING:
        add(&manager_of(d, g->donor)->total, n, !undo);
        break;
    }
    if (m != root) {
        add(&m->total, n, undo);
        add(&m->used, n, undo);
    }
}

/* CNMeM's order: the manager's own free bytes; for a child, the root's; the root grows unless
 * CANNOT_GROW; then another child's free bytes unless CANNOT_STEAL. */
static cnmemStatus_t budget_take(device_ctx *d, manager *m, size_t bytes, grant *g)
{
    manager *root = &d->root;
    *g = (grant){FROM_OWN, m->stream, NULL, bytes};
    if (free_of(m) < bytes) {
        if (m != root && free_of(root) >= bytes) {
            g->from = FROM_ROOT;
        } else if (!(lib.flags & CNMEM_FLAGS_CANNOT_GROW) && root->total <= SIZE_MAX - bytes) {
            g->from = FROM_GROWTH;
        } else {
            for (size_t i = 0; !(lib.flags & CNMEM_FLAGS_CANNOT_STEAL) && i < d->nchildren; i++)
                if (&d->children[i] != m && free_of(&d->children[i]) >= bytes) {
                    g->from = FROM_SIBLING;
                    g->donor = d->children[i].stream;
                    break;
                }
            if (g->from != FROM_SIBLING)
                return CNMEM_STATUS_OUT_OF_MEMORY;
        }
    }
    budget_apply(d, g, false);
    return CNMEM_STATUS_SUCCESS;
}

/* ---- memory underneath ---- */

static cnmemStatus_t memory_alloc(device_ctx *d, void **p, size_t bytes, cudaStream_t stream)
{
    if (lib.flags & CNMEM_FLAGS_MANAGED)
        return from_cuda(cudaMallocManaged(p, bytes, cudaMemAttachGlobal));
    return from_sp(sp_alloc(d->pool, p, bytes, stream));
}

static cnmemStatus_t memory_free(device_ctx *d, void *p, cudaStream_t stream)
{
    if (lib.flags & CNMEM_FLAGS_MANAGED)
        return from_cuda(cudaFree(p));
    return from_sp(sp_free(d->pool, p, stream));
}

/* ---- lifetime ---- */

static bool initialized(void)
{
    return atomic_load(&lib.refs) > 0;
}

/* Frees what is still allocated and gives every device's memory back. The caller's streams
 * may be gone by now (CNMeM's own tests destroy them before finalizing): after a device
 * synchronize, blocks go back on the legacy stream, and no named stream is touched. */
static cnmemStatus_t teardown(device_ctx *devs, int ndevs)
{
    cnmemStatus_t status = CNMEM_STATUS_SUCCESS;
    int old = 0;
    bool restore = cudaGetDevice(&old) == cudaSuccess;
    for (int i = 0; i < ndevs; i++) {
        device_ctx *d = &devs[i];
        cnmemStatus_t st = from_cuda(cudaSetDevice(d->device));
        if (st == CNMEM_STATUS_SUCCESS && d->nblocks)
            st = from_cuda(cudaDeviceSynchronize());
        for (size_t j = 0; j < d->blocks_cap; j++)
            if (d->blocks[j].ptr) {
                cnmemStatus_t fst = memory_free(d, d->blocks[j].ptr, NULL);
                if (st == CNMEM_STATUS_SUCCESS)
                    st = fst;
            }
        if (d->rt) {
            cnmemStatus_t dst = from_sp(sp_runtime_destroy(d->rt));
            if (st == CNMEM_STATUS_SUCCESS)
                st = dst;
        }
        if (status == CNMEM_STATUS_SUCCESS)
            status = st;
        free(d->children);
        free(d->blocks);
    }
    free(devs);
    if (restore)
        (void)cudaSetDevice(old);
    return status;
}

/* One device of cnmemInit: its memory, its root and its children. The current device is d's. */
static cnmemStatus_t device_init(device_ctx *d, const cnmemDevice_t *desc, unsigned flags)
{
    struct cudaDeviceProp props;
    cnmemStatus_t st = from_cuda(cudaGetDeviceProperties(&props, desc->device));
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    size_t size = desc->size ? desc->size : props.totalGlobalMem / 2;
    if (size == 0 || size >= props.totalGlobalMem)
        return CNMEM_STATUS_INVALID_ARGUMENT;
    size = (size + GRANULE - 1) / GRANULE * GRANULE;
    d->root.total = size;
    /* each stream's size comes from the root's free bytes, else the root grows by it (CNMeM
     * asks its root for the whole size at once, never steals at init) */
    for (int j = 0; j < desc->numStreams; j++) {
        cudaStream_t s = desc->streams[j];
        if (!s || manager_of(d, s))
            return CNMEM_STATUS_INVALID_ARGUMENT;
        if ((st = add_child(d, s)) != CNMEM_STATUS_SUCCESS)
            return st;
        size_t want = desc->streamSizes ? desc->streamSizes[j] : 0;
        if (want > SIZE_MAX - GRANULE - d->root.total)
            return CNMEM_STATUS_OUT_OF_MEMORY;
        want = (want + GRANULE - 1) / GRANULE * GRANULE;
        if (free_of(&d->root) < want) {
            if (flags & CNMEM_FLAGS_CANNOT_GROW)
                return CNMEM_STATUS_OUT_OF_MEMORY;
            d->root.total += want;
        }
        d->root.used += want;
        d->children[d->nchildren - 1].total = want;
    }
    if (flags & CNMEM_FLAGS_MANAGED) {
        /* managed blocks are allocated one by one: check once that the device has room */
        void *probe = NULL;
        st = from_cuda(cudaMallocManaged(&probe, d->root.total, cudaMemAttachGlobal));
        if (st == CNMEM_STATUS_SUCCESS)
            st = from_cuda(cudaFree(probe));
        return st;
    }
    if ((st = from_sp(sp_runtime_create(desc->device, NULL, &d->rt))) != CNMEM_STATUS_SUCCESS)
        return st;
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.reserve = d->root.total;
    /* no streampool limit: the accounting above caps the bytes handed out exactly, while
     * streampool carves whole slabs and segments, which a limit of `size` would refuse before
     * the last byte is handed out */
    /* CNMeM hands a stream memory another stream freed before it takes more from the device */
    cfg.cross_stream = SP_CROSS_STREAM_WAIT;
    return from_sp(sp_pool_create(d->rt, "cnmem", &cfg, &d->pool));
}

cnmemStatus_t cnmemInit(int numDevices, const cnmemDevice_t *devices, unsigned flags)
{
    if (numDevices < 1 || !devices || initialized() ||
        (flags & ~(unsigned)(CNMEM_FLAGS_CANNOT_GROW | CNMEM_FLAGS_CANNOT_STEAL |
                             CNMEM_FLAGS_MANAGED)))
        return CNMEM_STATUS_INVALID_ARGUMENT;
    for (int i = 0; i < numDevices; i++) {
        if (devices[i].device < 0 || devices[i].numStreams < 0 ||
            (devices[i].numStreams > 0 && !devices[i].streams))
            return CNMEM_STATUS_INVALID_ARGUMENT;
        for (int j = 0; j < i; j++)
            if (devices[j].device == devices[i].device)
                return CNMEM_STATUS_INVALID_ARGUMENT;
    }
    int old;
    cnmemStatus_t st = from_cuda(cudaGetDevice(&old));
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    device_ctx *devs = calloc((size_t)numDevices, sizeof *devs);
    if (!devs)
        return CNMEM_STATUS_OUT_OF_MEMORY;
    lib.flags = flags;
    int made = 0;
    for (; made < numDevices && st == CNMEM_STATUS_SUCCESS; made++) {
        devs[made].device = devices[made].device;
        st = from_cuda(cudaSetDevice(devices[made].device));
        if (st == CNMEM_STATUS_SUCCESS)
            st = device_init(&devs[made], &devices[made], flags);
    }
    if (st != CNMEM_STATUS_SUCCESS) {
        (void)teardown(devs, made);
        (void)cudaSetDevice(old);
        return st;
    }
    st = from_cuda(cudaSetDevice(old));
    if (st != CNMEM_STATUS_SUCCESS) {
        (void)teardown(devs, made);
        return st;
    }
    lib.devs = devs;
    lib.ndevs = numDevices;
    atomic_store(&lib.refs, 1);
    return CNMEM_STATUS_SUCCESS;
}

cnmemStatus_t cnmemRetain(void)
{
    int n = atomic_load(&lib.refs);
    do {
        if (n <= 0)
            return CNMEM_STATUS_NOT_INITIALIZED;
    } while (!atomic_compare_exchange_weak(&lib.refs, &n, n + 1));
    return CNMEM_STATUS_SUCCESS;
}

cnmemStatus_t cnmemRelease(void)
{
    int n = atomic_load(&lib.refs);
    do {
        if (n <= 0)
            return CNMEM_STATUS_NOT_INITIALIZED;
    } while (!atomic_compare_exchange_weak(&lib.refs, &n, n - 1));
    if (n > 1)
        return CNMEM_STATUS_SUCCESS;
    device_ctx *devs = lib.devs;
    int ndevs = lib.ndevs;
    lib.devs = NULL;
    lib.ndevs = 0;
    return teardown(devs, ndevs);
}

cnmemStatus_t cnmemFinalize(void)
{
    return cnmemRelease();
}

/* The current device's context, if cnmemInit listed it. */
static cnmemStatus_t current(device_ctx **out)
{
    int dev;
    cnmemStatus_t st = from_cuda(cudaGetDevice(&dev));
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    for (int i = 0; i < lib.ndevs; i++)
        if (lib.devs[i].device == dev) {
            *out = &lib.devs[i];
            return CNMEM_STATUS_SUCCESS;
        }
    return CNMEM_STATUS_INVALID_ARGUMENT;
}

cnmemStatus_t cnmemRegisterStream(cudaStream_t stream)
{
    if (!initialized())
        return CNMEM_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CNMEM_STATUS_INVALID_ARGUMENT;
    device_ctx *d;
    cnmemStatus_t st = current(&d);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    pthread_mutex_lock(&lib.lock);
    if (!manager_of(d, stream))
        st = add_child(d, stream);
    pthread_mutex_unlock(&lib.lock);
    return st;
}

cnmemStatus_t cnmemMalloc(void **ptr, size_t size, cudaStream_t stream)
{
    if (!initialized())
        return CNMEM_STATUS_NOT_INITIALIZED;
    if (size == 0) {
        if (ptr)
            *ptr = NULL;
        return CNMEM_STATUS_SUCCESS;
    }
    if (!ptr)
        return CNMEM_STATUS_INVALID_ARGUMENT;
    device_ctx *d;
    cnmemStatus_t st = current(&d);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    if (size > SIZE_MAX - GRANULE)
        return CNMEM_STATUS_OUT_OF_MEMORY;
    size_t bytes = (size + GRANULE - 1) / GRANULE * GRANULE;
    grant g;
    pthread_mutex_lock(&lib.lock);
    manager *m = manager_of(d, stream);
    st = m ? budget_take(d, m, bytes, &g) : CNMEM_STATUS_INVALID_ARGUMENT;
    pthread_mutex_unlock(&lib.lock);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    void *p = NULL;
    st = memory_alloc(d, &p, bytes, stream);
    pthread_mutex_lock(&lib.lock);
    if (st == CNMEM_STATUS_SUCCESS && !table_put(d, (block){p, bytes, stream})) {
        (void)memory_free(d, p, stream);
        st = CNMEM_STATUS_OUT_OF_MEMORY;
    }
    if (st != CNMEM_STATUS_SUCCESS)
        budget_apply(d, &g, true);
    pthread_mutex_unlock(&lib.lock);
    if (st == CNMEM_STATUS_SUCCESS)
        *ptr = p;
    return st;
}

cnmemStatus_t cnmemFree(void *ptr, cudaStream_t stream)
{
    if (!initialized())
        return CNMEM_STATUS_NOT_INITIALIZED;
    if (!ptr)
        return CNMEM_STATUS_SUCCESS;
    device_ctx *d;
    cnmemStatus_t st = current(&d);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    pthread_mutex_lock(&lib.lock);
    block *b = table_find(d, ptr);
    if (!b || (stream && stream != b->stream)) {
        st = CNMEM_STATUS_INVALID_ARGUMENT;
    } else {
        st = memory_free(d, ptr, stream);
        if (st == CNMEM_STATUS_SUCCESS) {
            manager_of(d, b->stream)->used -= b->size;
            table_remove(d, b);
        }
    }
    pthread_mutex_unlock(&lib.lock);
    return st;
}

cnmemStatus_t cnmemMemGetInfo(size_t *freeMem, size_t *totalMem, cudaStream_t stream)
{
    if (!initialized())
        return CNMEM_STATUS_NOT_INITIALIZED;
    if (!freeMem || !totalMem)
        return CNMEM_STATUS_INVALID_ARGUMENT;
    device_ctx *d;
    cnmemStatus_t st = current(&d);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    pthread_mutex_lock(&lib.lock);
    const manager *m = manager_of(d, stream);
    if (m) {
        *freeMem = free_of(m);
        *totalMem = m->total;
    }
    pthread_mutex_unlock(&lib.lock);
    return m ? CNMEM_STATUS_SUCCESS : CNMEM_STATUS_INVALID_ARGUMENT;
}

/* One manager, in CNMeM's layout: a header, the used list, the free list. A root's used list
 * names its children's shares beside its own blocks. Under lib.lock. */
static void print_manager(FILE *file, const device_ctx *d, const manager *m)
{
    bool root = m == &d->root;
    fprintf(file, ">> [%s] device=%d, stream=0x%016zx, used=%zuB, free=%zuB\n",
            root ? "root" : "child", d->device, (size_t)(uintptr_t)m->stream, m->used,
            free_of(m));
    fprintf(file, "| list=\"used\", size=%zu\n", m->used);
    for (size_t i = 0; i < d->blocks_cap; i++)
        if (d->blocks[i].ptr && d->blocks[i].stream == m->stream)
            fprintf(file, "| | data=0x%016zx, size=%zu\n", (size_t)(uintptr_t)d->blocks[i].ptr,
                    d->blocks[i].size);
    for (size_t i = 0; root && i < d->nchildren; i++)
        if (d->children[i].total)
            fprintf(file, "| | child stream=0x%016zx, size=%zu\n",
                    (size_t)(uintptr_t)d->children[i].stream, d->children[i].total);
    fprintf(file, "|\n| list=\"free\", size=%zu\n|\n\n", free_of(m));
}

cnmemStatus_t cnmemPrintMemoryState(FILE *file, cudaStream_t stream)
{
    if (!initialized())
        return CNMEM_STATUS_NOT_INITIALIZED;
    if (!file)
        return CNMEM_STATUS_INVALID_ARGUMENT;
    device_ctx *d;
    cnmemStatus_t st = current(&d);
    if (st != CNMEM_STATUS_SUCCESS)
        return st;
    pthread_mutex_lock(&lib.lock);
    const manager *m = manager_of(d, stream);
    if (m) {
        print_manager(file, d, m);
        if (m != &d->root)
            print_manager(file, d, &d->root);
    }
    pthread_mutex_unlock(&lib.lock);
    return m ? CNMEM_STATUS_SUCCESS : CNMEM_STATUS_INVALID_ARGUMENT;
}
