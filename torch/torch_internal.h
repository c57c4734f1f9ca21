/* What the two files of libstreampool_torch share: the record-stream bookkeeping
 * (record_stream.c) that the free entry point (allocator.c) consults. */
#ifndef SP_TORCH_INTERNAL_H
#define SP_TORCH_INTERNAL_H

#include <cuda_runtime_api.h>

/* ---- record_stream.c ---- */

/* Notes that the live allocation ptr, on `device`, is also used on `stream`. SP_OK or
 * SP_ERR_NO_HOST_MEMORY. A record lives until ptr's free: only live allocations have one, so a
 * runtime that can be destroyed has none left. */
int sp__torch_recorded_add(void *ptr, int device, cudaStream_t stream);

/* Before ptr is freed on free_stream: makes free_stream wait for the work enqueued so far on
 * every stream recorded for ptr (the host waits instead where an event cannot be made), then
 * forgets them. SP_OK, also when nothing was recorded; SP_ERR_CUDA, with the record kept, if
 * the order could not be established: the caller must then not free ptr. */
int sp__torch_recorded_order(void *ptr, cudaStream_t free_stream);

/* ---- failure.c ---- */

/* An allocation of `size` bytes on (device, stream) from the pool the calling thread chose
 * ("" or NULL: the default pool) failed with `status`: records it as the thread's latest
 * failure, and reports it on stderr unless this same failure was reported before. */
void sp__torch_failure(const char *pool, int device, size_t size, cudaStream_t stream,
                       int status);

#endif
