/* Emulator-only tests: what needs cudasim's extension API (capacity, fault injection, call
 * counters, reset) or a behaviour a real GPU cannot be driven into safely (a device fault). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "support/cuda_fixture.h"

static const size_t MiB = (size_t)1 << 20;

/* cudaDeviceCanAccessPeer(device, peer) succeeds and answers `can`. */
static void assert_can_access_peer(int device, int peer, int can)
{
    int got = -1;
    CK(cudaDeviceCanAccessPeer(&got, device, peer));
    assert_int_equal(got, can);
}

static void capacity_limits_allocation_and_mem_get_info(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 64 * MiB));
    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(total, 64 * MiB);
    assert_int_equal(free_b, 64 * MiB);
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p, *q = (void *)0x42;
    CK(cudaMallocFromPoolAsync(&p, 40 * MiB, pool, s));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 24 * MiB);
    assert_int_equal(cudaMallocFromPoolAsync(&q, 30 * MiB, pool, s), cudaErrorMemoryAllocation);
    assert_ptr_equal(q, (void *)0x42);
    assert_int_equal(cudaMalloc(&q, 30 * MiB), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    CK(cudaMallocFromPoolAsync(&q, 20 * MiB, pool, s)); /* not sticky (rule 5) */
    /* 40 MiB reserved and 20 MiB more: the device cannot shrink below what it holds */
    assert_int_equal(cudasimSetDeviceMemory(0, 32 * MiB), cudaErrorNotPermitted);
    CK(cudaFreeAsync(p, s));
    CK(cudaFreeAsync(q, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolTrimTo(pool, 0));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 64 * MiB);
    CK(cudaStreamDestroy(s));
    CK(cudaMemPoolDestroy(pool));
}

/* cudaMallocManaged on cudasim (a device without concurrent managed access): the device's own
 * pages hold the memory from the call on, in whole 2 MiB pages as cudaMalloc's, so
 * cudaMemGetInfo counts it; over the capacity it is cudaErrorMemoryAllocation with the output
 * untouched; cudaFree gives the pages back. Its call counter is its own. */
static void managed_memory_is_device_memory(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 16 * MiB));
    int concurrent = -1;
    CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    assert_int_equal(concurrent, 0);
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    assert_int_equal(prop.managedMemory, 1);
    assert_int_equal(prop.concurrentManagedAccess, 0);
    cudasimResetCallCounts();
    size_t free_b = 0, total = 0;
    void *m = NULL, *big = (void *)0x42;
    CK(cudaMallocManaged(&m, 3 * MiB + 1, cudaMemAttachGlobal));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 12 * MiB); /* 3 MiB + 1 byte: two pages */
    assert_int_equal(cudaMallocManaged(&big, 13 * MiB, cudaMemAttachHost),
                     cudaErrorMemoryAllocation);
    assert_ptr_equal(big, (void *)0x42);
    (void)cudaGetLastError();
    assert_int_equal(cudasimCallCount("cudaMallocManaged"), 2);
    assert_int_equal(cudasimCallCount("cudaMalloc"), 0);
    CK(cudaFree(m));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 16 * MiB);
    /* fault injection reaches it by name, like every entry point */
    CK(cudasimInjectFault("cudaMallocManaged", 1, cudaErrorMemoryAllocation, 0));
    assert_int_equal(cudaMallocManaged(&big, 4096, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
    assert_ptr_equal(big, (void *)0x42);
    (void)cudaGetLastError();
    cudasimClearFaults();
}

/* Rule 8 in exact figures: 512-byte rounding, 2 MiB chunks, high watermarks. */
static void pool_accounting_is_exact(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p, *q;
    CK(cudaMallocFromPoolAsync(&p, 12, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 512);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
    CK(cudaMallocFromPoolAsync(&q, 3 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 512 + 3 * MiB);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * MiB);
    CK(cudaFreeAsync(q, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 512);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemHigh), 512 + 3 * MiB);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolTrimTo(pool, 0)); /* the 4 MiB chunk is free; the first is in use */
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemHigh), 6 * MiB);
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamDestroy(s));
    CK(cudaMemPoolDestroy(pool));
}

/* 11(d): when the device is full, a pending free on another stream is reused only with internal
 * dependencies on, and the allocating stream then really waits for the free. Rule 6: without it,
 * the allocation fails; after a synchronize it succeeds. */
static void rule11d_internal_dependency_when_device_full(void **state)
{
    (void)state;
    for (int internal = 0; internal <= 1; internal++) {
        CK(cudasimSetDeviceMemory(0, 4 * MiB));
        cudaMemPool_t pool = new_pool(UINT64_MAX);
        pool_flag(pool, cudaMemPoolReuseAllowOpportunistic, 0);
        pool_flag(pool, cudaMemPoolReuseAllowInternalDependencies, internal);
        cudaStream_t a, b;
        gate *g = gate_new();
        CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        void *p, *q = NULL, *fill;
        CK(cudaMallocFromPoolAsync(&p, 2 * MiB, pool, a));
        CK(cudaMallocFromPoolAsync(&fill, 2 * MiB, pool, a));
        gate_hold(g, a);
        CK(cudaFreeAsync(p, a));
        cudaError_t err = cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b);
        if (internal) {
            CK(err);
            assert_ptr_equal(q, p);
            order_log log = {0};
            order_mark m = {&log, 1};
            mark(b, &m);
            assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady); /* b waits for a's free */
            gate_open(g);
            CK(cudaStreamSynchronize(b));
            assert_int_equal(atomic_load(&log.len), 1);
            CK(cudaFreeAsync(q, b));
        } else {
            assert_int_equal(err, cudaErrorMemoryAllocation);
            (void)cudaGetLastError();
            gate_open(g);
            CK(cudaStreamSynchronize(a)); /* 11(c): now any stream may have it */
            CK(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, b));
            assert_ptr_equal(q, p);
            CK(cudaFreeAsync(q, b));
        }
        CK(cudaFreeAsync(fill, a));
        CK(cudaDeviceSynchronize());
        CK(cudaStreamDestroy(a));
        CK(cudaStreamDestroy(b));
        CK(cudaMemPoolDestroy(pool));
        cudasimReset();
    }
}

/* A ranged free on two streams is never merged into one block reusable by either. */
static void frees_on_two_streams_do_not_merge(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    pool_flag(pool, cudaMemPoolReuseAllowOpportunistic, 0);
    pool_flag(pool, cudaMemPoolReuseAllowInternalDependencies, 0);
    cudaStream_t a = cfx.a, b = cfx.b;
    gate *ga = gate_new(), *gb = gate_new();
    void *p, *q, *r;
    CK(cudaMallocFromPoolAsync(&p, 1 * MiB, pool, a));
    CK(cudaMallocFromPoolAsync(&q, 1 * MiB, pool, a));
    CK(cudaStreamSynchronize(a));
    assert_ptr_equal((char *)p + MiB, q);
    gate_hold(ga, a);
    gate_hold(gb, b);
    CK(cudaFreeAsync(p, a));
    CK(cudaFreeAsync(q, b));
    CK(cudaMallocFromPoolAsync(&r, 2 * MiB, pool, a));
    assert_ptr_not_equal(r, p); /* would span b's pending free */
    gate_open(ga);
    gate_open(gb);
    CK(cudaFreeAsync(r, a));
    CK(cudaDeviceSynchronize());
    CK(cudaMemPoolDestroy(pool));
}

/* Rule 13a in exact figures: free pages of the pool are remapped into a new contiguous range
 * before the pool grows, and it grows only by the shortfall, in 2 MiB pages. */
static void remap_grows_only_by_the_shortfall(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    void *p[3], *r1, *r2, *r3;
    for (int i = 0; i < 3; i++)
        CK(cudaMallocFromPoolAsync(&p[i], 2 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * MiB);
    CK(cudaFreeAsync(p[0], s));
    CK(cudaFreeAsync(p[2], s)); /* rule 9: reusable by s at once, no synchronize needed */
    CK(cudaMallocFromPoolAsync(&r1, 4 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * MiB);
    CK(cudaMallocFromPoolAsync(&r2, 3 * MiB, pool, s)); /* nothing free: 4 MiB more */
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 10 * MiB);
    CK(cudaFreeAsync(p[1], s));
    /* p[1]'s page is remapped; r2's free 1 MiB tail is no whole page: 4 MiB more */
    CK(cudaMallocFromPoolAsync(&r3, 6 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 14 * MiB);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 13 * MiB);
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(total - free_b, 14 * MiB);
    CK(cudaMemsetAsync(r3, 0x77, 6 * MiB, s));
    assert_true(device_bytes_are(r3, 6 * MiB, 0x77, s));
    CK(cudaFreeAsync(r1, s));
    CK(cudaFreeAsync(r2, s));
    CK(cudaFreeAsync(r3, s));
    trim_leaves_nothing_then_destroy(pool, s);
}

/* Rules 9 and 13a in stream order, in exact figures: a same-stream allocation remaps the pages
 * of a free that has not run yet. The device counts those pages once (in the new range), while
 * the old range keeps its contents for the work enqueued before the free, and another stream's
 * new memory on a full device does not disturb them. */
static void remap_of_pending_free_counts_pages_once_and_keeps_old_data(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 16 * MiB));
    cudaMemPool_t pool = new_pool(UINT64_MAX), other = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a, t = cfx.b;
    gate *g = gate_new();
    unsigned char *host;
    CK(cudaMallocHost((void **)&host, 4 * MiB));
    memset(host, 0, 4 * MiB);
    void *x, *y, *z, *w = (void *)0x42;
    CK(cudaMallocFromPoolAsync(&x, 4 * MiB, pool, s));
    CK(cudaMemsetAsync(x, 0x5a, 4 * MiB, s));
    CK(cudaStreamSynchronize(s));
    gate_hold(g, s);
    CK(cudaMemcpyAsync(host, x, 4 * MiB, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(x, s));
    CK(cudaMallocFromPoolAsync(&y, 12 * MiB, pool, s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 12 * MiB);
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 4 * MiB); /* x's pages are y's now, counted once */
    assert_false((char *)y < (char *)x + 4 * MiB && (char *)x < (char *)y + 12 * MiB);
    /* the rest of the device goes to another stream, which writes it while s is held */
    assert_int_equal(cudaMallocFromPoolAsync(&w, 6 * MiB, other, t), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    assert_ptr_equal(w, (void *)0x42);
    CK(cudaMallocFromPoolAsync(&z, 4 * MiB, other, t));
    assert_false((char *)z < (char *)x + 4 * MiB && (char *)x < (char *)z + 4 * MiB);
    CK(cudaMemsetAsync(z, 0x77, 4 * MiB, t));
    CK(cudaStreamSynchronize(t));
    CK(cudaMemsetAsync(y, 0x11, 12 * MiB, s));
    gate_open(g);
    CK(cudaStreamSynchronize(s));
    size_t bad = 0;
    for (size_t i = 0; i < 4 * MiB; i++)
        bad += host[i] != 0x5a;
    assert_int_equal(bad, 0);
    assert_true(device_bytes_are(y, 12 * MiB, 0x11, s));
    assert_true(device_bytes_are(z, 4 * MiB, 0x77, t));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 0);
    CK(cudaFreeAsync(y, s));
    CK(cudaFreeAsync(z, t));
    CK(cudaDeviceSynchronize());
    CK(cudaMemPoolTrimTo(pool, 0));
    CK(cudaMemPoolTrimTo(other, 0));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 16 * MiB);
    CK(cudaFreeHost(host));
    CK(cudaMemPoolDestroy(pool));
    CK(cudaMemPoolDestroy(other));
}

/* 11(b) with remapping: pages whose free has executed on stream a are remapped for stream b
 * only with opportunistic reuse on; without it the pool grows by the whole request. */
static void remap_follows_opportunistic_reuse(void **state)
{
    (void)state;
    for (int opportunistic = 0; opportunistic <= 1; opportunistic++) {
        cudaMemPool_t pool = new_pool(UINT64_MAX);
        pool_flag(pool, cudaMemPoolReuseFollowEventDependencies, 0);
        pool_flag(pool, cudaMemPoolReuseAllowOpportunistic, opportunistic);
        pool_flag(pool, cudaMemPoolReuseAllowInternalDependencies, 0);
        cudaStream_t a, b;
        cudaEvent_t e;
        CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        void *p1, *p2, *q;
        CK(cudaMallocFromPoolAsync(&p1, 2 * MiB, pool, a));
        CK(cudaMallocFromPoolAsync(&p2, 2 * MiB, pool, a));
        CK(cudaFreeAsync(p1, a));
        CK(cudaFreeAsync(p2, a));
        CK(cudaEventRecord(e, a));
        cudaError_t st;
        while ((st = cudaEventQuery(e)) == cudaErrorNotReady)
            sched_yield();
        CK(st);
        CK(cudaMallocFromPoolAsync(&q, 4 * MiB, pool, b));
        assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent),
                         opportunistic ? 4 * MiB : 8 * MiB);
        CK(cudaFreeAsync(q, b));
        CK(cudaDeviceSynchronize());
        CK(cudaEventDestroy(e));
        CK(cudaStreamDestroy(a));
        CK(cudaStreamDestroy(b));
        CK(cudaMemPoolDestroy(pool));
    }
}

/* Rule 13 in exact figures: a trim releases the free whole pages of a chunk that is partly in
 * use, and stops at the page that would take the pool below the minimum. */
static void trim_releases_whole_free_pages(void **state)
{
    (void)state;
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    cudaStream_t s = cfx.a;
    void *p, *r;
    CK(cudaMallocFromPoolAsync(&p, 7 * MiB, pool, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMallocFromPoolAsync(&r, 512, pool, s)); /* best fit: the never-used 8th MiB */
    assert_ptr_equal(r, (char *)p + 7 * MiB);       /* so the 4th page stays in use */
    CK(cudaMemPoolTrimTo(pool, 5 * MiB));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * MiB);
    CK(cudaMemPoolTrimTo(pool, 0));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
    CK(cudaFreeAsync(r, s));
    trim_leaves_nothing_then_destroy(pool, s);
}

/* Rule 13b in exact figures: cudaMalloc memory freed by cudaFreeAsync returns to the device
 * at the next synchronize that observes the free. */
static void cudafreeasync_of_cudamalloc_memory_returns_it(void **state)
{
    (void)state;
    cudaStream_t s = cfx.a;
    size_t free0, free1, total;
    CK(cudaMemGetInfo(&free0, &total));
    void *p;
    CK(cudaMalloc(&p, 3 * MiB));
    CK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 4 * MiB);
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0);
}

/* Issue 8 item 3 with two devices: no emulated device is peer-capable, and every call says so
 * consistently; pool IPC is not supported and the device attribute lists no handle types. */
static void two_devices_are_not_peers(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    assert_can_access_peer(0, 1, 0);
    assert_can_access_peer(1, 0, 0);
    assert_can_access_peer(1, 1, 0); /* the documented choice for a device and itself */
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    struct cudaMemAccessDesc desc = {.location = {.type = cudaMemLocationTypeDevice, .id = 1},
                                     .flags = cudaMemAccessFlagsProtReadWrite};
    assert_int_equal(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorNotSupported);
    desc.flags = cudaMemAccessFlagsProtNone;
    CK(cudaMemPoolSetAccess(pool, &desc, 1));
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtRead;
    CK(cudaMemPoolGetAccess(&flags, pool, &desc.location));
    assert_int_equal(flags, cudaMemAccessFlagsProtNone);
    desc.location.id = 2;
    assert_int_equal(cudaMemPoolGetAccess(&flags, pool, &desc.location), cudaErrorInvalidDevice);
    int types = -1; /* IPC needs no peers: POSIX file descriptors on every device */
    CK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 1));
    assert_int_equal(types, cudaMemHandleTypePosixFileDescriptor);
    CK(cudaSetDevice(0));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

/* cudaMemcpy refuses at the call, with cudaErrorInvalidValue and nothing sticky, what a GPU
 * would copy wrongly or fault on: a range past its allocation, a freed block, an explicit kind
 * that contradicts the pointers. A device-to-device copy returns while the legacy stream is
 * still held. cudaMemcpyPeer and cudaMemcpyPeerAsync copy between two devices that are not
 * peers (they stage), and refuse a pointer not on the device named for it; a plain
 * cudaMemcpyAsync on a device that has no access to the other's pool memory faults. */
static void memcpy_refusals_and_peer_copies_without_peer_access(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    enum { N = 4096 };
    unsigned char h[N], back[N];
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i ^ 0x5a);
    void *p, *p2, *stale;
    CK(cudaMallocAsync(&p, N, 0));
    CK(cudaMallocAsync(&p2, N, 0));
    CK(cudaMallocAsync(&stale, N, 0));
    CK(cudaFreeAsync(stale, 0));
    CK(cudaStreamSynchronize(0));
    assert_int_equal(cudaMemcpy(back, p, N + 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(back, (char *)p + 1, N, cudaMemcpyDefault), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(back, stale, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(back, h, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(p, back, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(back, p, 16, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaMemcpy(p, h, N, cudaMemcpyHostToDevice)); /* nothing sticky */

    gate *g = gate_new();
    gate_hold(g, 0);
    CK(cudaMemcpy(p2, p, N, cudaMemcpyDeviceToDevice)); /* returns with the legacy stream held */
    assert_int_equal(cudaStreamQuery(0), cudaErrorNotReady);
    gate_open(g);
    memset(back, 0, N);
    CK(cudaMemcpy(back, p2, N, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, N);

    assert_can_access_peer(0, 1, 0);
    void *r;
    CK(cudaSetDevice(1));
    CK(cudaMallocAsync(&r, N, 0));
    CK(cudaMemsetAsync(r, 0, N, 0));
    CK(cudaStreamSynchronize(0));
    CK(cudaSetDevice(0));
    CK(cudaMemcpyPeer(r, 1, p, 0, N)); /* no peer access needed */
    memset(back, 0, N);
    CK(cudaMemcpyPeer(p2, 0, r, 1, 0)); /* zero bytes */
    CK(cudaMemsetAsync(p2, 0, N, 0));
    CK(cudaMemcpyPeer(p2, 0, r, 1, N));
    CK(cudaMemcpy(back, p2, N, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, N);
    assert_int_equal(cudaMemcpyPeer(p2, 1, r, 1, N), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpyPeer(p2, 0, r, 1, N + 512), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpyPeer(p2, 0, r, 2, N), cudaErrorInvalidDevice);
    assert_int_equal(cudaMemcpyPeerAsync(p2, 0, r, 2, N, 0), cudaErrorInvalidDevice);
    assert_int_equal(cudaMemcpyPeerAsync(p2, 0, h, 1, N, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMemsetAsync(p2, 0x77, N, s));
    CK(cudaMemcpyPeerAsync(r, 1, p2, 0, N, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaSetDevice(1));
    CK(cudaMemcpy(back, r, N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 0x77);
    CK(cudaSetDevice(0));
    /* cudaMemcpyPeer synchronizes with the devices' streams: not while one of them captures */
    cudaStream_t c;
    cudaGraph_t graph = NULL;
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed));
    assert_int_equal(cudaMemcpyPeer(p2, 0, r, 1, N), cudaErrorStreamCaptureUnsupported);
    assert_int_equal(cudaStreamEndCapture(c, &graph), cudaErrorStreamCaptureInvalidated);
    assert_null(graph);
    CK(cudaStreamDestroy(c));
    (void)cudaGetLastError();
    /* a plain copy on device 0 reading device 1's pool memory: no access, a device fault */
    CK(cudaMemcpyAsync(back, r, N, cudaMemcpyDefault, s));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    CK(cudaDeviceReset()); /* device 0's context goes, and its fault with it */
    CK(cudaSetDevice(1));
    CK(cudaFreeAsync(r, 0));
    CK(cudaStreamSynchronize(0));
    CK(cudaSetDevice(0));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

/* CUDASIM_PEER_ACCESS=1 with two devices: every pair is a peer pair. cudaDeviceEnablePeerAccess
 * and cudaDeviceDisablePeerAccess answer CUDA's errors (already enabled, not enabled, the device
 * itself, flags, a bad ordinal), and cudaDeviceReset drops the access. Pool access is granted per
 * device and all or nothing; the owning device stays read-write. Access is enforced on the
 * stream's device: reading with ProtRead works, writing through it faults, as does reading once
 * revoked; the fault is device 1's alone. */
static void peer_access_grants_and_enforcement(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    setenv("CUDASIM_PEER_ACCESS", "1", 1);
    cudasimReset();
    assert_can_access_peer(0, 1, 1);
    assert_can_access_peer(1, 0, 1);
    assert_can_access_peer(1, 1, 0);
    CK(cudaDeviceEnablePeerAccess(1, 0));
    assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    assert_int_equal(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    assert_int_equal(cudaDeviceEnablePeerAccess(2, 0), cudaErrorInvalidDevice);
    assert_int_equal(cudaDeviceDisablePeerAccess(0), cudaErrorInvalidDevice);
    CK(cudaDeviceDisablePeerAccess(1));
    assert_int_equal(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    assert_int_equal(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
    CK(cudaSetDevice(1));
    assert_int_equal(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled); /* one way */
    CK(cudaDeviceEnablePeerAccess(0, 0));
    CK(cudaDeviceReset()); /* either device's reset ends it */
    assert_int_equal(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    CK(cudaSetDevice(0));
    (void)cudaGetLastError();

    cudaMemPool_t pool = new_pool(UINT64_MAX);
    struct cudaMemLocation dev0 = {.type = cudaMemLocationTypeDevice, .id = 0};
    struct cudaMemLocation dev1 = {.type = cudaMemLocationTypeDevice, .id = 1};
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtReadWrite;
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtNone);
    struct cudaMemAccessDesc d[2] = {{.location = dev1, .flags = cudaMemAccessFlagsProtRead},
                                     {.location = dev0, .flags = cudaMemAccessFlagsProtRead}};
    CK(cudaMemPoolSetAccess(pool, d, 1));
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtRead);
    d[0].flags = cudaMemAccessFlagsProtReadWrite;
    assert_int_equal(cudaMemPoolSetAccess(pool, d, 2), cudaErrorInvalidValue); /* owner: RW only */
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtRead); /* nothing applied */
    d[0].flags = (enum cudaMemAccessFlags)2;
    assert_int_equal(cudaMemPoolSetAccess(pool, d, 1), cudaErrorInvalidValue);
    CK(cudaMemPoolGetAccess(&f, pool, &dev0));
    assert_int_equal(f, cudaMemAccessFlagsProtReadWrite);
    (void)cudaGetLastError();

    enum { N = 4096 };
    unsigned char back[N];
    void *p;
    cudaStream_t s0, s1;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaMallocFromPoolAsync(&p, N, pool, s0));
    CK(cudaMemsetAsync(p, 0x42, N, s0));
    CK(cudaStreamSynchronize(s0));
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaMemcpyAsync(back, p, N, cudaMemcpyDeviceToHost, s1)); /* ProtRead: reads */
    CK(cudaStreamSynchronize(s1));
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 0x42);
    CK(cudaMemsetAsync(p, 0x17, N, s1)); /* a write through ProtRead */
    assert_int_equal(cudaStreamSynchronize(s1), cudaErrorIllegalAddress);
    CK(cudaDeviceReset()); /* device 1's fault; device 0 is untouched */
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    d[0].flags = cudaMemAccessFlagsProtReadWrite;
    CK(cudaMemPoolSetAccess(pool, d, 1));
    CK(cudaMemsetAsync(p, 0x17, N, s1));
    CK(cudaStreamSynchronize(s1));
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 0x17);
    d[0].flags = cudaMemAccessFlagsProtNone; /* revoked: reads fault too */
    CK(cudaMemPoolSetAccess(pool, d, 1));
    CK(cudaSetDevice(1));
    CK(cudaMemcpyAsync(back, p, N, cudaMemcpyDeviceToHost, s1));
    assert_int_equal(cudaStreamSynchronize(s1), cudaErrorIllegalAddress);
    CK(cudaSetDevice(0));
    CK(cudaFreeAsync(p, s0));
    CK(cudaStreamSynchronize(s0)); /* device 0 never faulted */
    CK(cudaStreamDestroy(s0));
    unsetenv("CUDASIM_PEER_ACCESS");
    unsetenv("CUDASIM_DEVICE_COUNT");
}

/* IPC within one process (an import maps the exporter's file at a window of its own, so the
 * same rules hold as across processes, which test_cuda_peer_ipc runs): what CUDA forbids is
 * refused with cudaErrorInvalidValue and the output untouched (exporting a pool without the
 * handle type, another handle type or flags, a descriptor that is no pool's, allocating from or
 * setting as current an imported pool, exporting an interior pointer or a plain pool's block,
 * importing into a pool that is not imported, data of another pool, a block imported twice or
 * freed by its exporter); the two mappings share bytes both ways; the pages count once, on the
 * exporter's device, and go back when the exporter frees and synchronizes; a use of an import
 * after the exporter freed it is a device fault. */
static void ipc_in_one_process_refusals_sharing_and_accounting(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                                     .handleTypes = cudaMemHandleTypeWin32,
                                     .location = {.type = cudaMemLocationTypeDevice, .id = 1}};
    cudaMemPool_t shared = NULL, def, imp = NULL, none = (cudaMemPool_t)0x42;
    assert_int_equal(cudaMemPoolCreate(&shared, &props), cudaErrorNotSupported);
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    CK(cudaMemPoolCreate(&shared, &props));
    CK(cudaDeviceGetDefaultMemPool(&def, 1));
    const enum cudaMemAllocationHandleType fdt = cudaMemHandleTypePosixFileDescriptor;
    int fd = -1;
    assert_int_equal(cudaMemPoolExportToShareableHandle(&fd, def, fdt, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolExportToShareableHandle(&fd, shared, cudaMemHandleTypeWin32, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolExportToShareableHandle(&fd, shared, fdt, 1), cudaErrorInvalidValue);
    assert_int_equal(fd, -1);
    CK(cudaMemPoolExportToShareableHandle(&fd, shared, fdt, 0));
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    assert_int_equal(cudaMemPoolImportFromShareableHandle(&none, (void *)(intptr_t)pipefd[0], fdt, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolImportFromShareableHandle(&none, (void *)(intptr_t)-1, fdt, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolImportFromShareableHandle(&none, (void *)(intptr_t)fd, fdt, 1),
                     cudaErrorInvalidValue);
    assert_ptr_equal(none, (cudaMemPool_t)0x42);
    close(pipefd[0]);
    close(pipefd[1]);
    CK(cudaMemPoolImportFromShareableHandle(&imp, (void *)(intptr_t)fd, fdt, 0));
    close(fd); /* the imported pool keeps its own */
    assert_int_equal(cudaMemPoolExportToShareableHandle(&fd, imp, fdt, 0), cudaErrorInvalidValue);

    CK(cudaSetDevice(1));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p, *x = (void *)0x42, *plain, *q = NULL, *q2 = (void *)0x42;
    assert_int_equal(cudaMallocFromPoolAsync(&x, 4096, imp, s), cudaErrorInvalidValue);
    assert_ptr_equal(x, (void *)0x42);
    assert_int_equal(cudaDeviceSetMemPool(1, imp), cudaErrorInvalidValue);
    CK(cudaMallocFromPoolAsync(&p, 8192, shared, s));
    CK(cudaMallocFromPoolAsync(&plain, 4096, def, s));
    CK(cudaMemsetAsync(p, 0x33, 8192, s));
    CK(cudaStreamSynchronize(s));
    struct cudaMemPoolPtrExportData data, again, bad;
    memset(&bad, 0x5a, sizeof bad);
    assert_int_equal(cudaMemPoolExportPointer(&bad, plain), cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolExportPointer(&bad, (char *)p + 512), cudaErrorInvalidValue);
    assert_int_equal(bad.reserved[0], 0x5a);
    CK(cudaMemPoolExportPointer(&data, p));
    CK(cudaMemPoolExportPointer(&again, p));
    assert_memory_equal(&data, &again, sizeof data);
    assert_int_equal(cudaMemPoolImportPointer(&q, def, &data), cudaErrorInvalidValue);
    assert_int_equal(cudaMemPoolImportPointer(&q, shared, &data), cudaErrorInvalidValue);
    bad = data;
    bad.reserved[9] ^= 1; /* another pool's identity */
    assert_int_equal(cudaMemPoolImportPointer(&q, imp, &bad), cudaErrorInvalidValue);
    assert_null(q);
    CK(cudaMemPoolImportPointer(&q, imp, &data));
    assert_ptr_not_equal(q, p);
    assert_int_equal(cudaMemPoolImportPointer(&q2, imp, &data), cudaErrorInvalidValue);
    assert_ptr_equal(q2, (void *)0x42);
    (void)cudaGetLastError();

    unsigned char back[8192];
    CK(cudaMemcpy(back, q, 8192, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8192; i++)
        assert_int_equal(back[i], 0x33);
    CK(cudaMemsetAsync(q, 0x44, 4096, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, p, 8192, cudaMemcpyDeviceToHost));
    assert_int_equal(back[0], 0x44);
    assert_int_equal(back[4095], 0x44);
    assert_int_equal(back[4096], 0x33);
    /* counted once, on the exporter's pool and device */
    assert_true(pool_attr(imp, cudaMemPoolAttrReservedMemCurrent) == 0);
    assert_true(pool_attr(shared, cudaMemPoolAttrReservedMemCurrent) == 2 * MiB);
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(total - free_b, 4 * MiB); /* the shared pool's page and the default's */

    CK(cudaFree(q)); /* this import only */
    CK(cudaMemcpy(back, p, 16, cudaMemcpyDeviceToHost));
    assert_int_equal(back[0], 0x44);
    CK(cudaMemPoolImportPointer(&q, imp, &data)); /* freed here: may be imported again */
    CK(cudaFreeAsync(q, s));
    CK(cudaStreamSynchronize(s));

    CK(cudaMemPoolImportPointer(&q, imp, &data));
    CK(cudaFreeAsync(p, s)); /* the exporter frees: the export is dead */
    CK(cudaFreeAsync(plain, s));
    CK(cudaStreamSynchronize(s));
    assert_int_equal(cudaMemPoolImportPointer(&q2, imp, &data), cudaErrorInvalidValue);
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total); /* released at the synchronize (threshold 0) */
    CK(cudaMemsetAsync(q, 0, 16, s)); /* an import its exporter freed: a bad address */
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    (void)cudaFree(q);
    CK(cudaDeviceReset());
    CK(cudaMemPoolDestroy(imp));
    CK(cudaMemPoolDestroy(shared));
    CK(cudaSetDevice(0));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

/* Threads, each on its own stream, allocate from one shareable pool, export, import into one
 * imported pool, write through the import and read through the original, then free both (the
 * frees take the shared allocator path on their streams). Run under ThreadSanitizer. */
typedef struct {
    cudaMemPool_t shared, imp;
    int seed, failures;
} ipc_thread_arg;

static void ipc_thread(void *arg, cudaStream_t s)
{
    ipc_thread_arg *a = arg;
    for (int i = 0; i < 16; i++) {
        size_t n = 512u * (size_t)(1 + (a->seed * 7 + i) % 9);
        unsigned char byte = (unsigned char)(a->seed * 16 + i), back[8] = {0};
        void *p = NULL, *q = NULL;
        struct cudaMemPoolPtrExportData data;
        if (cudaMallocFromPoolAsync(&p, n, a->shared, s) != cudaSuccess ||
            cudaStreamSynchronize(s) != cudaSuccess || cudaMemPoolExportPointer(&data, p) ||
            cudaMemPoolImportPointer(&q, a->imp, &data) ||
            cudaMemsetAsync(q, byte, n, s) != cudaSuccess ||
            cudaMemcpyAsync(back, (char *)p + n - 8, 8, cudaMemcpyDeviceToHost, s) ||
            cudaFreeAsync(q, s) != cudaSuccess || cudaFreeAsync(p, s) != cudaSuccess ||
            cudaStreamSynchronize(s) != cudaSuccess) {
            a->failures++;
            break;
        }
        for (int k = 0; k < 8; k++)
            a->failures += back[k] != byte;
    }
    cudaStreamDestroy(s);
}

static void ipc_under_threads(void **state)
{
    (void)state;
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                                     .handleTypes = cudaMemHandleTypePosixFileDescriptor,
                                     .location = {.type = cudaMemLocationTypeDevice, .id = 0}};
    cudaMemPool_t shared, imp;
    CK(cudaMemPoolCreate(&shared, &props));
    int fd = -1;
    CK(cudaMemPoolExportToShareableHandle(&fd, shared, cudaMemHandleTypePosixFileDescriptor, 0));
    CK(cudaMemPoolImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                            cudaMemHandleTypePosixFileDescriptor, 0));
    close(fd);
    enum { T = 4 };
    stream_thread t[T];
    ipc_thread_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (ipc_thread_arg){shared, imp, i + 1, 0};
        stream_thread_start(&t[i], ipc_thread, &args[i]);
    }
    for (int i = 0; i < T; i++) {
        stream_thread_join(&t[i]);
        assert_int_equal(args[i].failures, 0);
    }
    assert_true(pool_attr(shared, cudaMemPoolAttrUsedMemCurrent) == 0);
    CK(cudaMemPoolDestroy(imp));
    CK(cudaMemPoolDestroy(shared));
}

/* Issue 22 item 19: cudaDeviceReset destroys what the current device's context holds in this
 * process (streams, events, executable graphs and graph memory, cudaMalloc and pinned memory,
 * a sticky fault) and nothing of another device; stream-ordered memory and pools stay, as the
 * Runtime API's note says. Later calls start afresh. */
static void device_reset_destroys_the_context_state(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "2", 1);
    cudasimReset();
    CK(cudasimSetDeviceMemory(0, 64 * MiB));
    cudaStream_t other;
    CK(cudaSetDevice(1));
    CK(cudaStreamCreate(&other));
    void *other_mem;
    CK(cudaMalloc(&other_mem, MiB));
    CK(cudaSetDevice(0));

    cudaStream_t s;
    cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e));
    CK(cudaEventRecord(e, s));
    void *dev, *host, *kept, *kept_default;
    CK(cudaMalloc(&dev, 8 * MiB));
    CK(cudaMallocHost(&host, 4096));
    cudaMemPool_t pool = new_pool(UINT64_MAX);
    CK(cudaMallocFromPoolAsync(&kept, 3 * MiB, pool, s));
    CK(cudaMallocAsync(&kept_default, MiB, s));
    cudaGraph_t g;
    cudaGraphExec_t x;
    void *gp;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&gp, 2 * MiB, s));
    CK(cudaFreeAsync(gp, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    /* a fault: sticky until the context goes */
    CK(cudaMemsetAsync((char *)kept + 3 * MiB - 16, 0, 4096, s));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    assert_int_equal(cudaMalloc(&gp, 16), cudaErrorIllegalAddress);
    uint64_t graph_mem = 0;
    CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &graph_mem));
    assert_int_equal(graph_mem, 2 * MiB);
    size_t free_b, total;

    CK(cudaDeviceReset());
    (void)cudaGetLastError(); /* this thread's record of the failed call */
    CK(cudaGetLastError());   /* no longer sticky: the fault went with the context */
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaGraphLaunch(x, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaFree(dev), cudaErrorInvalidValue);
    assert_int_equal(cudaFreeHost(host), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &graph_mem));
    assert_int_equal(graph_mem, 0);
    CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &graph_mem));
    assert_int_equal(graph_mem, 0);
    /* the pools and their allocations stay, in 2 MiB pages: 4 MiB for the pool's 3, 2 for the
     * default pool's 1; the 8 MiB of cudaMalloc and the graph's 2 MiB are back */
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, 58 * MiB);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * MiB);

    /* afresh: the legacy and per-thread streams, new streams and events, the graph */
    CK(cudaMemsetAsync(kept, 1, 3 * MiB, 0));
    CK(cudaMemsetAsync(kept_default, 2, MiB, cudaStreamPerThread));
    assert_true(device_bytes_are(kept, 3 * MiB, 1, 0));
    assert_true(device_bytes_are(kept_default, MiB, 2, cudaStreamPerThread));
    CK(cudaStreamCreate(&s));
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    CK(cudaFreeAsync(kept, s));
    CK(cudaFreeAsync(kept_default, s));
    CK(cudaStreamSynchronize(s));
    graph_destroy(x, g);
    CK(cudaStreamDestroy(s));
    CK(cudaMemPoolDestroy(pool));

    /* the other device kept its stream and memory */
    CK(cudaSetDevice(1));
    CK(cudaStreamSynchronize(other));
    CK(cudaFree(other_mem));
    CK(cudaStreamDestroy(other));
    CK(cudaSetDevice(0));
    unsetenv("CUDASIM_DEVICE_COUNT");
}

static void illegal_address_is_sticky_and_reported_at_execution(void **state)
{
    (void)state;
    cudaStream_t s;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p;
    CK(cudaMallocAsync(&p, 4096, s));
    gate_hold(g, s);
    CK(cudaMemsetAsync((char *)p + 4000, 0, 4096, s)); /* runs past the allocation */
    char not_device[16];
    CK(cudaMemcpyAsync(not_device, (void *)0x1000, 16, cudaMemcpyDeviceToHost, s));
    gate_open(g);
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    assert_int_equal(cudaGetLastError(), cudaErrorIllegalAddress);
    assert_int_equal(cudaGetLastError(), cudaErrorIllegalAddress); /* sticky */
    void *q;
    assert_int_equal(cudaMallocAsync(&q, 16, s), cudaErrorIllegalAddress);
    cudasimReset();
    CK(cudaGetLastError());
    CK(cudaMallocAsync(&q, 16, 0));
    CK(cudaFreeAsync(q, 0));
}

/* The worker reads the sticky error under the shared lock before each copy: one that would
 * have run after a fault is skipped, and one before it ran in full. */
static void copies_after_a_fault_do_not_run(void **state)
{
    (void)state;
    cudaStream_t s;
    gate *g = gate_new();
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *p;
    CK(cudaMallocAsync((void **)&p, 4096, s));
    gate_hold(g, s);
    CK(cudaMemsetAsync(p, 0xab, 4096, s));
    CK(cudaMemsetAsync(p + 4000, 0, 4096, s)); /* runs past the allocation: the fault */
    CK(cudaMemsetAsync(p, 0x11, 2048, s));
    static const unsigned char src[16] = {1, 2, 3};
    CK(cudaMemcpyAsync(p + 2048, src, sizeof src, cudaMemcpyHostToDevice, s));
    gate_open(g);
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(p[i], 0xab); /* only the first memset ran */
    cudasimReset();
}

static void fault_injection_nth_and_persistent(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudasimInjectFault("cudaMallocAsync", 2, cudaErrorMemoryAllocation, 0));
    void *p = NULL, *q = (void *)0x99;
    CK(cudaMallocAsync(&p, 64, s));
    assert_int_equal(cudaMallocAsync(&q, 64, s), cudaErrorMemoryAllocation);
    assert_ptr_equal(q, (void *)0x99);
    CK(cudaMallocAsync(&q, 64, s)); /* once only */
    CK(cudaFreeAsync(q, s));
    CK(cudasimInjectFault("cudaStreamSynchronize", 1, cudaErrorLaunchFailure, 1));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
    cudasimClearFaults();
    CK(cudaStreamSynchronize(s));
    assert_int_equal(cudasimInjectFault("cudaNoSuchCall", 1, cudaErrorUnknown, 0),
                     cudaErrorInvalidValue);
    /* rate mode: deterministic for a seed */
    int failures[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        CK(cudasimInjectFaultRate("cudaEventQuery", 250000, cudaErrorUnknown, 7));
        cudaEvent_t e;
        CK(cudaEventCreate(&e));
        for (int i = 0; i < 400; i++)
            failures[round] += cudaEventQuery(e) == cudaErrorUnknown;
        cudasimClearFaults();
        CK(cudaEventDestroy(e));
    }
    assert_int_equal(failures[0], failures[1]);
    assert_true(failures[0] > 50 && failures[0] < 150);
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    (void)cudaGetLastError();
}

static void call_counters(void **state)
{
    (void)state;
    cudasimResetCallCounts();
    assert_int_equal(cudasimCallCount(NULL), 0);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *p;
    for (int i = 0; i < 10; i++) {
        CK(cudaMallocAsync(&p, 256, s));
        CK(cudaFreeAsync(p, s));
    }
    assert_int_equal(cudasimCallCount("cudaMallocAsync"), 10);
    assert_int_equal(cudasimCallCount("cudaFreeAsync"), 10);
    assert_int_equal(cudasimCallCount("cudaStreamCreate"), 1);
    assert_int_equal(cudasimCallCount(NULL), 21);
    assert_int_equal(cudasimCallCount("nope"), 0);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

typedef struct {
    cudaError_t seen;
} call_from_host_fn;

static void host_fn_calls_cuda(void *arg)
{
    void *p;
    ((call_from_host_fn *)arg)->seen = cudaMallocAsync(&p, 16, 0);
}

static void host_function_may_not_call_cuda(void **state)
{
    (void)state;
    call_from_host_fn c = {cudaSuccess};
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudaLaunchHostFunc(s, host_fn_calls_cuda, &c));
    CK(cudaStreamSynchronize(s));
    assert_int_equal(c.seen, cudaErrorNotPermitted);
    CK(cudaStreamDestroy(s));
}

static void several_devices_from_environment(void **state)
{
    (void)state;
    setenv("CUDASIM_DEVICE_COUNT", "3", 1);
    setenv("CUDASIM_DEVICE_MEMORY", "256M", 1);
    cudasimReset();
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    assert_int_equal(n, 3);
    CK(cudaSetDevice(2));
    size_t free_b, total;
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(total, 256 * MiB);
    cudaMemPool_t def2, def0;
    CK(cudaDeviceGetDefaultMemPool(&def2, 2));
    CK(cudaDeviceGetDefaultMemPool(&def0, 0));
    assert_ptr_not_equal(def0, def2);
    void *p;
    CK(cudaMallocAsync(&p, MiB, 0)); /* from device 2's pool */
    assert_true(pool_attr(def2, cudaMemPoolAttrUsedMemCurrent) == MiB);
    assert_true(pool_attr(def0, cudaMemPoolAttrUsedMemCurrent) == 0);
    CK(cudaFreeAsync(p, 0));
    CK(cudaDeviceSynchronize());
    unsetenv("CUDASIM_DEVICE_COUNT");
    unsetenv("CUDASIM_DEVICE_MEMORY");
}

/* Many threads on many streams: allocate, write, verify, free. Run under ThreadSanitizer. */
typedef struct {
    int seed;
    int failures;
} stress_arg;

static void *stress_thread(void *arg)
{
    stress_arg *a = arg;
    cudaStream_t s[3];
    for (int i = 0; i < 3; i++)
        if (cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking) != cudaSuccess)
            a->failures++;
    unsigned x = (unsigned)a->seed;
    for (int i = 0; i < 150; i++) {
        x = x * 1103515245u + 12345u;
        cudaStream_t st = s[x % 3];
        size_t n = 256 + (x >> 8) % 100000;
        void *p;
        if (cudaMallocAsync(&p, n, st) != cudaSuccess) {
            a->failures++;
            continue;
        }
        unsigned char byte = (unsigned char)(x >> 24);
        if (cudaMemsetAsync(p, byte, n, st) != cudaSuccess || !device_bytes_are(p, n, byte, st))
            a->failures++;
        if (cudaFreeAsync(p, st) != cudaSuccess)
            a->failures++;
    }
    for (int i = 0; i < 3; i++)
        if (cudaStreamSynchronize(s[i]) != cudaSuccess || cudaStreamDestroy(s[i]) != cudaSuccess)
            a->failures++;
    return NULL;
}

static void threads_on_many_streams(void **state)
{
    (void)state;
    pthread_t t[4];
    stress_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (stress_arg){.seed = i + 1};
        assert_int_equal(pthread_create(&t[i], NULL, stress_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    assert_int_equal(pool_attr(def, cudaMemPoolAttrUsedMemCurrent), 0);
}

/* The allocator's shared-lock path under contention: threads on their own non-blocking streams
 * allocate from one shared pool and from a pool of their own, fill every block with a canary
 * byte, read each back only after all of the round's blocks exist (another stream handed the
 * same memory would have overwritten it), and free. Each thread destroys its own pool while its
 * last round is outstanding (rule 7). Run under ThreadSanitizer. The figures at the end are
 * exact: call counts, used bytes, each private pool's high watermark, and the device's reserved
 * counter against the pools' sum. */
enum { POOL_THREADS = 4, POOL_ROUNDS = 24, POOL_BLOCKS = 6 };

typedef struct {
    int id;
    cudaMemPool_t shared, own;
    uint64_t own_reserved, own_used_high; /* read just before destroying it */
    size_t own_high;  /* the private pool's used peak, computed here */
    int failures;
} pool_stress_arg;

static void pool_stress_thread(void *arg, cudaStream_t s)
{
    pool_stress_arg *a = arg;
    unsigned x = 2654435761u * (unsigned)(a->id + 1);
    for (int r = 0; r < POOL_ROUNDS; r++) {
        void *p[POOL_BLOCKS];
        size_t n[POOL_BLOCKS], own_live = 0;
        for (int k = 0; k < POOL_BLOCKS; k++) {
            x = x * 1103515245u + 12345u;
            n[k] = 512 + (x >> 8) % (3 << 20); /* up to 3 MiB: pages get remapped and grown */
            cudaMemPool_t pool = k % 2 ? a->own : a->shared;
            if (cudaMallocFromPoolAsync(&p[k], n[k], pool, s) != cudaSuccess ||
                cudaMemsetAsync(p[k], (a->id << 5) | k, n[k], s) != cudaSuccess)
                a->failures++;
            if (k % 2)
                own_live += (n[k] + 511) / 512 * 512;
        }
        if (own_live > a->own_high)
            a->own_high = own_live;
        for (int k = 0; k < POOL_BLOCKS; k++)
            if (!device_bytes_are(p[k], n[k], (unsigned char)((a->id << 5) | k), s))
                a->failures++;
        if (r == POOL_ROUNDS - 1) { /* rule 7: destroy with allocations outstanding */
            if (cudaMemPoolGetAttribute(a->own, cudaMemPoolAttrReservedMemCurrent,
                                        &a->own_reserved) ||
                cudaMemPoolGetAttribute(a->own, cudaMemPoolAttrUsedMemHigh, &a->own_used_high) ||
                cudaMemPoolDestroy(a->own) != cudaSuccess)
                a->failures++;
        }
        for (int k = 0; k < POOL_BLOCKS; k++)
            if (cudaFreeAsync(p[k], s) != cudaSuccess)
                a->failures++;
    }
    if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess)
        a->failures++;
}

static void pools_under_threads_keep_canaries_and_exact_counts(void **state)
{
    (void)state;
    stream_thread t[POOL_THREADS];
    pool_stress_arg args[POOL_THREADS];
    cudaMemPool_t shared = new_pool(UINT64_MAX);
    for (int i = 0; i < POOL_THREADS; i++) {
        args[i] = (pool_stress_arg){.id = i, .shared = shared, .own = new_pool(UINT64_MAX)};
        assert_non_null(args[i].own);
    }
    cudasimResetCallCounts();
    for (int i = 0; i < POOL_THREADS; i++)
        stream_thread_start(&t[i], pool_stress_thread, &args[i]);
    for (int i = 0; i < POOL_THREADS; i++)
        stream_thread_join(&t[i]);
    for (int i = 0; i < POOL_THREADS; i++)
        assert_int_equal(args[i].failures, 0);
    assert_int_equal(cudasimCallCount("cudaMallocFromPoolAsync"),
                     POOL_THREADS * POOL_ROUNDS * POOL_BLOCKS);
    assert_int_equal(cudasimCallCount("cudaFreeAsync"), POOL_THREADS * POOL_ROUNDS * POOL_BLOCKS);
    assert_int_equal(pool_attr(shared, cudaMemPoolAttrUsedMemCurrent), 0);

    /* The destroyed pools went at their last free or at the threads' synchronize: the device
     * holds the shared pool's pages and nothing else. */
    CK(cudaDeviceSynchronize());
    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    uint64_t shared_reserved = pool_attr(shared, cudaMemPoolAttrReservedMemCurrent);
    assert_true(shared_reserved > 0);
    assert_int_equal(total - free_b, shared_reserved);
    for (int i = 0; i < POOL_THREADS; i++) {
        /* one stream's rounds, each freed before the next: the peak is the largest round */
        assert_int_equal(args[i].own_used_high, args[i].own_high);
        assert_true(args[i].own_reserved >= args[i].own_high);
        uint64_t v;
        assert_int_equal(cudaMemPoolGetAttribute(args[i].own, cudaMemPoolAttrUsedMemHigh, &v),
                         cudaErrorInvalidValue); /* gone */
        (void)cudaGetLastError();
    }
    CK(cudaMemPoolTrimTo(shared, 0));
    CK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(free_b, total);
    CK(cudaMemPoolDestroy(shared));
}

TEST_MAIN("cudasim",
    RESET(capacity_limits_allocation_and_mem_get_info),
    RESET(managed_memory_is_device_memory),
    RESET(pool_accounting_is_exact),
    RESET(rule11d_internal_dependency_when_device_full),
    CFX(frees_on_two_streams_do_not_merge),
    CFX(remap_grows_only_by_the_shortfall),
    CFX(remap_of_pending_free_counts_pages_once_and_keeps_old_data),
    RESET(remap_follows_opportunistic_reuse),
    CFX(trim_releases_whole_free_pages),
    CFX(cudafreeasync_of_cudamalloc_memory_returns_it),
    RESET(two_devices_are_not_peers),
    RESET(memcpy_refusals_and_peer_copies_without_peer_access),
    RESET(peer_access_grants_and_enforcement),
    RESET(ipc_in_one_process_refusals_sharing_and_accounting),
    RESET(ipc_under_threads),
    RESET(device_reset_destroys_the_context_state),
    RESET(illegal_address_is_sticky_and_reported_at_execution),
    RESET(copies_after_a_fault_do_not_run),
    RESET(fault_injection_nth_and_persistent),
    RESET(call_counters),
    RESET(host_function_may_not_call_cuda),
    RESET(several_devices_from_environment),
    RESET(threads_on_many_streams),
    RESET(pools_under_threads_keep_canaries_and_exact_counts)
)
