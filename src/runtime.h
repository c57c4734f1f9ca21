/* The runtime of one device (runtime.c): its pools by name, the service stream and fences its
 * pools share, the pointer map, usage figures, declared captures and the trace. Its struct is
 * read by the layers below for what the runtime hands them; its functions are the API's top. */
#ifndef SP_RUNTIME_H
#define SP_RUNTIME_H

#include "counters.h"
#include "fence.h"
#include "ptrmap.h"

/* ---- runtime (runtime.c) ---- */

struct sp_runtime {
    int device;
    sp_runtime_config cfg;
    sp_mutex lock;                       /* pools list and names, capture list */
    sp_pool *pools;
    sp_pool *default_pool;
    cudaStream_t service;                /* non-blocking: frees of released streams' blocks */
    sp_fence_pool fences;
    sp_ptrmap ptrmap;
    sp_usage usage;
    atomic_uint_least64_t captures;      /* declared captures in progress */
    struct sp_conf *conf;                /* config.c: alloc_conf and SP_ALLOC_CONF, parsed;
                                            its pool names' states under `lock` */
    sp_oom_callback oom_cb;
    void *oom_user;
    sp_oom_report last_oom;              /* under `lock` */
    sp_stream_key *capturing;
    size_t capturing_len, capturing_cap;
    _Atomic(struct sp_trace *) trace;    /* trace.c: NULL until a trace is first started */
    sp_runtime *next_runtime;            /* in the process's list, for threads that exit */
    struct sp_free_order *free_order;    /* free_order.c: check_free_order:1's marks; NULL off */
};

/* A graph capture may be under way in the process: one is declared, or SP_CAPTURE_ALWAYS, under
 * which streampool is not told. */
static inline bool sp__capture_possible(const sp_runtime *rt)
{
    return rt->cfg.capture_check == SP_CAPTURE_ALWAYS ||
           atomic_load_explicit(&rt->captures, memory_order_relaxed) != 0;
}

#endif /* SP_RUNTIME_H */
