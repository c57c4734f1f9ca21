/* The allocation trace (trace.c): recording below the allocator (alloc.c's traced calls note
 * their outcome here), start, stop and the files it writes. Calls only the leaves and labels. */
#ifndef SP_TRACE_H
#define SP_TRACE_H

#include "base.h"
#include "block.h"

/* ---- trace.c: the allocation trace ----
 * Off, it costs sp_alloc and sp_free one load of sp__trace_on_count and a branch that is never taken
 * (the hook line). On, each event goes to the calling thread's own buffer. */

extern atomic_int sp__trace_on_count;          /* runtimes with a trace on, in the whole process */

static inline bool sp__trace_wanted(void)
{
    return sp_unlikely(atomic_load_explicit(&sp__trace_on_count, memory_order_relaxed) != 0);
}

/* The recording half of alloc.c's traced sp_alloc / sp_free: figures read before the call
 * (the mark), and the events the call made: an allocation's outcome as the allocator decided
 * it, the reclaims and trims it caused told from how the pool's counters moved. */
typedef struct {
    struct sp_trace *trace;            /* NULL: not traced */
    uint64_t retries, trims, at_ns;
} sp_trace_mark;
sp_trace_mark sp__trace_alloc_mark(sp_pool *pool);
/* ptr: the block's address with SP_OK (NULL for 0 bytes); outcome: how it was served. */
void sp__trace_alloc_done(const sp_trace_mark *m, sp_pool *pool, void *ptr, size_t bytes,
                          cudaStream_t stream, int rc, sp_outcome outcome);
sp_trace_mark sp__trace_free_mark(sp_pool *pool);
void sp__trace_free_done(const sp_trace_mark *m, sp_pool *pool, const void *ptr,
                         cudaStream_t stream, int rc);
/* An instant event for sp_pool_trim (only when a trace is on). */
void sp__trace_trim(sp_pool *pool);
/* An instant event for a request's end: its id and peak requested bytes (only when a trace is
 * on). */
void sp__trace_request(sp_pool *pool, sp_request id, cudaStream_t stream, uint64_t peak);
/* Starts the trace SP_ALLOC_CONF's trace:FILE asks for (a warning on stderr if it cannot). */
void sp__trace_autostart(sp_runtime *rt);
/* Stops a trace still on (writing its files) and frees the trace's memory. */
void sp__trace_destroy(sp_runtime *rt);

#endif /* SP_TRACE_H */
