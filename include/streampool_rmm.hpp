// streampool_rmm.hpp: streampool::rmm_resource, a streampool pool as a RAPIDS (RMM 26) memory
// resource that fails the way RMM's own resources do.
//
//   streampool::rmm_resource mr(pool);
//   rmm::device_async_resource_ref ref{mr};
//   rmm::mr::set_current_device_resource(mr);
//
// It is streampool::memory_resource (streampool.hpp: the same calls, pool, alignment rules and
// equality) except for what a failing allocation throws. RAPIDS code tells an out-of-memory from
// other failures by its type: cuDF spills and retries on rmm::out_of_memory, and RMM's own
// resource tests expect it. So where memory_resource throws streampool::error, this throws
//   rmm::out_of_memory   for SP_ERR_OUT_OF_MEMORY, SP_ERR_LIMIT, SP_ERR_NEVER_FITS and
//                        SP_ERR_TOO_LARGE (RMM's CUDA resources throw it for any
//                        cudaErrorMemoryAllocation, however large the request);
//   rmm::invalid_argument for SP_ERR_INVALID (an alignment above 256, 0 or not a power of two);
//   rmm::bad_alloc       for any other status (SP_ERR_CUDA, SP_ERR_NO_HOST_MEMORY, ...),
// each with the streampool::error nested in it (std::rethrow_if_nested gives it back, with its
// status and CUDA error). rmm::bad_alloc's members are in librmm.so, so a program that includes
// this header links -lrmm (and librmm's rapids_logger). It needs CCCL 3.1 or later, as RMM 26 does.
#ifndef STREAMPOOL_RMM_HPP
#define STREAMPOOL_RMM_HPP

#include <rmm/error.hpp>
#include <rmm/resource_ref.hpp>

#include <exception>

#include "streampool.hpp"

#if !STREAMPOOL_HPP_HAS_CUDA_MR || !STREAMPOOL_HPP_CCCL_STREAM_ORDERED
#error "streampool_rmm.hpp needs streampool.hpp's resource on CCCL 3.1 or later"
#endif

namespace streampool {

class rmm_resource {
public:
    static constexpr std::size_t default_alignment = memory_resource::default_alignment;

    explicit rmm_resource(pool_ref from) noexcept : mr_(from) {}

    void *allocate(::cuda::stream_ref stream, std::size_t bytes,
                   std::size_t alignment = default_alignment)
    {
        try {
            return mr_.allocate(stream, bytes, alignment);
        } catch (const error &e) {
            rethrow_as_rmm(e);
        }
    }
    void deallocate(::cuda::stream_ref stream, void *p, std::size_t bytes,
                    std::size_t alignment = default_alignment) noexcept
    {
        mr_.deallocate(stream, p, bytes, alignment);
    }
    void *allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment)
    {
        try {
            return mr_.allocate_sync(bytes, alignment);
        } catch (const error &e) {
            rethrow_as_rmm(e);
        }
    }
    void deallocate_sync(void *p, std::size_t bytes,
                         std::size_t alignment = default_alignment) noexcept
    {
        mr_.deallocate_sync(p, bytes, alignment);
    }

    sp_pool *pool() const noexcept { return mr_.pool(); }
    // The same pool's streampool::memory_resource, which throws streampool::error.
    const memory_resource &resource() const noexcept { return mr_; }
    bool operator==(const rmm_resource &other) const noexcept { return mr_ == other.mr_; }
    bool operator!=(const rmm_resource &other) const noexcept { return mr_ != other.mr_; }
    friend void get_property(const rmm_resource &, ::cuda::mr::device_accessible) noexcept {}

private:
    // Called in the handler of `e`, which std::throw_with_nested nests in what it throws.
    [[noreturn]] static void rethrow_as_rmm(const error &e)
    {
        switch (e.status()) {
        case SP_ERR_OUT_OF_MEMORY:
        case SP_ERR_LIMIT:
        case SP_ERR_NEVER_FITS:
        case SP_ERR_TOO_LARGE:
            std::throw_with_nested(::rmm::out_of_memory(e.what()));
        case SP_ERR_INVALID:
            std::throw_with_nested(::rmm::invalid_argument(e.what()));
        default:
            std::throw_with_nested(::rmm::bad_alloc(e.what()));
        }
    }

    memory_resource mr_;
};

static_assert(::cuda::mr::resource_with<rmm_resource, ::cuda::mr::device_accessible>,
              "streampool::rmm_resource is a device-accessible CCCL resource");

} // namespace streampool

#endif // STREAMPOOL_RMM_HPP
