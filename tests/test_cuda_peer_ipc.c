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

static const char *child_path; /* cuda_ipc_child, argv[1] */

static bool posix_fd_pools(int device)
{
    int types = 0;
    CK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, device));
    return (types & cudaMemHandleTypePosixFileDescriptor) != 0;
}

/* Runs the child: argv as given, the descriptors it must inherit left open (every other one of
 * ours is close-on-exec or closed by it); returns its exit status, or -1. */
static int run_child(char *const argv[], int keep_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        int flags = fcntl(keep_fd, F_GETFD);
        if (flags >= 0)
            fcntl(keep_fd, F_SETFD, flags & ~FD_CLOEXEC);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void send_export(int sock, int fd, const struct cudaMemPoolPtrExportData *data)
{
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = (void *)data, .iov_len = sizeof *data};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    assert_int_equal(sendmsg(sock, &msg, 0), (ssize_t)sizeof *data);
}

/* Export, fork+exec, import, read, write, free, then read back: a pool created with
 * cudaMemHandleTypePosixFileDescriptor, a block of it written here; its descriptor and the
 * block's 64 bytes go to a child process, once inherited across exec and once over a Unix
 * socket (SCM_RIGHTS). The child imports both, reads this process's bytes, writes its own,
 * frees its import and waits for that free; then this process reads the child's bytes, and
 * frees the block itself. */
static void ipc_export_fork_exec_import_read_write_free_read_back(void **state)
{
    (void)state;
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    int dev = n > 1 ? 1 : 0; /* a device other than the default one where there is one */
    if (!child_path || !posix_fd_pools(dev))
        skip();
    static unsigned char h[N], back[N];
    fill(h, N, 11);
    CK(cudaSetDevice(dev));
    cudaMemPool_t pool = pool_on(dev, cudaMemHandleTypePosixFileDescriptor);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p;
    CK(cudaMallocFromPoolAsync(&p, N, pool, s));
    CK(cudaMemcpyAsync(p, h, N, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s)); /* the allocation and the bytes are complete before export */

    int fd = -1;
    CK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    assert_true(fd >= 0);
    struct cudaMemPoolPtrExportData data;
    CK(cudaMemPoolExportPointer(&data, p));

    char fdstr[16], hex[2 * sizeof data.reserved + 1], devstr[8], nstr[24];
    snprintf(fdstr, sizeof fdstr, "%d", fd);
    snprintf(devstr, sizeof devstr, "%d", dev);
    snprintf(nstr, sizeof nstr, "%d", (int)N);
    for (size_t i = 0; i < sizeof data.reserved; i++)
        snprintf(hex + 2 * i, 3, "%02x", data.reserved[i]);
    char *by_exec[] = {(char *)child_path, "fd", fdstr, hex, devstr, nstr, "11", "165", NULL};
    assert_int_equal(run_child(by_exec, fd), 0);
    CK(cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost)); /* the child's bytes */
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 165);

    /* again over a Unix socket: the descriptor travels as SCM_RIGHTS */
    CK(cudaMemcpy(p, h, N, cudaMemcpyHostToDevice));
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    char sockstr[16];
    snprintf(sockstr, sizeof sockstr, "%d", sv[1]);
    send_export(sv[0], fd, &data);
    char *by_socket[] = {(char *)child_path, "sock", sockstr, devstr, nstr, "11", "90", NULL};
    assert_int_equal(run_child(by_socket, sv[1]), 0);
    close(sv[0]);
    close(sv[1]);
    CK(cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], 90);

    close(fd);
    CK(cudaFreeAsync(p, s)); /* after every importer's free completed */
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    CK(cudaMemPoolDestroy(pool));
    CK(cudaSetDevice(0));
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
    child_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(peer_grant_read_then_copy_between_peers, reset_all),
        cmocka_unit_test_teardown(ipc_export_fork_exec_import_read_write_free_read_back,
                                  reset_all),
    };
    return cmocka_run_group_tests_name("cuda_peer_ipc", tests, NULL, NULL);
}
