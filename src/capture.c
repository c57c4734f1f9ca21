/* Graph capture as the tiers see it: whether a stream cache's stream is capturing (declared, or
 * asked of CUDA under SP_CAPTURE_ALWAYS), and the blocks kept aside while it was, which go back
 * to their slabs and segments when the capture ends. Above the tiers (it puts blocks back into
 * them) and below the pool ledger, the allocator and the runtime's capture calls, which use it.
 * The capture state a stream cache is created with is cache.c's (sp__cache_capture_adopt). */
#include "heap.h"
#include "capture.h"
#include "cuda.h"
#include "pool.h"
#include "device.h"

int sp__capture_check(sp_stream_cache *c, bool *capturing)
{
    if (c->pool->dev->cfg.capture_check != SP_CAPTURE_ALWAYS) {
        *capturing = atomic_load_explicit(&c->capturing, memory_order_acquire);
        return SP_OK;
    }
    /* declared as well: capturing from sp_stream_capture_begin to its end, as under DECLARED,
     * also before cudaStreamBeginCapture (whose "not capturing" yet would lift the declaration
     * another thread's miss relies on) */
    if (atomic_load_explicit(&c->declared, memory_order_acquire)) {
        *capturing = true;
        return SP_OK;
    }
    int rc = sp__cuda_stream_is_capturing(c->key.stream, capturing);
    if (rc != SP_OK)
        return rc;
    /* ALWAYS: the flag remembers what was last seen, so that a capture's end is noticed here
     * and its kept-aside blocks come back */
    if (*capturing)
        atomic_store_explicit(&c->capturing, true, memory_order_relaxed);
    else if (atomic_exchange_explicit(&c->capturing, false, memory_order_relaxed))
        sp__capture_release_aside(c);
    return SP_OK;
}

void sp__capture_release_aside(sp_stream_cache *c)
{
    sp_pool *pool = c->pool;
    sp_spin_lock(&c->lock);
    sp_block *list = c->aside;
    c->aside = NULL;
    uint64_t epoch = 0;
    if (list) { /* tagged as freed on the stream now, after the capture */
        epoch = atomic_load_explicit(&c->free_epoch, memory_order_relaxed) + 1;
        atomic_store_explicit(&c->free_epoch, epoch, memory_order_release);
    }
    sp_spin_unlock(&c->lock);
    for (sp_block *b = list, *next; b; b = next) {
        next = b->next;
        sp_heap *h = b->cls < SP_CLASS_COUNT ? &pool->slabs : &pool->segments;
        sp_mutex_lock(&h->lock);
        sp__heap_put(h, b, c, epoch);
        sp_mutex_unlock(&h->lock);
    }
}
