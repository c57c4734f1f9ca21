/* A runtime's pools as a whole: listing them, and trimming them all (PyTorch's empty_cache). */
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"
#include "runtime.h"
#include "status.h"

int sp_runtime_pools(sp_runtime *rt, sp_pool_callback cb, void *user)
{
    sp__cuda_error_clear();
    if (!rt || !cb)
        return SP_ERR_INVALID;
    sp_mutex_lock(&rt->lock);
    size_t n = 0;
    for (sp_pool *p = rt->pools; p; p = p->next)
        n++;
    sp_pool **list = malloc((n ? n : 1) * sizeof *list);
    size_t i = n; /* the list is newest first: fill from the end, oldest first */
    for (sp_pool *p = rt->pools; p && list; p = p->next)
        list[--i] = p;
    sp_mutex_unlock(&rt->lock);
    if (!list)
        return SP_ERR_NO_HOST_MEMORY;
    /* called with no lock held, so that cb may call anything of the runtime */
    sp_assert_lockless();
    for (i = 0; i < n && cb(list[i], user) == 0; i++)
        ;
    free(list);
    return i < n ? (int)i + 1 : (int)n;
}

int sp_runtime_trim(sp_runtime *rt)
{
    sp__cuda_error_clear();
    if (!rt)
        return SP_ERR_INVALID;
    int err = SP_OK, cuda_err = 0;
    sp_mutex_lock(&rt->lock); /* pools cannot be destroyed meanwhile */
    for (sp_pool *p = rt->pools; p; p = p->next) {
        int rc = sp_pool_trim(p, 0); /* never below a pool's reservation */
        if (err == SP_OK && rc != SP_OK) {
            err = rc;
            cuda_err = sp_last_cuda_error(); /* the next pool's call clears it */
        }
    }
    sp_mutex_unlock(&rt->lock);
    sp__status_set_cuda(cuda_err);
    return err;
}
