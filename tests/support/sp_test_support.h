/* Helpers for the streampool suites (on top of test_support.h): status checks, stats, streams
 * that are released from every pool before they are destroyed. */
#ifndef SP_TEST_SP_SUPPORT_H
#define SP_TEST_SP_SUPPORT_H

#include "streampool.h"
#include "test_support.h"

#define SP(call) assert_int_equal((call), SP_OK)

static inline sp_stats stats_of(sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    SP(sp_pool_stats(pool, &st));
    return st;
}

static inline cudaStream_t new_stream(void)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

static inline void drop_stream(sp_runtime *rt, cudaStream_t s)
{
    SP(sp_stream_release(rt, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

#endif
