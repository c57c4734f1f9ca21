/* libstreampool_torch's allocation entry point for PyTorch, raising torch.OutOfMemoryError.
 *
 * PyTorch 2.15's CUDAPluggableAllocator does not check what alloc_fn returns: a NULL becomes a
 * tensor at address 0. PyTorch raises torch.OutOfMemoryError for a c10::OutOfMemoryError thrown
 * from inside an allocation, and a C library cannot throw one; this wrapper, compiled against
 * the installed torch's own headers and libc10 by streampool_torch.py (so that the exception's
 * type is that torch's), calls sp_torch_malloc and throws with streampool's one-line report
 * (the pool, the request, the reason) when it fails. The free passes straight through. */
#include <c10/util/Exception.h>
#include <cstddef>

extern "C" {
void *sp_torch_malloc(size_t size, int device, void *stream);
void sp_torch_free(void *ptr, size_t size, int device, void *stream);
int sp_torch_last_status(void);
int sp_torch_last_failure(char *buf, size_t len);

__attribute__((visibility("default"))) void *sp_torch_oom_malloc(size_t size, int device,
                                                                  void *stream)
{
    void *p = sp_torch_malloc(size, device, stream);
    if (!p && sp_torch_last_status() != 0) { /* size 0 is NULL with success */
        char line[512];
        sp_torch_last_failure(line, sizeof line);
        TORCH_CHECK_WITH(OutOfMemoryError, false, line);
    }
    return p;
}

__attribute__((visibility("default"))) void sp_torch_oom_free(void *ptr, size_t size, int device,
                                                               void *stream)
{
    sp_torch_free(ptr, size, device, stream);
}
}
