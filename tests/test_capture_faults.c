/* Issue 27 item 6: a captured free the driver refuses loses nothing. During a declared capture
 * a stream's own allocation is a graph allocation node and its free a free node (rule 24); when
 * the driver refuses that cudaFreeAsync, the block is kept and given back later (at the latest
 * at the pool's destroy), so that every byte is back after the destroy, whichever of the
 * capture's frees fails. cudasim only: fault injection. */
#include <stdio.h>
#include <stdlib.h>

#include "support/sp_test_support.h"

static const uint64_t MiB = 1024 * 1024;

enum { POOLS = POOL_KINDS, STREAMS = 3, FREES = 9 };

/* 3 pools and 3 streams; the first stream captures (declared) three allocations per pool and
 * frees them inside the capture: 9 cudaFreeAsync calls, the `nth` of which the driver refuses.
 * The graph is launched; then the pools and the runtime are destroyed. */
static uint64_t left_after_destroy(unsigned long nth, int persistent, int *free_status)
{
    sp_runtime_config rcfg = SP_RUNTIME_CONFIG_INIT;
    rcfg.capture_check = SP_CAPTURE_DECLARED;
    CK(cudasimSetDeviceMemory(0, 512 * MiB));
    sp_runtime *rt = track_runtime(0, &rcfg);
    sp_pool *pool[POOLS];
    for (int i = 0; i < POOLS; i++) {
        sp_pool_config c = pool_kind_config(i);
        pool[i] = pool_with_config(rt, pool_kind_name(i), &c);
    }
    cudaStream_t s[STREAMS];
    for (int i = 0; i < STREAMS; i++)
        s[i] = new_stream();
    /* other streams' work before and around the capture */
    void *before[STREAMS];
    for (int i = 0; i < STREAMS; i++)
        SP(sp_alloc(pool[i], &before[i], (size_t)(i + 1) * MiB, s[i]));
    SP(sp_stream_capture_begin(rt, s[0]));
    CK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeRelaxed));
    void *p[FREES];
    for (int k = 0; k < FREES; k++)
        SP(sp_alloc(pool[k % POOLS], &p[k], (size_t)(k % 3 + 1) * MiB / 2 + 100, s[0]));
    if (nth)
        CK(cudasimInjectFault("cudaFreeAsync", nth, cudaErrorUnknown, persistent));
    *free_status = SP_OK;
    for (int k = 0; k < FREES; k++) {
        int rc = sp_free(pool[k % POOLS], p[k], s[0]);
        if (rc != SP_OK && *free_status == SP_OK)
            *free_status = rc;
    }
    cudasimClearFaults();
    cudaGraph_t graph = NULL;
    CK(cudaStreamEndCapture(s[0], &graph));
    SP(sp_stream_capture_end(rt, s[0]));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s[0]));
    CK(cudaStreamSynchronize(s[0]));
    for (int i = 0; i < STREAMS; i++)
        SP(sp_free(pool[i], before[i], s[i]));
    for (int i = 0; i < STREAMS; i++)
        drop_stream(rt, s[i]);
    for (int i = 0; i < POOLS; i++)
        SP(sp_pool_destroy(pool[i]));
    destroy_runtime(rt);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaDeviceSynchronize());
    /* the graphs' own memory (rule 26): unused once they are gone and their frees ran */
    CK(cudaDeviceGraphMemTrim(0));
    return device_bytes_used();
}

static void a_refused_captured_free_loses_nothing(void **state)
{
    (void)state;
    uint64_t worst = 0;
    for (int persistent = 0; persistent < 2; persistent++)
        for (unsigned long nth = 0; nth <= FREES; nth++) {
            int status = SP_OK;
            uint64_t left = left_after_destroy(nth, persistent, &status);
            printf("# cudaFreeAsync %lu of %d refused in the capture%s: sp_free %s, %llu bytes "
                   "left after destroy\n",
                   nth, FREES, persistent ? " (and every one after it)" : "",
                   sp_status_name(status), (unsigned long long)left);
            worst = left > worst ? left : worst;
            reset_device(NULL);
        }
    assert_int_equal(worst, 0);
}

TEST_MAIN("tests",
    cmocka_unit_test_teardown(a_refused_captured_free_loses_nothing, teardown_runtimes)
)
