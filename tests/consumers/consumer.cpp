// A C++ server that includes streampool.h (compiled with -Wall -Wextra -pedantic -Werror) and
// calls CUDA itself, so it links the CUDA runtime as well as libstreampool.
#include <streampool.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

int main()
{
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    sp_runtime *rt = nullptr;
    sp_pool *pool = nullptr;
    cudaStream_t stream = nullptr;
    int rc = sp_runtime_create(0, &rcfg, &rt);
    if (rc != SP_OK) {
        std::fprintf(stderr, "streampool: %s (CUDA error %d)\n", sp_strerror(rc),
                     sp_last_cuda_error());
        return 1;
    }
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = SP_CROSS_STREAM_WAIT;
    if (sp_pool_create(rt, "consumer-cxx", &cfg, &pool) != SP_OK ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    void *p = nullptr;
    const std::size_t bytes = std::size_t(3) << 20;
    if (sp_alloc(pool, &p, bytes, stream) != SP_OK ||
        reinterpret_cast<std::uintptr_t>(p) % 256 != 0 ||
        cudaMemsetAsync(p, 0, bytes, stream) != cudaSuccess ||
        sp_free(pool, p, stream) != SP_OK)
        return 1;
    sp_stats st;
    std::memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (sp_pool_stats(pool, &st) != SP_OK || st.allocs != 1)
        return 1;
    std::printf("consumer-cxx (streampool %s): allocs %llu\n", sp_version_string(),
                static_cast<unsigned long long>(st.allocs));
    if (sp_stream_release(rt, stream) != SP_OK || cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaStreamDestroy(stream) != cudaSuccess || sp_pool_destroy(pool) != SP_OK)
        return 1;
    return sp_runtime_destroy(rt) == SP_OK ? 0 : 1;
}
