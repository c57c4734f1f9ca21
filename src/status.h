/* CUDA errors as streampool reports them (status.c). A leaf. */
#ifndef SP_STATUS_H
#define SP_STATUS_H

#include "base.h"

/* ---- status.c ---- */

/* Remembers a failed CUDA call's error for sp_last_cuda_error(). */
void sp__status_set_cuda(int cuda_error);

/* This thread's last CUDA error. Every public call that can reach CUDA clears it on entry (one
 * line, early in the function), so that it only ever describes the call that just returned.
 * initial-exec: the hot path reads it without a __tls_get_addr call. */
extern _Thread_local int sp__status_cuda __attribute__((tls_model("initial-exec")));

static inline void sp__cuda_error_clear(void)
{
    if (sp_unlikely(sp__status_cuda != 0)) /* a read, no store, on the hot path */
        sp__status_cuda = 0;
}

#endif /* SP_STATUS_H */
