/* The runtime key check_free_order:1 (free_order.c): sp_free of a block on another stream than
 * the one that allocated it checks that nothing lets the free run before the allocation. Above
 * the stream caches and cuda.c, below alloc.c, which calls it only while the key is on. */
#ifndef SP_FREE_ORDER_H
#define SP_FREE_ORDER_H

#include "cache.h"
#include "device.h"

/* The marks of one device (sp_device.free_order): for each live block allocated while the
 * check was on, a fence (fence.c) recorded on its stream right after sp_alloc returned it. */
typedef struct sp_free_order sp_free_order;

/* A device's marks, or NULL without host memory. */
sp_free_order *sp__free_order_new(int device, sp_fence_pool *fences);
void sp__free_order_destroy(sp_free_order *fo);

/* sp_alloc and sp_free run the checked path when the runtime checks free order. */
static inline bool sp__free_order_wanted(const sp_device *dev)
{
    return sp_unlikely(dev->free_order);
}

/* Records the mark of ptr, just allocated on `stream` (best effort: a block without one is not
 * checked). */
void sp__free_order_note(sp_device *dev, void *ptr, cudaStream_t stream);

/* Before sp_free(ptr) on `stream`: SP_ERR_UNORDERED_FREE (with sp_config_error's message) if
 * ptr was allocated on another stream that has not reached the allocation yet while `stream`
 * has no work queued, so that nothing can order the free after it; the mark stays. Otherwise
 * SP_OK and the mark is taken out into *taken (to put back with sp__free_order_put_back should
 * the free fail). */
typedef struct sp_free_mark sp_free_mark;
int sp__free_order_check(sp_device *dev, void *ptr, cudaStream_t stream, sp_free_mark **taken);
void sp__free_order_put_back(sp_device *dev, sp_free_mark *m);
/* The mark of a free that went through. */
void sp__free_order_drop(sp_device *dev, sp_free_mark *m);
/* For sp_request_end with SP_REQUEST_SYNCHRONIZED on `stream`: true if the hint may settle the
 * stream's frees (the check is off, or no free made on the stream is pending); false if one is
 * still pending, a breach of the hint's promise, and then *rc becomes SP_ERR_UNORDERED_FREE
 * (unless it holds an error already) with sp_config_error's message: the end fences the frees
 * as without the hint instead. */
bool sp__free_order_settled(sp_device *dev, cudaStream_t stream, int *rc);

#endif /* SP_FREE_ORDER_H */
