// streampool.hpp: C++17 handles for streampool, header-only, on the C API of streampool.h.
//
//   streampool::runtime rt(0);                          // sp_runtime_create / _destroy
//   streampool::pool llama(rt, "llama", &cfg);          // sp_pool_create / _destroy
//   streampool::device_buffer kv(llama, bytes, stream); // sp_alloc; freed on `stream`, in order
//   streampool::memory_resource mr(llama);              // a CCCL cuda::mr resource
//
// A failing call throws streampool::error, a std::system_error whose code() is in
// streampool::status_category() (the SP_ERR_* statuses) and which keeps the CUDA error
// behind it. Destructors never throw: a runtime or pool that cannot be destroyed because
// allocations are still live is left as it is (its memory is never freed under them).
//
// The resource needs CCCL's <cuda/memory_resource> (CUDA 12.x: the toolkit's include directory;
// CUDA 13: its include/cccl; RAPIDS: the librmm wheel's include/rapids). It takes the interface
// of the CCCL it finds (CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION from <cuda/std/version>):
// CCCL 3.1 and later, the stream-ordered resource that rmm::device_async_resource_ref binds to;
// before 3.1 (CUDA 13.0's CCCL 3.0), the experimental async resource. CCCL before 3.2 hides its
// resource_ref behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE, which this header then
// defines itself: with those, include it before any CCCL header, or define that macro for the
// whole build.
// STREAMPOOL_HPP_HAS_CUDA_MR says whether the resource is there; define STREAMPOOL_HPP_NO_CUDA_MR
// to leave it out. Everything else is plain C++17 on streampool.h.
#ifndef STREAMPOOL_HPP
#define STREAMPOOL_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "streampool.h"

#if !defined(STREAMPOOL_HPP_NO_CUDA_MR) && defined(__has_include)
#if __has_include(<cuda/memory_resource>) && __has_include(<cuda/std/version>)
#include <cuda/std/version> // CCCL's version macros, without any of its memory resource
// CCCL 3.1 renamed the resource's calls: allocate(stream, bytes, alignment) is stream-ordered,
// allocate_sync(bytes, alignment) is not (before: allocate_async and allocate).
#if defined(CCCL_MAJOR_VERSION) &&                                                                \
    (CCCL_MAJOR_VERSION > 3 || (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION >= 1))
#define STREAMPOOL_HPP_CCCL_STREAM_ORDERED 1
#else
#define STREAMPOOL_HPP_CCCL_STREAM_ORDERED 0
#endif
// From CCCL 3.2 on, nothing of the resource is experimental (and the macro is not read).
#if !defined(CCCL_MAJOR_VERSION) || CCCL_MAJOR_VERSION < 3 ||                                    \
    (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION < 2)
#if !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#if defined(_CUDA__MEMORY_RESOURCE_RESOURCE_H)
// CCCL is already in without its experimental interface: the resource's concepts are missing.
#error "include streampool.hpp before <cuda/memory_resource>, or define \
LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE for the whole build"
#endif
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#define STREAMPOOL_HPP_HAS_CUDA_MR 1
#endif
#endif
#ifndef STREAMPOOL_HPP_HAS_CUDA_MR
#define STREAMPOOL_HPP_HAS_CUDA_MR 0
#endif
#ifndef STREAMPOOL_HPP_CCCL_STREAM_ORDERED
#define STREAMPOOL_HPP_CCCL_STREAM_ORDERED 0
#endif

namespace streampool {

// ---- errors ----

// The SP_ERR_* statuses, by the names streampool.h gives them: status::LIMIT is SP_ERR_LIMIT.
enum class status : int {
#define STREAMPOOL_HPP_STATUS(name, value, text) name = (value),
    SP_STATUS_MAP(STREAMPOOL_HPP_STATUS)
#undef STREAMPOOL_HPP_STATUS
};

class status_category_t final : public std::error_category {
public:
    const char *name() const noexcept override { return "streampool"; }
    std::string message(int value) const override { return sp_strerror(value); }
    // The portable condition a status means, so that callers can test for std::errc values.
    std::error_condition default_error_condition(int value) const noexcept override
    {
        switch (value) {
        case SP_ERR_INVALID:
        case SP_ERR_CONFIG:
            return std::errc::invalid_argument;
        case SP_ERR_TOO_LARGE:
            return std::errc::value_too_large;
        case SP_ERR_OUT_OF_MEMORY:
        case SP_ERR_LIMIT:
        case SP_ERR_NEVER_FITS:
        case SP_ERR_NO_HOST_MEMORY:
            return std::errc::not_enough_memory;
        case SP_ERR_BAD_POINTER:
        case SP_ERR_DOUBLE_FREE:
        case SP_ERR_WRONG_POOL:
            return std::errc::bad_address;
        case SP_ERR_EXISTS:
            return std::errc::file_exists;
        case SP_ERR_NOT_FOUND:
            return std::errc::no_such_file_or_directory;
        case SP_ERR_BUSY:
            return std::errc::device_or_resource_busy;
        case SP_ERR_NOT_SUPPORTED:
            return std::errc::not_supported;
        case SP_ERR_NO_DEVICE:
            return std::errc::no_such_device;
        case SP_ERR_IO:
            return std::errc::io_error;
        default:
            return std::error_condition(value, *this);
        }
    }
};

inline const std::error_category &status_category() noexcept
{
    static const status_category_t category;
    return category;
}

inline std::error_code make_error_code(status s) noexcept
{
    return std::error_code(static_cast<int>(s), status_category());
}

// What every failing call throws. cuda_error(): sp_last_cuda_error() when it was thrown, the
// cudaError_t behind an SP_ERR_CUDA, SP_ERR_OUT_OF_MEMORY, SP_ERR_NOT_SUPPORTED or
// SP_ERR_NO_DEVICE (0 if none).
class error : public std::system_error {
public:
    error(int status, const char *what)
        : std::system_error(status, status_category(), what), cuda_error_(sp_last_cuda_error())
    {
    }
    int status() const noexcept { return code().value(); }
    int cuda_error() const noexcept { return cuda_error_; }

private:
    int cuda_error_;
};

// Throws streampool::error for any status but SP_OK.
inline void check(int rc, const char *what)
{
    if (rc != SP_OK)
        throw error(rc, what);
}

// ---- runtime and pools ----

inline sp_stats stats_of(sp_pool *p)
{
    sp_stats st{};
    st.size = sizeof st;
    check(sp_pool_stats(p, &st), "sp_pool_stats");
    return st;
}

// A pool the caller does not own: a runtime's default pool, one found by name, or a view of a
// streampool::pool. Compares equal to another view of the same pool.
class pool_ref {
public:
    explicit pool_ref(sp_pool *p) : pool_(p)
    {
        if (!p)
            throw error(SP_ERR_INVALID, "streampool::pool_ref: null pool");
    }
    sp_pool *get() const noexcept { return pool_; }
    const char *name() const noexcept { return sp_pool_name(pool_); }
    sp_stats stats() const { return stats_of(pool_); }
    void trim(std::size_t keep_bytes = 0) const
    {
        check(sp_pool_trim(pool_, keep_bytes), "sp_pool_trim");
    }
    // Raw stream-ordered calls (device_buffer and memory_resource are the RAII forms).
    void *allocate(std::size_t bytes, cudaStream_t stream) const
    {
        void *p = nullptr;
        check(sp_alloc(pool_, &p, bytes, stream), "sp_alloc");
        return p;
    }
    void deallocate(void *p, cudaStream_t stream) const
    {
        check(sp_free(pool_, p, stream), "sp_free");
    }
    friend bool operator==(const pool_ref &a, const pool_ref &b) noexcept
    {
        return a.pool_ == b.pool_;
    }
    friend bool operator!=(const pool_ref &a, const pool_ref &b) noexcept { return !(a == b); }

protected:
    pool_ref() noexcept = default;
    sp_pool *pool_ = nullptr;
};

// One device's streampool runtime, destroyed with its pools when it goes out of scope.
class runtime {
public:
    explicit runtime(int device = 0, const sp_runtime_config *cfg = nullptr)
    {
        check(sp_runtime_create(device, cfg, &rt_), "sp_runtime_create");
    }
    ~runtime()
    {
        if (rt_)
            (void)sp_runtime_destroy(rt_); // SP_ERR_BUSY: live allocations keep it alive
    }
    runtime(const runtime &) = delete;
    runtime &operator=(const runtime &) = delete;
    runtime(runtime &&other) noexcept : rt_(std::exchange(other.rt_, nullptr)) {}
    runtime &operator=(runtime &&other) noexcept
    {
        if (this != &other) {
            if (rt_)
                (void)sp_runtime_destroy(rt_);
            rt_ = std::exchange(other.rt_, nullptr);
        }
        return *this;
    }

    sp_runtime *get() const noexcept { return rt_; }
    pool_ref default_pool() const
    {
        sp_pool *p = nullptr;
        check(sp_runtime_default_pool(rt_, &p), "sp_runtime_default_pool");
        return pool_ref(p);
    }
    pool_ref find(const char *name) const
    {
        sp_pool *p = nullptr;
        check(sp_pool_find(rt_, name, &p), "sp_pool_find");
        return pool_ref(p);
    }
    // Before cudaStreamDestroy(stream).
    void release_stream(cudaStream_t stream) const
    {
        check(sp_stream_release(rt_, stream), "sp_stream_release");
    }
    sp_stats stats() const
    {
        sp_stats st{};
        st.size = sizeof st;
        check(sp_runtime_stats(rt_, &st), "sp_runtime_stats");
        return st;
    }
    // Every pool's figures in the Prometheus text format.
    std::string metrics() const
    {
        std::size_t needed = 0;
        check(sp_runtime_metrics_prometheus(rt_, nullptr, 0, &needed),
              "sp_runtime_metrics_prometheus");
        std::string text(needed + 1, '\0');
        check(sp_runtime_metrics_prometheus(rt_, &text[0], text.size(), &needed),
              "sp_runtime_metrics_prometheus");
        text.resize(needed < text.size() ? needed : text.size() - 1);
        return text;
    }

private:
    sp_runtime *rt_ = nullptr;
};

// A named pool of a runtime, destroyed when it goes out of scope (after every buffer from it).
class pool : public pool_ref {
public:
    pool(const runtime &rt, const char *name, const sp_pool_config *cfg = nullptr)
    {
        check(sp_pool_create(rt.get(), name, cfg, &pool_), "sp_pool_create");
    }
    ~pool()
    {
        if (pool_)
            (void)sp_pool_destroy(pool_); // SP_ERR_BUSY: live allocations keep it alive
    }
    pool(const pool &) = delete;
    pool &operator=(const pool &) = delete;
    pool(pool &&other) noexcept { pool_ = std::exchange(other.pool_, nullptr); }
    pool &operator=(pool &&other) noexcept
    {
        if (this != &other) {
            if (pool_)
                (void)sp_pool_destroy(pool_);
            pool_ = std::exchange(other.pool_, nullptr);
        }
        return *this;
    }
};

// ---- device memory ----

// `size` bytes of device memory from a pool, usable on `stream` in stream order, and freed on
// that stream, in its order, when the buffer goes out of scope: work already enqueued on the
// stream may still use it then. Move-only; a moved-from buffer is empty.
class device_buffer {
public:
    device_buffer(pool_ref from, std::size_t size, cudaStream_t stream)
        : pool_(from.get()), size_(size), stream_(stream)
    {
        check(sp_alloc(pool_, &data_, size, stream), "sp_alloc");
    }
    ~device_buffer() { release(); }
    device_buffer(const device_buffer &) = delete;
    device_buffer &operator=(const device_buffer &) = delete;
    device_buffer(device_buffer &&other) noexcept
        : pool_(other.pool_), data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)), stream_(other.stream_)
    {
    }
    device_buffer &operator=(device_buffer &&other) noexcept
    {
        if (this != &other) {
            release();
            pool_ = other.pool_;
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
            stream_ = other.stream_;
        }
        return *this;
    }

    void *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    cudaStream_t stream() const noexcept { return stream_; }
    sp_pool *pool() const noexcept { return pool_; }

private:
    void release() noexcept
    {
        if (data_)
            (void)sp_free(pool_, data_, stream_); // a pointer it allocated: cannot be refused
        data_ = nullptr;
        size_ = 0;
    }

    sp_pool *pool_ = nullptr;
    void *data_ = nullptr;
    std::size_t size_ = 0;
    cudaStream_t stream_ = nullptr;
};

#if STREAMPOOL_HPP_HAS_CUDA_MR
// A pool as a CCCL memory resource. It is device accessible (get_property with
// cuda::mr::device_accessible), and two resources are equal when they draw from the same pool,
// so copies share one pool and free each other's memory.
//
// With CCCL 3.1 and later, cuda::mr::resource_with<memory_resource, cuda::mr::device_accessible>
// holds, so it goes wherever CCCL and RAPIDS take a cuda::mr::resource_ref (RMM's
// rmm::device_async_resource_ref) or a cuda::mr::any_resource:
//   allocate(stream, bytes, alignment) / deallocate(stream, p, bytes, alignment): sp_alloc and
//     sp_free on the stream, in its order;
//   allocate_sync(bytes, alignment): sp_alloc on the calling thread's per-thread stream, then a
//     wait for that stream, so the memory is usable on any stream at once (as CCCL's own pools
//     do); deallocate_sync(p, bytes, alignment): sp_free there, the caller guaranteeing that no
//     work still uses the memory.
// With CCCL before 3.1, cuda::mr::async_resource_with<memory_resource,
// cuda::mr::device_accessible> holds instead: allocate_async(bytes, alignment, stream) and
// deallocate_async are the stream-ordered calls, allocate(bytes, alignment) and deallocate the
// synchronous ones. allocate(stream, ...) and allocate_sync are there with every CCCL.
//
// Alignment: streampool's blocks are aligned to 256 bytes (cudaMalloc's), so any power of two up
// to 256 is honoured. A larger one, 0 or one that is not a power of two throws streampool::error
// with status::INVALID (std::errc::invalid_argument) and allocates nothing, as CCCL's own memory
// pools refuse alignments above 256 (with std::invalid_argument). deallocate never throws: a
// pointer this resource did not hand out is refused by streampool (counted in the pool's
// bad_frees), never freed; bytes and alignment are not needed to free.
class memory_resource {
public:
    static constexpr std::size_t default_alignment = 256;

    explicit memory_resource(pool_ref from) noexcept : pool_(from.get()) {}

    void *allocate(::cuda::stream_ref stream, std::size_t bytes,
                   std::size_t alignment = default_alignment)
    {
        check_alignment(alignment);
        void *p = nullptr;
        check(sp_alloc(pool_, &p, bytes, stream.get()), "sp_alloc");
        return p;
    }
    void deallocate(::cuda::stream_ref stream, void *p, std::size_t,
                    std::size_t = default_alignment) noexcept
    {
        (void)sp_free(pool_, p, stream.get());
    }
    void *allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment)
    {
        void *p = allocate(::cuda::stream_ref(cudaStreamPerThread), bytes, alignment);
        cudaError_t err = cudaStreamSynchronize(cudaStreamPerThread);
        if (err != cudaSuccess) {
            (void)sp_free(pool_, p, cudaStreamPerThread);
            throw std::system_error(static_cast<int>(err), std::generic_category(),
                                    "cudaStreamSynchronize");
        }
        return p;
    }
    void deallocate_sync(void *p, std::size_t bytes,
                         std::size_t alignment = default_alignment) noexcept
    {
        deallocate(::cuda::stream_ref(cudaStreamPerThread), p, bytes, alignment);
    }

#if !STREAMPOOL_HPP_CCCL_STREAM_ORDERED
    // CCCL before 3.1: its synchronous calls are allocate/deallocate, its stream-ordered ones
    // allocate_async/deallocate_async with the stream last.
    void *allocate(std::size_t bytes, std::size_t alignment = default_alignment)
    {
        return allocate_sync(bytes, alignment);
    }
    void deallocate(void *p, std::size_t bytes,
                    std::size_t alignment = default_alignment) noexcept
    {
        deallocate_sync(p, bytes, alignment);
    }
    void *allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream)
    {
        return allocate(stream, bytes, alignment);
    }
    void *allocate_async(std::size_t bytes, ::cuda::stream_ref stream)
    {
        return allocate(stream, bytes, default_alignment);
    }
    void deallocate_async(void *p, std::size_t bytes, std::size_t alignment,
                          ::cuda::stream_ref stream) noexcept
    {
        deallocate(stream, p, bytes, alignment);
    }
    void deallocate_async(void *p, std::size_t bytes, ::cuda::stream_ref stream) noexcept
    {
        deallocate(stream, p, bytes, default_alignment);
    }
#endif

    sp_pool *pool() const noexcept { return pool_; }
    bool operator==(const memory_resource &other) const noexcept { return pool_ == other.pool_; }
    bool operator!=(const memory_resource &other) const noexcept { return pool_ != other.pool_; }
    friend void get_property(const memory_resource &, ::cuda::mr::device_accessible) noexcept {}

private:
    static void check_alignment(std::size_t alignment)
    {
        if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
            alignment > default_alignment)
            throw error(SP_ERR_INVALID,
                        "streampool::memory_resource: alignment not a power of two up to 256");
    }

    sp_pool *pool_;
};

#if STREAMPOOL_HPP_CCCL_STREAM_ORDERED
static_assert(::cuda::mr::resource_with<memory_resource, ::cuda::mr::device_accessible>,
              "streampool::memory_resource is a device-accessible CCCL resource");
#else
static_assert(::cuda::mr::async_resource_with<memory_resource, ::cuda::mr::device_accessible>,
              "streampool::memory_resource is a device-accessible CCCL async resource");
#endif
#endif

} // namespace streampool

namespace std {
template <>
struct is_error_code_enum<streampool::status> : true_type {};
} // namespace std

#endif // STREAMPOOL_HPP
