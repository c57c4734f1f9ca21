/* A server that calls streampool and nothing else of CUDA: under -Wl,--as-needed it has no NEEDED
 * entry for the CUDA runtime, so the runtime it runs on is the one libstreampool's own
 * libcudart.so.<major> resolves to (cudasim when LD_LIBRARY_PATH names it first). */
#include <stdint.h>
#include <stdio.h>
#include <streampool.h>

int main(void)
{
    sp_runtime *rt;
    sp_pool *pool;
    int rc = sp_runtime_create(0, NULL, &rt);
    if (rc != SP_OK) {
        fprintf(stderr, "streampool: %s (CUDA error %d)\n", sp_strerror(rc), sp_last_cuda_error());
        return 1;
    }
    if ((rc = sp_pool_create(rt, "consumer", NULL, &pool)) != SP_OK)
        return 1;
    for (int request = 0; request < 4; request++) {
        void *p;
        /* The legacy default stream: the second request on reuses the first one's block. */
        if ((rc = sp_alloc(pool, &p, (size_t)1 << 20, 0)) != SP_OK || (uintptr_t)p % 256 != 0)
            return 1;
        if ((rc = sp_free(pool, p, 0)) != SP_OK)
            return 1;
    }
    sp_stats st = {.size = sizeof st};
    if (sp_pool_stats(pool, &st) != SP_OK)
        return 1;
    printf("consumer (streampool %s): allocs %llu, same-stream hits %llu\n", sp_version_string(),
           (unsigned long long)st.allocs, (unsigned long long)st.same_stream_hits);
    if (st.allocs != 4 || st.same_stream_hits != 3)
        return 1;
    if (sp_pool_destroy(pool) != SP_OK)
        return 1;
    return sp_runtime_destroy(rt) == SP_OK ? 0 : 1;
}
