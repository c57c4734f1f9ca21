/* cuda.c, the only file of the core that calls CUDA. A leaf. */
#ifndef SP_CUDA_CALLS_H
#define SP_CUDA_CALLS_H

#include "base.h"

/* ---- cuda.c: the only file that calls CUDA ---- */

int sp__cuda_check_device(int device);
int sp__cuda_pool_create(int device, uint64_t max_size, cudaMemPool_t *out);
int sp__cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total);
/* The thread's last CUDA error (sp_last_cuda_error) is one that ruins the context for good (a
 * device fault: "any further CUDA work will return the same error"), or the runtime unloading
 * at exit: what streampool holds went with the context, and nothing can be given back. */
bool sp__cuda_context_lost(void);
/* The caller's current device (cudaGetDevice). */
int sp__cuda_current_device(int *device);
/* cudaGetErrorName and cudaGetErrorString of a cudaError_t. */
const char *sp__cuda_error_name(int err);
const char *sp__cuda_error_string(int err);
int sp__cuda_pool_destroy(cudaMemPool_t pool);
int sp__cuda_pool_set_threshold(cudaMemPool_t pool, uint64_t bytes);
int sp__cuda_pool_usage(cudaMemPool_t pool, uint64_t *reserved, uint64_t *used);
int sp__cuda_pool_trim(cudaMemPool_t pool, size_t keep);
int sp__cuda_malloc(cudaMemPool_t pool, void **ptr, size_t bytes, cudaStream_t stream);
int sp__cuda_free(void *ptr, cudaStream_t stream);
int sp__cuda_event_create(int device, cudaEvent_t *out);
int sp__cuda_event_destroy(cudaEvent_t event);
int sp__cuda_event_record(cudaEvent_t event, cudaStream_t stream);
/* relaxed: a graph capture may be under way (sp__capture_possible); see cuda.c */
int sp__cuda_event_query(cudaEvent_t event, bool relaxed, bool *done);
int sp__cuda_event_sync(cudaEvent_t event, bool relaxed);
int sp__cuda_stream_wait_event(cudaStream_t stream, cudaEvent_t event);
int sp__cuda_stream_create(int device, cudaStream_t *out);
int sp__cuda_stream_destroy(cudaStream_t stream);
int sp__cuda_stream_sync(cudaStream_t stream);
int sp__cuda_stream_query(cudaStream_t stream, bool *idle);
int sp__cuda_stream_is_capturing(cudaStream_t stream, bool *capturing);
int sp__cuda_device_sync(int device);
/* many devices and processes (peer.c, share.c): access flags are sp_access values */
int sp__cuda_pool_create_shareable(int device, uint64_t max_size, cudaMemPool_t *out);
int sp__cuda_stream_device(cudaStream_t stream, int *device);
/* How many devices sp__cuda_check_device (every sp_runtime_create) last found; 0: none yet. */
int sp__cuda_known_device_count(void);
int sp__cuda_device_count(int *count);
int sp__cuda_can_access_peer(int device, int peer, bool *can);
int sp__cuda_pool_set_access(cudaMemPool_t pool, int device, int flags);
int sp__cuda_pool_get_access(cudaMemPool_t pool, int device, int *flags);
int sp__cuda_pool_export_fd(cudaMemPool_t pool, int *fd);
int sp__cuda_pool_import_fd(int fd, cudaMemPool_t *out);
int sp__cuda_pool_export_pointer(void *ptr, unsigned char data[64]);
int sp__cuda_pool_import_pointer(cudaMemPool_t pool, const unsigned char data[64], void **ptr);

#endif /* SP_CUDA_CALLS_H */
