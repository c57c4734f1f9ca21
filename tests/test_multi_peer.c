/* The multi suite, devices (issue 28.2): a pool's grants to peer devices, at creation and later,
 * read-only or read-write; a peer reads and writes through them; a stream of a peer is handed a
 * block only with a read-write grant, whatever its own cache holds; the grants in the stats,
 * the JSON and the Prometheus text. Runs with two devices that are peers
 * (CUDASIM_DEVICE_COUNT=2 CUDASIM_PEER_ACCESS=1 on cudasim; any two peer GPUs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/sp_test_support.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* A stream of `device`, the current device put back after. */
static cudaStream_t stream_on(int device)
{
    int prev = 0;
    CK(cudaGetDevice(&prev));
    CK(cudaSetDevice(device));
    cudaStream_t s = new_stream();
    CK(cudaSetDevice(prev));
    return s;
}

static int setup_two(void **state)
{
    (void)state;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
        return -1; /* the suite's environment gives two: a failure, never a skip */
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can)
        return -1;
    return 0;
}

static sp_pool *pool_on_0(sp_runtime *rt, const char *name, uint64_t rw, uint64_t ro)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.peers_read_write = rw;
    cfg.peers_read = ro;
    return pool_with_config(rt, name, &cfg);
}

/* The end of a test with a stream on each device: both released (s1 destroyed as it is, on
 * device 1), then the pool and the runtime destroyed. */
static void end_on_both_devices(sp_runtime *rt, sp_pool *pool, cudaStream_t s0, cudaStream_t s1)
{
    drop_stream(rt, s0);
    SP(sp_stream_release(rt, s1));
    CK(cudaStreamDestroy(s1));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

static enum cudaMemAccessFlags driver_access(sp_pool *pool, int device)
{
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = device};
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    CK(cudaMemPoolGetAccess(&f, sp_pool_cuda_pool(pool), &loc));
    return f;
}

static char *metrics_of(sp_runtime *rt)
{
    char *text = NULL;
    SP(sp_runtime_metrics_prometheus_alloc(rt, &text));
    return text;
}

/* Granted at creation, then raised, lowered and revoked: the pool's record, the driver's, the
 * config, the stats, the JSON and the Prometheus text agree at every step. */
static void test_grants_at_creation_and_later(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool = pool_on_0(rt, "shard", 0, 1u << 1);
    sp_access a = SP_ACCESS_NONE;
    SP(sp_pool_get_access(pool, 1, &a));
    assert_int_equal(a, SP_ACCESS_READ);
    assert_int_equal(driver_access(pool, 1), cudaMemAccessFlagsProtRead);
    SP(sp_pool_get_access(pool, 0, &a));
    assert_int_equal(a, SP_ACCESS_READ_WRITE);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.version, 5);
    assert_int_equal(st.peers_read, 1);
    assert_int_equal(st.peers_read_write, 0);
    char json[4096];
    sp_stats_json(&st, json, sizeof json);
    assert_non_null(strstr(json, "\"peers_read_write\":0,\"peers_read\":1"));

    SP(sp_pool_set_access(pool, 1, SP_ACCESS_READ_WRITE));
    assert_int_equal(driver_access(pool, 1), cudaMemAccessFlagsProtReadWrite);
    sp_pool_config cfg = {.size = sizeof cfg};
    SP(sp_pool_get_config(pool, &cfg));
    assert_int_equal(cfg.peers_read_write, 1u << 1);
    assert_int_equal(cfg.peers_read, 0);
    st = stats_of(pool);
    assert_int_equal(st.peers_read_write, 1);
    assert_int_equal(st.peers_read, 0);
    char *text = metrics_of(rt);
    assert_non_null(strstr(text, "streampool_peers_read_write{device=\"0\",pool=\"shard\"} 1\n"));
    assert_non_null(strstr(text, "streampool_peers_read{device=\"0\",pool=\"shard\"} 0\n"));
    sp_text_free(text);

    SP(sp_pool_set_access(pool, 1, SP_ACCESS_NONE));
    assert_int_equal(driver_access(pool, 1), cudaMemAccessFlagsProtNone);
    SP(sp_pool_get_access(pool, 1, &a));
    assert_int_equal(a, SP_ACCESS_NONE);
    st = stats_of(pool);
    assert_int_equal(st.peers_read_write + st.peers_read, 0);
    /* the runtime's figures count grants over its pools */
    sp_pool *other = pool_on_0(rt, "other", 1u << 1, 0);
    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(rt, &rst));
    assert_int_equal(rst.peers_read_write, 1);
    SP(sp_pool_destroy(other));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

/* What a grant refuses: the owner's own access, an unknown device, an access value that is not
 * one; nothing changes. An older, shorter sp_pool_config gets no grant. */
static void test_grant_errors(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool = pool_on_0(rt, "shard", 0, 0);
    assert_int_equal(sp_pool_set_access(pool, 0, SP_ACCESS_READ), SP_ERR_INVALID);
    assert_int_equal(sp_pool_set_access(pool, 0, SP_ACCESS_NONE), SP_ERR_INVALID);
    SP(sp_pool_set_access(pool, 0, SP_ACCESS_READ_WRITE));
    assert_int_equal(sp_pool_set_access(pool, 2, SP_ACCESS_READ), SP_ERR_NO_DEVICE);
    assert_int_equal(sp_last_cuda_error(), cudaErrorInvalidDevice);
    assert_int_equal(sp_pool_set_access(pool, -1, SP_ACCESS_READ), SP_ERR_NO_DEVICE);
    assert_int_equal(sp_pool_set_access(pool, 1, (sp_access)2), SP_ERR_INVALID);
    assert_int_equal(sp_pool_set_access(NULL, 1, SP_ACCESS_READ), SP_ERR_INVALID);
    sp_access a = SP_ACCESS_READ;
    assert_int_equal(sp_pool_get_access(pool, 2, &a), SP_ERR_NO_DEVICE);
    SP(sp_pool_get_access(pool, 1, &a));
    assert_int_equal(a, SP_ACCESS_NONE);
    assert_int_equal(driver_access(pool, 1), cudaMemAccessFlagsProtNone);
    /* a creation that asks a grant for no device makes no pool */
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.peers_read = 1u << 5;
    sp_pool *bad = NULL;
    assert_int_equal(sp_pool_create(rt, "bad", &cfg, &bad), SP_ERR_NO_DEVICE);
    assert_null(bad);
    assert_int_equal(sp_pool_find(rt, "bad", &bad), SP_ERR_NOT_FOUND);
    /* built against the header before the grants: its struct ends at `priority` */
    cfg = (sp_pool_config)SP_POOL_CONFIG_INIT;
    cfg.peers_read_write = 1u << 1; /* past the size given: never read */
    cfg.size = offsetof(sp_pool_config, peers_read_write);
    sp_pool *old = NULL;
    SP(sp_pool_create(rt, "old", &cfg, &old));
    SP(sp_pool_get_access(old, 1, &a));
    assert_int_equal(a, SP_ACCESS_NONE);
    SP(sp_pool_destroy(old));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

/* A block allocated and filled on device 0 is read by a stream of device 1 through a read
 * grant, and written by it through a read-write grant: the bytes arrive, no fault. */
static void test_peer_reads_and_writes(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool = pool_on_0(rt, "shard", 0, 1u << 1);
    cudaStream_t s0 = stream_on(0), s1 = stream_on(1);
    void *p = NULL;
    SP(sp_alloc(pool, &p, 64 * KIB, s0));
    CK(cudaMemsetAsync(p, 0x5a, 64 * KIB, s0));
    CK(cudaStreamSynchronize(s0));
    unsigned char *host = malloc(64 * KIB);
    assert_non_null(host);
    CK(cudaSetDevice(1));
    CK(cudaMemcpyAsync(host, p, 64 * KIB, cudaMemcpyDeviceToHost, s1));
    CK(cudaStreamSynchronize(s1));
    for (size_t i = 0; i < 64 * KIB; i++)
        assert_int_equal(host[i], 0x5a);
    SP(sp_pool_set_access(pool, 1, SP_ACCESS_READ_WRITE));
    CK(cudaMemsetAsync(p, 0x33, 64 * KIB, s1));
    CK(cudaStreamSynchronize(s1));
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(host, p, 64 * KIB, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 64 * KIB; i++)
        assert_int_equal(host[i], 0x33);
    free(host);
    SP(sp_free(pool, p, s0));
    end_on_both_devices(rt, pool, s0, s1);
}

/* A stream of device 1 allocating from a pool of device 0: refused without a read-write grant
 * (none, then read-only), served with it (the block writable there, and its own free reused at
 * once), and refused again at once after the grant is lowered, although its cache held the
 * block: the revoke released that cache, whose block serves the pool's own streams. */
static void test_peer_stream_allocations(void **state)
{
    (void)state;
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.stats_flush_bytes = 0;
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *pool = pool_on_0(rt, "shard", 0, 0);
    cudaStream_t s1 = stream_on(1);
    void *p = (void *)0x1;
    assert_int_equal(sp_alloc(pool, &p, 4 * KIB, s1), SP_ERR_NO_ACCESS);
    assert_int_equal(sp_alloc(pool, &p, 4 * MIB, s1), SP_ERR_NO_ACCESS);
    assert_ptr_equal(p, (void *)0x1);
    SP(sp_pool_set_access(pool, 1, SP_ACCESS_READ));
    assert_int_equal(sp_alloc(pool, &p, 4 * KIB, s1), SP_ERR_NO_ACCESS);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.allocs, 0);
    assert_int_equal(st.held.current, 0);

    SP(sp_pool_set_access(pool, 1, SP_ACCESS_READ_WRITE));
    SP(sp_alloc(pool, &p, 4 * KIB, s1));
    CK(cudaSetDevice(1));
    CK(cudaMemsetAsync(p, 0x11, 4 * KIB, s1));
    CK(cudaStreamSynchronize(s1));
    CK(cudaSetDevice(0));
    SP(sp_free(pool, p, s1));
    void *again = NULL;
    SP(sp_alloc(pool, &again, 4 * KIB, s1));
    assert_ptr_equal(again, p); /* its own cache, at once */
    st = stats_of(pool);
    assert_int_equal(st.same_stream_hits, 1);
    SP(sp_free(pool, again, s1));
    CK(cudaStreamSynchronize(s1));
    uint64_t released_before = stats_of(pool).released_streams;

    SP(sp_pool_set_access(pool, 1, SP_ACCESS_READ));
    assert_int_equal(stats_of(pool).released_streams, released_before + 1);
    void *none = (void *)0x2;
    assert_int_equal(sp_alloc(pool, &none, 4 * KIB, s1), SP_ERR_NO_ACCESS);
    assert_ptr_equal(none, (void *)0x2);
    /* the peer's freed block serves device 0 */
    cudaStream_t s0 = stream_on(0);
    void *q = NULL;
    SP(sp_alloc(pool, &q, 4 * KIB, s0));
    assert_ptr_equal(q, p);
    st = stats_of(pool);
    assert_int_equal(st.active.current, sp_size_class(4 * KIB));
    SP(sp_free(pool, q, s0));
    end_on_both_devices(rt, pool, s0, s1);
}

/* cudaStreamGetDevice, which the check asks: a stream's own device, and for the NULL and
 * per-thread handles the current device's. */
static void test_stream_device(void **state)
{
    (void)state;
    cudaStream_t s1 = stream_on(1), s0 = stream_on(0);
    int d = -1;
    CK(cudaStreamGetDevice(s1, &d));
    assert_int_equal(d, 1);
    CK(cudaStreamGetDevice(s0, &d));
    assert_int_equal(d, 0);
    CK(cudaSetDevice(1));
    CK(cudaStreamGetDevice(NULL, &d));
    assert_int_equal(d, 1);
    CK(cudaStreamGetDevice(cudaStreamPerThread, &d));
    assert_int_equal(d, 1);
    CK(cudaSetDevice(0));
    CK(cudaStreamGetDevice(cudaStreamLegacy, &d));
    assert_int_equal(d, 0);
    assert_int_equal(cudaStreamGetDevice(s0, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CK(cudaStreamDestroy(s0));
    CK(cudaStreamDestroy(s1));
}

/* The pool's own device pays nothing for the peers: streams of device 0, the NULL and the
 * per-thread streams allocate as before, with no grant anywhere. */
static void test_own_streams_unaffected(void **state)
{
    (void)state;
    sp_runtime *rt = track_runtime(0, NULL);
    sp_pool *pool = pool_on_0(rt, "own", 0, 0);
    void *a = NULL, *b = NULL, *c = NULL;
    cudaStream_t s0 = stream_on(0);
    SP(sp_alloc(pool, &a, 256, s0));
    SP(sp_alloc(pool, &b, 3 * MIB, NULL));
    SP(sp_alloc(pool, &c, 512, cudaStreamPerThread));
    SP(sp_free(pool, a, s0));
    SP(sp_free(pool, b, NULL));
    SP(sp_free(pool, c, cudaStreamPerThread));
    CK(cudaDeviceSynchronize());
    drop_stream(rt, s0);
    SP(sp_stream_release(rt, cudaStreamPerThread));
    SP(sp_stream_release(rt, NULL));
    SP(sp_pool_destroy(pool));
    destroy_runtime(rt);
}

static int teardown_two(void **state)
{
    (void)state;
    int busy = destroy_tracked_runtimes();
    (void)cudaSetDevice(0);
    reset_device(NULL);
    return busy ? -1 : 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_grants_at_creation_and_later, teardown_two),
        cmocka_unit_test_teardown(test_grant_errors, teardown_two),
        cmocka_unit_test_teardown(test_peer_reads_and_writes, teardown_two),
        cmocka_unit_test_teardown(test_peer_stream_allocations, teardown_two),
        cmocka_unit_test_teardown(test_own_streams_unaffected, teardown_two),
        cmocka_unit_test_teardown(test_stream_device, teardown_two),
    };
    return cmocka_run_group_tests(tests, setup_two, NULL);
}
