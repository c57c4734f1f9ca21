/* cudasim host memory the runtime knows: pinned allocations (cudaMallocHost, cudaHostAlloc) and
 * registered ranges (cudaHostRegister), each a record in the handle registry under its start
 * address (SIM_H_HOST) with its size and the device that was current when it was made; and
 * cudaPointerGetAttributes, which tells such memory from device, managed and unregistered
 * memory. All under the exclusive lock. */
#include <stdint.h>
#include <stdlib.h>

#include "sim_internal.h"

typedef struct {
    int device;       /* current when made: a cudaDeviceReset of it takes the record away */
    size_t size;
    bool registered;  /* cudaHostRegister: the caller's memory, never freed here */
} sim_host_block;

bool sim_host_add(void *p, size_t size, int device, bool registered)
{
    sim_host_block *b = malloc(sizeof *b);
    if (!b)
        return false;
    *b = (sim_host_block){.device = device, .size = size, .registered = registered};
    sim_handle_put(p, SIM_H_HOST, b);
    return true;
}

/* The record whose range holds p (its start in *base), or NULL. The exact start is one lookup;
 * an interior pointer (a tensor's view into a pinned block) costs a pass over the live
 * records, which only cudaPointerGetAttributes and cudaHostRegister's overlap check pay. */
static sim_host_block *host_find(const void *p, size_t n, void **base)
{
    sim_host_block *b = sim_handle_get(p, SIM_H_HOST);
    if (b) {
        *base = (void *)p;
        return b;
    }
    void **starts;
    size_t count = sim_handles_of_type(SIM_H_HOST, &starts);
    const char *lo = p, *hi = lo + (n ? n : 1);
    for (size_t i = 0; i < count && !b; i++) {
        sim_host_block *c = sim_handle_get(starts[i], SIM_H_HOST);
        const char *s = starts[i];
        if (lo < s + c->size && s < hi) {
            b = c;
            *base = starts[i];
        }
    }
    free(starts);
    return b;
}

/* cudaFreeHost: true (and the record gone) for the start of a pinned allocation. Registered
 * memory is not cudaFreeHost's to free. */
bool sim_host_remove_pinned(void *p)
{
    sim_host_block *b = sim_handle_get(p, SIM_H_HOST);
    if (!b || b->registered)
        return false;
    sim_handle_remove(p);
    free(b);
    return true;
}

void sim_host_device_reset(int device)
{
    void **starts;
    size_t n = sim_handles_of_type(SIM_H_HOST, &starts);
    for (size_t i = 0; i < n; i++) {
        sim_host_block *b = sim_handle_get(starts[i], SIM_H_HOST);
        if (b->device != device)
            continue;
        sim_handle_remove(starts[i]);
        if (!b->registered)
            free(starts[i]); /* pinned memory goes with its context; registered stays the caller's */
        free(b);
    }
    free(starts);
}

/* ---- API ---- */

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaHostRegister);
    if (err)
        return sim_ret(err);
    const unsigned known = cudaHostRegisterPortable | cudaHostRegisterMapped |
                           cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
    if (!ptr || size == 0 || (flags & ~known))
        return sim_ret(cudaErrorInvalidValue);
    if (flags & cudaHostRegisterIoMemory)
        return sim_ret(cudaErrorNotSupported); /* no PCI BAR to map on an emulator */
    sim_lock();
    int dev = sim_current_device();
    sim_device *d = sim_dev(dev);
    void *base;
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else if (sim_is_device_address(ptr))
        err = cudaErrorInvalidValue; /* device memory is not host memory to page-lock */
    else if (host_find(ptr, size, &base))
        err = cudaErrorHostMemoryAlreadyRegistered; /* any overlap with a known range */
    else if (!sim_host_add(ptr, size, dev, true))
        err = cudaErrorMemoryAllocation;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t err = sim_enter(SIM_API_cudaHostUnregister);
    if (err)
        return sim_ret(err);
    if (!ptr)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_host_block *b = sim_handle_get(ptr, SIM_H_HOST); /* only the start unregisters */
    if (!b || !b->registered) {
        err = cudaErrorHostMemoryNotRegistered;
    } else {
        sim_handle_remove(ptr);
        free(b);
        sim_device *d = sim_dev_ready(sim_current_device());
        err = d ? d->sticky : cudaSuccess;
    }
    sim_unlock();
    return sim_ret(err);
}

/* Device memory (pool, cudaMalloc, graph), managed memory, pinned or registered host memory,
 * and anything else as unregistered host memory (CUDA 11 on: cudaSuccess, not an error).
 * Device memory is what a live mapping holds: freed pool memory still mapped is device memory,
 * as a GPU's page tables still say. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
    cudaError_t err = sim_enter(SIM_API_cudaPointerGetAttributes);
    if (err)
        return sim_ret(err);
    if (!attr)
        return sim_ret(cudaErrorInvalidValue);
    struct cudaPointerAttributes a = {.type = cudaMemoryTypeUnregistered,
                                      .device = cudaInvalidDeviceId};
    sim_lock();
    bool managed = false;
    int dev = sim_device_of_address(ptr, &managed);
    if (dev < 0 && ptr)
        dev = sim_device_of(ptr); /* an imported pool's window (sim_pool.c's IPC pools) */
    void *base;
    sim_host_block *b;
    if (dev >= 0) {
        a.type = managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
        a.device = dev;
        a.devicePointer = (void *)ptr;
        a.hostPointer = managed ? (void *)ptr : NULL;
    } else if (ptr && (b = host_find(ptr, 0, &base))) {
        a.type = cudaMemoryTypeHost;
        a.device = b->device;
        a.devicePointer = (void *)ptr; /* mapped, unified addressing: the same address */
        a.hostPointer = (void *)ptr;
    }
    sim_unlock();
    *attr = a;
    return cudaSuccess;
}
