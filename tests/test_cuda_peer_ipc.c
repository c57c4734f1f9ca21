/* A probe of CUDA's own peer and IPC pool semantics, written against the Runtime API's
 * documentation and the Programming Guide's stream-ordered allocator chapter, so that it runs
 * on a GPU as on cudasim (CUDASIM_DEVICE_COUNT=2 CUDASIM_PEER_ACCESS=1, as tests/meson.build runs
 * it): grant a peer access to a pool, read from the peer, copy between peers; export a pool and
 * a block, fork+exec a helper that imports them, reads, writes and frees, then read back what it
 * wrote. Each case skips where the machine cannot do what it probes (one device, devices that
 * are not peers, no POSIX file descriptor handles). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/test_support.h"

enum { N = 1 << 16 };

static void fill(unsigned char *h, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 31u + seed);
}

static bool two_peers(void)
{
    int n = 0, can01 = 0, can10 = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
        return false;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    return can01 && can10;
}

static cudaMemPool_t pool_on(int device, enum cudaMemAllocationHandleType types)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = types;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = NULL;
    CK(cudaMemPoolCreate(&pool, &props));
    return pool;
}

/* Grant, then read from the peer, then copy between peers. A pool of device 0 is reachable
 * from device 1 only once cudaMemPoolSetAccess grants it (the Programming Guide: pool access
 * does not follow cudaDeviceEnablePeerAccess); cudaMemPoolGetAccess reports each grant.
 * cudaMemcpyPeerAsync and cudaMemcpyPeer copy device 0's block to device 1's and back. */
static void peer_grant_read_then_copy_between_peers(void **state)
{
    (void)state;
    if (!two_peers())
        skip();
    static unsigned char h[N], back[N];
    fill(h, N, 3);
    CK(cudaSetDevice(0));
    cudaMemPool_t pool = pool_on(0, cudaMemHandleTypeNone);
    struct cudaMemLocation dev1 = {.type = cudaMemLocationTypeDevice, .id = 1};
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtReadWrite;
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtNone); /* by default, its own device only */
    cudaStream_t s0, s1;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    void *p;
    CK(cudaMallocFromPoolAsync(&p, N, pool, s0));
    CK(cudaMemcpyAsync(p, h, N, cudaMemcpyHostToDevice, s0));
    CK(cudaStreamSynchronize(s0));

    struct cudaMemAccessDesc grant = {.location = dev1, .flags = cudaMemAccessFlagsProtRead};
    CK(cudaMemPoolSetAccess(pool, &grant, 1));
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtRead);
    grant.flags = cudaMemAccessFlagsProtReadWrite;
    CK(cudaMemPoolSetAccess(pool, &grant, 1));
    CK(cudaMemPoolGetAccess(&f, pool, &dev1));
    assert_int_equal(f, cudaMemAccessFlagsProtReadWrite);

    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    memset(back, 0, N);
    CK(cudaMemcpyAsync(back, p, N, cudaMemcpyDeviceToHost, s1)); /* read from the peer */
    CK(cudaStreamSynchronize(s1));
    assert_memory_equal(back, h, N);

    void *q;
    CK(cudaMallocAsync(&q, N, s1)); /* device 1's own pool */
    CK(cudaMemcpyPeerAsync(q, 1, p, 0, N, s1));
    memset(back, 0, N);
    CK(cudaMemcpyAsync(back, q, N, cudaMemcpyDeviceToHost, s1));
    CK(cudaStreamSynchronize(s1));
    assert_memory_equal(back, h, N);
    CK(cudaMemsetAsync(q, 0x6b, N, s1));
    CK(cudaStreamSynchronize(s1));
    CK(cudaSetDevice(0));
    CK(cudaMemcpyPeer(p, 0, q, 1, N));
    CK(cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 0x6b);

    /* peer access of the devices' own contexts: unidirectional, with CUDA's errors */
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
    assert_int_equal(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled);
    CK(cudaDeviceDisablePeerAccess(0));
    assert_int_equal(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    (void)cudaGetLastError();

    CK(cudaFreeAsync(q, s1));
    CK(cudaStreamSynchronize(s1));
    CK(cudaStreamDestroy(s1));
    CK(cudaSetDevice(0));
    CK(cudaFreeAsync(p, s0));
    CK(cudaStreamSynchronize(s0));
    CK(cudaStreamDestroy(s0));
    CK(cudaMemPoolDestroy(pool));
}

static int reset_all(void **state)
{
    (void)state;
    cudaSetDevice(1);
    cudaDeviceSynchronize();
    cudaSetDevice(0);
    cudaDeviceSynchronize();
#ifdef SP_CUDASIM
    cudasimReset();
#endif
    (void)cudaGetLastError();
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(peer_grant_read_then_copy_between_peers, reset_all),
    };
    return cmocka_run_group_tests_name("cuda_peer_ipc", tests, NULL, NULL);
}
