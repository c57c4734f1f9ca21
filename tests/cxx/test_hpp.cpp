// streampool.hpp: the CCCL concept (checked at compile time), the error category and exception,
// RAII of runtime, pool and device buffer (a buffer freed in its stream's order), and the
// memory resource's calls. Built with -std=c++17 -Wall -Wextra -pedantic -Werror by g++ and
// clang++ (tests/cxx/compilers.sh) and by the build's own C++ compiler. Prints TAP.
#include "streampool.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "tap.hpp"

static_assert(STREAMPOOL_HPP_HAS_CUDA_MR, "CCCL's <cuda/memory_resource> must be found");
#if STREAMPOOL_HPP_CCCL_STREAM_ORDERED // CCCL 3.1 and later
static_assert(cuda::mr::resource<streampool::memory_resource>, "a stream-ordered resource");
static_assert(cuda::mr::synchronous_resource<streampool::memory_resource>, "a synchronous one");
static_assert(cuda::mr::resource_with<streampool::memory_resource, cuda::mr::device_accessible>,
              "device accessible");
#else
static_assert(cuda::mr::async_resource<streampool::memory_resource>, "an async resource");
static_assert(cuda::mr::async_resource_with<streampool::memory_resource,
                                            cuda::mr::device_accessible>,
              "device accessible");
#endif
static_assert(!cuda::mr::resource_with<streampool::memory_resource, cuda::mr::host_accessible>,
              "pool memory is not host accessible");
static_assert(std::is_error_code_enum<streampool::status>::value, "status converts to error_code");
static_assert(std::is_base_of<std::system_error, streampool::error>::value, "a system_error");
static_assert(!std::is_copy_constructible<streampool::device_buffer>::value &&
                  std::is_nothrow_move_constructible<streampool::device_buffer>::value,
              "buffers move, never copy");
static_assert(!std::is_copy_constructible<streampool::pool>::value &&
                  !std::is_copy_constructible<streampool::runtime>::value,
              "runtimes and pools are owned once");

namespace {

// Expects `body` to throw streampool::error with `want`.
void expect_error(streampool::status want, const std::function<void()> &body, int line)
{
    bool thrown = false;
    try {
        body();
    } catch (const streampool::error &e) {
        thrown = e.code() == want && e.status() == static_cast<int>(want) &&
                 std::strstr(e.what(), sp_strerror(static_cast<int>(want))) != nullptr;
    }
    check(thrown, "throws the expected streampool::error", line);
}

void error_category_names_every_status()
{
    const std::error_code ec = streampool::status::LIMIT;
    CHECK(&ec.category() == &streampool::status_category());
    CHECK(std::strcmp(ec.category().name(), "streampool") == 0);
    CHECK(ec.message() == sp_strerror(SP_ERR_LIMIT));
    CHECK(ec == std::errc::not_enough_memory);
    CHECK(std::error_code(streampool::status::INVALID) == std::errc::invalid_argument);
    CHECK(std::error_code(streampool::status::NO_DEVICE) == std::errc::no_such_device);
    CHECK(std::error_code(streampool::status::BUSY) == std::errc::device_or_resource_busy);
    CHECK(static_cast<int>(streampool::status::CUDA) == SP_ERR_CUDA);
    CHECK(!std::error_code(streampool::status::OK));
}

void raii_and_exceptions(cudaStream_t s)
{
    // no such device: the exception keeps CUDA's own error
    bool no_device = false;
    try {
        streampool::runtime bad(4096);
    } catch (const std::system_error &e) {
        const auto *sp = dynamic_cast<const streampool::error *>(&e);
        no_device = sp && sp->status() == SP_ERR_NO_DEVICE &&
                    sp->cuda_error() == static_cast<int>(cudaErrorInvalidDevice);
    }
    CHECK(no_device);

    streampool::runtime rt(0);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 8 * MiB;
    {
        streampool::pool tenant(rt, "cxx-tenant", &cfg);
        expect_error(streampool::status::EXISTS, [&] { streampool::pool again(rt, "cxx-tenant"); },
                     __LINE__);
        CHECK(rt.find("cxx-tenant") == tenant);
        {
            streampool::device_buffer a(tenant, 3 * MiB, s);
            CHECK(a.data() != nullptr && a.size() == 3 * MiB && a.stream() == s);
            CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 256 == 0);
            CHECK(cudaMemsetAsync(a.data(), 7, a.size(), s) == cudaSuccess);
            CHECK(tenant.stats().requested.current == 3 * MiB);
            expect_error(streampool::status::LIMIT,
                         [&] { streampool::device_buffer over(tenant, 6 * MiB, s); }, __LINE__);
            streampool::device_buffer moved(std::move(a));
            CHECK(a.data() == nullptr && a.size() == 0);
            CHECK(moved.size() == 3 * MiB);
            std::vector<streampool::device_buffer> many;
            for (int i = 0; i < 4; i++)
                many.emplace_back(tenant, 1000 + std::size_t(i), s);
            CHECK(tenant.stats().allocs == 5);
        }
        sp_stats st = tenant.stats();
        CHECK(st.frees == 5); // exactly once each: the moved-from buffer freed nothing
        CHECK(st.requested.current == 0);
        CHECK(st.bad_frees == 0);
        CHECK(rt.metrics().find("pool=\"cxx-tenant\"") != std::string::npos);
    }
    // the pool went with its scope
    expect_error(streampool::status::NOT_FOUND, [&] { rt.find("cxx-tenant"); }, __LINE__);
    CHECK(rt.default_pool().stats().allocs == 0);
    rt.release_stream(s);
}

// A buffer's free is in its stream's order: the stream takes the block back at once, and the
// next user of it runs after the work enqueued before the free.
void buffer_freed_in_stream_order(cudaStream_t s)
{
    streampool::runtime rt(0);
    streampool::pool_ref p = rt.default_pool();
    gate g;
    void *first = nullptr;
    CHECK(cudaLaunchHostFunc(s, gate::wait, &g) == cudaSuccess);
    {
        streampool::device_buffer b(p, 2 * MiB, s);
        first = b.data();
        CHECK(cudaMemsetAsync(b.data(), 1, b.size(), s) == cudaSuccess); // still held back
    }
    streampool::device_buffer again(p, 2 * MiB, s);
    CHECK(again.data() == first);
    CHECK(p.stats().same_stream_hits == 1);
    g.release();
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(p.stats().requested.current == 2 * MiB);
    rt.release_stream(s);
}

void memory_resource_calls(cudaStream_t s)
{
    streampool::runtime rt(0);
    streampool::pool a(rt, "mr-a"), b(rt, "mr-b");
    streampool::memory_resource mr(a), same(a), other(b);
    CHECK(mr == same && mr != other);

    // through CCCL's type-erased reference, in the shape of the CCCL found
#if STREAMPOOL_HPP_CCCL_STREAM_ORDERED
    cuda::mr::resource_ref<cuda::mr::device_accessible> ref{mr};
    void *x = ref.allocate(cuda::stream_ref(s), 5 * MiB, 256);
#else
    cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{mr};
    void *x = ref.allocate_async(5 * MiB, 256, cuda::stream_ref(s));
#endif
    CHECK(x != nullptr);
    CHECK(a.stats().requested.current == 5 * MiB);
    CHECK(cudaMemsetAsync(x, 3, 5 * MiB, s) == cudaSuccess);
#if STREAMPOOL_HPP_CCCL_STREAM_ORDERED
    ref.deallocate(cuda::stream_ref(s), x, 5 * MiB, 256);
#else
    ref.deallocate_async(x, 5 * MiB, 256, cuda::stream_ref(s));
#endif
    CHECK(a.stats().frees == 1);

    // the stream-ordered and synchronous calls every CCCL version gets
    void *z = mr.allocate(cuda::stream_ref(s), 3000, 128);
    CHECK(z != nullptr && reinterpret_cast<std::uintptr_t>(z) % 256 == 0);
    same.deallocate(cuda::stream_ref(s), z, 3000, 128); // a copy frees what the other allocated
    void *y = mr.allocate_sync(4096, 64); // usable on any stream now
    CHECK(y != nullptr && reinterpret_cast<std::uintptr_t>(y) % 256 == 0);
    CHECK(cudaMemsetAsync(y, 0, 4096, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    mr.deallocate_sync(y, 4096, 64);
    CHECK(a.stats().allocs == 3 && a.stats().frees == 3 && b.stats().allocs == 0);
    CHECK(a.stats().requested.current == 0);

#if !STREAMPOOL_HPP_CCCL_STREAM_ORDERED
    void *w = mr.allocate(4096, 64); // CCCL 3.0's synchronous name
    CHECK(w != nullptr);
    mr.deallocate(w, 4096, 64);
    CHECK(a.stats().frees == 4);
#endif

    // alignments above 256, 0 or not a power of two: refused, nothing allocated
    const std::uint64_t allocs = a.stats().allocs;
    expect_error(streampool::status::INVALID, [&] { mr.allocate(cuda::stream_ref(s), 64, 512); },
                 __LINE__);
    expect_error(streampool::status::INVALID, [&] { mr.allocate(cuda::stream_ref(s), 64, 48); },
                 __LINE__);
    expect_error(streampool::status::INVALID, [&] { mr.allocate_sync(64, 0); }, __LINE__);
    CHECK(a.stats().allocs == allocs);
    int not_ours = 0;
    other.deallocate(cuda::stream_ref(s), &not_ours, sizeof not_ours); // refused, counted
    CHECK(b.stats().bad_frees == 1);
    release_both_streams(rt, s, __LINE__);
}

} // namespace

int main()
{
    std::printf("# CCCL %d.%d.%d: the %s resource\n", CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION,
                CCCL_PATCH_VERSION,
                STREAMPOOL_HPP_CCCL_STREAM_ORDERED ? "stream-ordered (3.1+)" : "async (3.0)");
    cudaStream_t s = nullptr;
    if (!tap_stream(&s))
        return 1;
    const tap_test tests[] = {
        {"error_category_names_every_status", error_category_names_every_status},
        {"raii_and_exceptions", [s] { raii_and_exceptions(s); }},
        {"buffer_freed_in_stream_order", [s] { buffer_freed_in_stream_order(s); }},
        {"memory_resource_calls", [s] { memory_resource_calls(s); }},
    };
    return tap_run(tests, s);
}
