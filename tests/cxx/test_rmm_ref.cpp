// streampool::memory_resource through RAPIDS' own resource reference: RMM's
// rmm::device_async_resource_ref (cuda::mr::resource_ref<cuda::mr::device_accessible>) and
// rmm::device_resource_ref, CCCL's cuda::mr::any_resource, on the CCCL 3.5 that the librmm-cu13
// wheel carries; and streampool::rmm_resource's RMM exceptions. Built by tests/cxx/rmm.sh with
// g++ -std=c++20 against that wheel's headers, linked to its librmm.so (rmm::bad_alloc's
// members), and run on cudasim. Asserts the pool's exact figures after each call, the bytes that
// survive copies and memsets through memory from the ref, alignment, equality of copies, the
// exception types and the streampool::error nested in them. Prints TAP.
#include <rmm/aligned.hpp>
#include <rmm/error.hpp>
#include <rmm/resource_ref.hpp>
#include <streampool.hpp>
#include <streampool_rmm.hpp>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tap.hpp"

static_assert(CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION >= 5, "the CCCL of librmm 26.10");
static_assert(STREAMPOOL_HPP_HAS_CUDA_MR && STREAMPOOL_HPP_CCCL_STREAM_ORDERED,
              "streampool.hpp took CCCL 3.1+'s resource shape");
static_assert(cuda::mr::resource_with<streampool::memory_resource, cuda::mr::device_accessible>);
static_assert(cuda::mr::synchronous_resource_with<streampool::memory_resource,
                                                  cuda::mr::device_accessible>);
using pool_mr = streampool::memory_resource;
static_assert(std::is_constructible_v<rmm::device_async_resource_ref, pool_mr &>);
static_assert(std::is_constructible_v<rmm::device_resource_ref, pool_mr &>);
static_assert(!std::is_constructible_v<rmm::host_async_resource_ref, pool_mr &>,
              "pool memory is not host accessible");
static_assert(std::is_constructible_v<rmm::device_async_resource_ref, streampool::rmm_resource &>);

namespace {

bool aligned(const void *p, std::size_t to)
{
    return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

// What most tests here run on: a runtime on device 0, a pool of its own (its name given), a
// streampool::memory_resource on that pool and RAPIDS' async ref to the resource.
struct tenant_ref {
    streampool::runtime rt{0};
    streampool::pool tenant;
    streampool::memory_resource mr;
    rmm::device_async_resource_ref ref;
    explicit tenant_ref(const char *name) : tenant(rt, name), mr(tenant), ref{mr} {}
};

// Allocates and frees through rmm::device_async_resource_ref on a stream; the bytes written by a
// host-to-device copy, a device-to-device copy and a memset come back exactly; the pool counts
// each call and the exact bytes asked for.
void async_ref_round_trip(cudaStream_t s)
{
    tenant_ref f("rmm-tenant");
    auto &[rt, tenant, mr, ref] = f;
    cuda::stream_ref stream{s}; // RMM 26 deprecates rmm::cuda_stream_view for it

    const std::size_t n = 5 * MiB + 1000; // not a size class: requested counts it exactly
    void *a = ref.allocate(stream, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    void *b = ref.allocate(stream, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    CHECK(a != nullptr && b != nullptr && a != b);
    CHECK(aligned(a, 256) && aligned(b, 256));
    sp_stats st = tenant.stats();
    CHECK(st.allocs == 2 && st.frees == 0);
    CHECK(st.requested.current == 2 * n);

    std::vector<unsigned char> in(n), out(n, 0);
    for (std::size_t i = 0; i < n; i++)
        in[i] = static_cast<unsigned char>(i * 131 + 7);
    CHECK(cudaMemcpyAsync(a, in.data(), n, cudaMemcpyHostToDevice, s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    CHECK(cudaMemsetAsync(static_cast<unsigned char *>(b) + 100, 0xab, 50, s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(out.data(), b, n, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    for (std::size_t i = 100; i < 150; i++)
        in[i] = 0xab;
    CHECK(std::memcmp(in.data(), out.data(), n) == 0);

    ref.deallocate(stream, a, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    ref.deallocate(stream, b, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    st = tenant.stats();
    CHECK(st.allocs == 2 && st.frees == 2 && st.bad_frees == 0);
    CHECK(st.requested.current == 0 && st.requested.peak == 2 * n);
    CHECK(st.requested.total == 2 * n);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    rt.release_stream(s);
}

// A free through the ref is in the stream's order: the stream takes the block back at once,
// behind work still queued on it, and the memset queued before the free lands.
void ref_free_in_stream_order(cudaStream_t s)
{
    streampool::runtime rt(0);
    streampool::memory_resource mr(rt.default_pool());
    rmm::device_async_resource_ref ref{mr};
    gate g;
    CHECK(cudaLaunchHostFunc(s, gate::wait, &g) == cudaSuccess);
    void *first = ref.allocate(s, 2 * MiB, 256);
    CHECK(cudaMemsetAsync(first, 0x5a, 2 * MiB, s) == cudaSuccess); // held back by the gate
    ref.deallocate(s, first, 2 * MiB, 256);
    void *again = ref.allocate(s, 2 * MiB, 256);
    CHECK(again == first);
    CHECK(rt.default_pool().stats().same_stream_hits == 1);
    unsigned char probe[16] = {0};
    CHECK(cudaMemcpyAsync(probe, again, sizeof probe, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    g.release();
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(probe[0] == 0x5a && probe[15] == 0x5a);
    ref.deallocate(s, again, 2 * MiB, 256);
    CHECK(rt.default_pool().stats().requested.current == 0);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    rt.release_stream(s);
}

// allocate_sync through the ref and through rmm::device_resource_ref: the memory is ready for
// any stream when the call returns; deallocate_sync gives it back to the pool.
void sync_calls(cudaStream_t s)
{
    tenant_ref f("rmm-sync");
    auto &[rt, tenant, mr, ref] = f;
    rmm::device_resource_ref sync_ref{mr};

    void *p = ref.allocate_sync(4096, 256);
    void *q = sync_ref.allocate_sync(1 * MiB, 64);
    CHECK(p != nullptr && q != nullptr && aligned(q, 256));
    CHECK(tenant.stats().requested.current == 4096 + 1 * MiB);
    // a pageable source may be read when the stream runs the copy: one buffer each way
    unsigned char in[4096], out[4096] = {0};
    std::memset(in, 0x11, sizeof in);
    CHECK(cudaMemcpyAsync(p, in, sizeof in, cudaMemcpyHostToDevice, s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(q, p, sizeof in, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(out, q, sizeof out, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(std::memcmp(in, out, sizeof in) == 0);
    ref.deallocate_sync(p, 4096, 256);
    sync_ref.deallocate_sync(q, 1 * MiB, 64);
    sp_stats st = tenant.stats();
    CHECK(st.allocs == 2 && st.frees == 2 && st.requested.current == 0);
    CHECK(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
    rt.release_stream(s);
    rt.release_stream(cudaStreamPerThread);
}

// Every power of two up to 256 is honoured through the ref; 512, 0 and 48 throw
// streampool::error with status::INVALID through the ref and allocate nothing.
void alignment(cudaStream_t s)
{
    tenant_ref f("rmm-align");
    auto &[rt, tenant, mr, ref] = f;
    std::vector<void *> got;
    for (std::size_t a = 1; a <= 256; a *= 2) {
        void *p = ref.allocate(s, 24 + a, a);
        CHECK(p != nullptr && aligned(p, a) && aligned(p, 256));
        got.push_back(p);
    }
    CHECK(tenant.stats().allocs == 9);
    for (std::size_t i = 0; i < got.size(); i++)
        ref.deallocate(s, got[i], 24 + (std::size_t(1) << i), std::size_t(1) << i);
    for (std::size_t bad : {std::size_t(512), std::size_t(4096), std::size_t(0), std::size_t(48)}) {
        bool refused = false;
        try {
            (void)ref.allocate(s, 4096, bad);
        } catch (const streampool::error &e) {
            refused = e.code() == streampool::status::INVALID &&
                      e.code() == std::errc::invalid_argument;
        }
        CHECK(refused);
        bool refused_sync = false;
        try {
            (void)ref.allocate_sync(4096, bad);
        } catch (const std::system_error &e) {
            refused_sync = e.code() == streampool::status::INVALID;
        }
        CHECK(refused_sync);
    }
    sp_stats st = tenant.stats();
    CHECK(st.allocs == 9 && st.frees == 9 && st.requested.current == 0);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    rt.release_stream(s);
}

// Copies of a resource share its pool: they compare equal, and refs to them too; one frees what
// another allocated. A resource on another pool is not equal, and what it did not hand out it
// refuses (the pool counts a bad free) without throwing. cuda::mr::any_resource owns a copy.
void copies_share_one_pool(cudaStream_t s)
{
    streampool::runtime rt(0);
    streampool::pool a(rt, "rmm-a"), b(rt, "rmm-b");
    streampool::memory_resource mr(a), other(b);
    streampool::memory_resource copy = mr;
    CHECK(copy == mr && !(copy != mr) && mr != other);
    rmm::device_async_resource_ref ref{mr}, copy_ref{copy}, other_ref{other};
    CHECK(ref == copy_ref);
    CHECK(ref != other_ref);

    void *p = ref.allocate(s, 3 * MiB, 256);
    copy_ref.deallocate(s, p, 3 * MiB, 256);
    CHECK(a.stats().allocs == 1 && a.stats().frees == 1 && a.stats().requested.current == 0);

    void *q = ref.allocate(s, 1000, 256);
    other_ref.deallocate(s, q, 1000, 256); // not b's: refused, q still live in a
    CHECK(b.stats().bad_frees == 1 && b.stats().frees == 0);
    CHECK(a.stats().requested.current == 1000);
    ref.deallocate(s, q, 1000, 256);
    CHECK(a.stats().frees == 2 && a.stats().requested.current == 0);

    cuda::mr::any_resource<cuda::mr::device_accessible> owned{mr};
    void *r = owned.allocate(s, 7 * MiB, 128);
    CHECK(r != nullptr && a.stats().requested.current == 7 * MiB);
    rmm::device_async_resource_ref from_owned{owned};
    from_owned.deallocate(s, r, 7 * MiB, 128);
    CHECK(a.stats().allocs == 3 && a.stats().frees == 3 && a.stats().requested.current == 0);
    CHECK(b.stats().allocs == 0);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    rt.release_stream(s);
}

// The status of the streampool::error nested in `e` (0 if none).
int nested_status(const std::exception &e)
{
    try {
        std::rethrow_if_nested(e);
    } catch (const streampool::error &inner) {
        return inner.status();
    } catch (...) {
        return 0;
    }
    return 0;
}

// streampool::rmm_resource fails as RMM's resources do: rmm::out_of_memory (its what() saying
// "out_of_memory", as RMM's tests check) for a request too large for anything and for one over
// the pool's limit, rmm::invalid_argument for a bad alignment; the streampool::error nested in
// each names the status. What succeeds is what memory_resource does, on the same pool.
void rmm_resource_exceptions(cudaStream_t s)
{
    streampool::runtime rt(0);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 8 * MiB;
    streampool::pool tenant(rt, "rmm-limited", &cfg);
    streampool::rmm_resource mr(tenant);
    streampool::rmm_resource copy = mr;
    CHECK(copy == mr && mr.resource() == streampool::memory_resource(tenant));
    rmm::device_async_resource_ref ref{mr};

    const std::size_t PiB = std::size_t(1) << 50;
    const auto out_of_memory = [](const std::function<void()> &body) {
        try {
            body();
        } catch (const rmm::out_of_memory &e) {
            if (std::string(e.what()).find("out_of_memory") == std::string::npos)
                return -1;
            return nested_status(e);
        } catch (...) {
            return -2;
        }
        return -3;
    };
    CHECK(out_of_memory([&] { (void)ref.allocate(s, PiB, 256); }) == SP_ERR_TOO_LARGE);
    CHECK(out_of_memory([&] { (void)ref.allocate_sync(PiB, 256); }) == SP_ERR_TOO_LARGE);
    CHECK(out_of_memory([&] { (void)ref.allocate(s, 16 * MiB, 256); }) == SP_ERR_NEVER_FITS);
    void *p = ref.allocate(s, 6 * MiB, 256);
    CHECK(out_of_memory([&] { (void)ref.allocate(s, 4 * MiB, 256); }) == SP_ERR_LIMIT);
    CHECK(tenant.stats().requested.current == 6 * MiB);
    ref.deallocate(s, p, 6 * MiB, 256);

    int invalid = 0;
    try {
        (void)ref.allocate(s, 4096, 512);
    } catch (const rmm::invalid_argument &e) {
        invalid = nested_status(e);
    }
    CHECK(invalid == SP_ERR_INVALID);

    // RMM's own allocation test sizes: 0 (no memory, freed without a throw), 4 B, 1 KiB, 1 MiB
    void *zero = ref.allocate_sync(0, 256);
    ref.deallocate_sync(zero, 0, 256);
    for (std::size_t bytes : {std::size_t(4), std::size_t(1024), MiB}) {
        void *q = ref.allocate(s, bytes, rmm::CUDA_ALLOCATION_ALIGNMENT);
        CHECK(q != nullptr && aligned(q, rmm::CUDA_ALLOCATION_ALIGNMENT));
        ref.deallocate(s, q, bytes, rmm::CUDA_ALLOCATION_ALIGNMENT);
    }
    sp_stats st = tenant.stats();
    CHECK(st.allocs == 4 && st.frees == 4 && st.requested.current == 0);
    CHECK(st.limit_rejections == 2);
    release_both_streams(rt, s, __LINE__);
}

} // namespace

int main()
{
    std::printf("# CCCL %d.%d.%d, RMM %d.%d\n", CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION,
                CCCL_PATCH_VERSION, RMM_VERSION_MAJOR, RMM_VERSION_MINOR);
    cudaStream_t s = nullptr;
    if (!tap_stream(&s))
        return 1;
    const tap_test tests[] = {
        {"async_ref_round_trip", [s] { async_ref_round_trip(s); }},
        {"ref_free_in_stream_order", [s] { ref_free_in_stream_order(s); }},
        {"sync_calls", [s] { sync_calls(s); }},
        {"alignment", [s] { alignment(s); }},
        {"copies_share_one_pool", [s] { copies_share_one_pool(s); }},
        {"rmm_resource_exceptions", [s] { rmm_resource_exceptions(s); }},
    };
    return tap_run(tests, s);
}
