/* streampool_torch: streampool behind PyTorch's pluggable allocator.
 *
 * libstreampool_torch exports the entry points torch.cuda.memory.CUDAPluggableAllocator loads
 * by name (sp_torch_malloc, sp_torch_free) and the optional hooks its allocator object accepts
 * (set_reset_fn, set_memory_fraction_fn, set_record_stream_fn), all with PyTorch's signatures.
 * Each device gets one streampool runtime, created on the device's first use and configured by
 * SP_ALLOC_CONF like any other. Allocations go to the calling thread's current pool: the
 * device's default pool, or a tenant pool chosen with sp_torch_set_pool, so that each
 * torch.cuda.MemPool of a multi-tenant server can be a streampool pool with its own limit.
 * A free goes to the pool that made the allocation, whichever thread frees it.
 *
 * The entry points cannot return a status (PyTorch gives them none): an allocation that fails
 * returns NULL (which PyTorch 2.15 does not check: see "failed allocations" below), and a free
 * that streampool refuses (unknown pointer, double free, a size that is not the allocation's) frees nothing and
 * never crashes. sp_torch_last_status tells the calling thread why.
 */
#ifndef STREAMPOOL_TORCH_H
#define STREAMPOOL_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "streampool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices 0 .. SP_TORCH_MAX_DEVICES - 1; SP_ERR_NO_DEVICE beyond. */
#define SP_TORCH_MAX_DEVICES 64

/* ---- PyTorch's entry points (CUDAPluggableAllocator) ---- */

/* alloc_fn: `size` bytes on `device`, usable on `stream` in stream order, from the calling
 * thread's current pool on that device. NULL on failure, and for size 0. */
SP_API void *sp_torch_malloc(size_t size, int device, cudaStream_t stream);

/* free_fn: frees ptr in stream order on `stream` (PyTorch passes the allocation's own stream,
 * device and size). Refused, freeing nothing, if ptr is not a live allocation on `device` or
 * `size` is not the size it was allocated with. ptr NULL: nothing. */
SP_API void sp_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);

/* reset_fn (torch.cuda.empty_cache): gives every pool's cached memory back to the driver
 * (sp_pool_trim to 0), on every device that has a runtime. */
SP_API void sp_torch_empty_cache(void);

/* memory_fraction_fn (torch.cuda.set_per_process_memory_fraction): the device's default pool
 * gets a limit of fraction x the device's total memory. Before the device's runtime exists
 * (before its first allocation or sp_torch_* call) the pool is created with it, and
 * SP_ALLOC_CONF's default.limit or limit, if set, still wins; once it exists, sp_pool_set_limit
 * changes the limit at once (live allocations stay valid). fraction must be in (0, 1]. */
SP_API void sp_torch_set_memory_fraction(double fraction, int device);

/* record_stream_fn (Tensor.record_stream): the live allocation ptr is also used on `stream`.
 * Its free then orders its allocation stream after the work enqueued on `stream` up to that
 * free (an event it waits on) before the memory can be reused. */
SP_API void sp_torch_record_stream(void *ptr, cudaStream_t stream);

/* SP_OK, or why the calling thread's latest call above failed. */
SP_API int sp_torch_last_status(void);

/* ---- failed allocations ----
 * PyTorch 2.15 does not check alloc_fn's result: a NULL becomes a tensor with data_ptr() 0 and
 * no exception. So each failed sp_torch_malloc writes one line on stderr naming the pool, the
 * request (bytes, device, stream) and the reason (the status's name and sentence), once per
 * distinct failure (pool, device, size, stream, status): a repeat prints nothing. */

/* The calling thread's latest failed allocation: its line (as stderr got it, repeat or not)
 * written snprintf-style into buf, and its status returned; SP_OK and "" if none yet. */
SP_API int sp_torch_last_failure(char *buf, size_t len);

/* How many allocations have failed on the calling thread so far. */
SP_API uint64_t sp_torch_failed_allocs(void);

/* ---- tenant pools ---- */

/* Creates pool `name` on `device` (its runtime created if needed) with a hard `limit` on the
 * bytes it holds from the device (0: none); SP_ALLOC_CONF's keys for `name` apply on top, as for
 * any pool. Errors as sp_pool_create's. */
SP_API int sp_torch_pool_create(const char *name, int device, uint64_t limit);

/* Destroys pool `name` on `device`: SP_ERR_BUSY while it has live allocations. No other thread
 * may be allocating from it. */
SP_API int sp_torch_pool_destroy(const char *name, int device);

/* Chooses the calling thread's pool for sp_torch_malloc by name; NULL or "" chooses each
 * device's default pool. The pool need not exist yet: an allocation on a device without it
 * fails (SP_ERR_NOT_FOUND), never falling back to another pool. SP_ERR_INVALID for a name longer
 * than SP_POOL_NAME_MAX. */
SP_API int sp_torch_set_pool(const char *name);

/* The calling thread's pool name ("" for the default pools). */
SP_API const char *sp_torch_current_pool(void);

/* The runtime of `device`, created if needed: for sp_runtime_metrics_prometheus, summaries,
 * traces and the rest of streampool's API. It stays owned by this library. */
SP_API int sp_torch_runtime(int device, sp_runtime **out);

/* Stats of pool `name` on `device` (NULL or "": the default pool), as sp_pool_stats fills them
 * (out->size set by the caller), and the same as one JSON object written snprintf-style into
 * buf, *needed set to the length of the whole text (for ctypes callers). */
SP_API int sp_torch_pool_stats(const char *name, int device, sp_stats *out);
SP_API int sp_torch_pool_stats_json(const char *name, int device, char *buf, size_t len,
                                    size_t *needed);

/* Destroys every device's runtime (writing its trace, if SP_ALLOC_CONF asked for one), after
 * which the next call starts afresh and reads SP_ALLOC_CONF again. SP_ERR_BUSY, and the
 * runtimes with live allocations kept, while allocations are live. No other thread may be
 * using the library. */
SP_API int sp_torch_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_TORCH_H */
