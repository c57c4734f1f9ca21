/* The device context (no .c: types and one inline): what the layers below the runtime need of
 * the device they work for, in one struct that the runtime embeds (sp_runtime.dev) and hands
 * down to every pool (sp_pool.dev). The stream caches, fences, tiers, pool ledger and allocator
 * reach the service stream, the fence pool, the pointer map, the device's figures, the
 * declared captures and the configuration through it, never through the runtime's own struct,
 * whose functions sit above them all. */
#ifndef SP_DEVICE_H
#define SP_DEVICE_H

#include "usage.h"
#include "fence.h"
#include "ptrmap.h"

struct sp_device {
    int device;                          /* the CUDA ordinal */
    /* the runtime's configuration, read-only after sp_runtime_create (alloc_conf NULL: its
     * string is parsed into `conf`) */
    sp_runtime_config cfg;
    struct sp_conf *conf;                /* config.c: alloc_conf and SP_ALLOC_CONF, parsed;
                                            its pool names' states under the runtime's lock */
    cudaStream_t service;                /* non-blocking: frees of released streams' blocks */
    sp_fence_pool fences;
    sp_ptrmap ptrmap;
    sp_usage usage;                      /* the device's figures: every pool's, summed */
    atomic_uint_least64_t captures;      /* declared captures in progress */
    struct sp_free_order *free_order;    /* free_order.c: check_free_order:1's marks; NULL off */
    _Atomic(struct sp_trace *) trace;    /* trace.c: NULL until a trace is first started */
};

/* A graph capture may be under way in the process: one is declared, or SP_CAPTURE_ALWAYS, under
 * which streampool is not told. */
static inline bool sp__capture_possible(const sp_device *dev)
{
    return dev->cfg.capture_check == SP_CAPTURE_ALWAYS ||
           atomic_load_explicit(&dev->captures, memory_order_relaxed) != 0;
}

#endif /* SP_DEVICE_H */
