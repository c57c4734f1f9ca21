/* A runtime's pools as a whole: listing them, trimming them all (PyTorch's empty_cache), which
 * of them reports show, and what a busy runtime or pool tells its caller. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

bool sp__pool_reported(sp_pool *pool)
{
    /* The default pool exists from sp_runtime_create on, whether or not the program ever uses
     * it: until it has held memory or counted a call, showing it would only say "one more pool"
     * than the program made. */
    if (!pool->is_default || atomic_load(&pool->usage.held.total) != 0 ||
        atomic_load(&pool->miss_allocs) != 0)
        return true;
    for (int i = 0; i < SP_COUNT_N; i++)
        if (atomic_load(&pool->count[i]) != 0)
            return true;
    return false;
}

int sp_runtime_pools(sp_runtime *rt, sp_pool_callback cb, void *user)
{
    sp__cuda_error_clear();
    if (!rt || !cb)
        return SP_ERR_INVALID;
    pthread_mutex_lock(&rt->lock);
    size_t n = 0;
    for (sp_pool *p = rt->pools; p; p = p->next)
        n++;
    sp_pool **list = malloc((n ? n : 1) * sizeof *list);
    size_t i = n; /* the list is newest first: fill from the end, oldest first */
    for (sp_pool *p = rt->pools; p && list; p = p->next)
        list[--i] = p;
    pthread_mutex_unlock(&rt->lock);
    if (!list)
        return SP_ERR_NO_HOST_MEMORY;
    /* called with no lock held, so that cb may call anything of the runtime */
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
    pthread_mutex_lock(&rt->lock); /* pools cannot be destroyed meanwhile */
    for (sp_pool *p = rt->pools; p; p = p->next) {
        int rc = sp_pool_trim(p, 0); /* never below a pool's reservation */
        if (err == SP_OK && rc != SP_OK) {
            err = rc;
            cuda_err = sp_last_cuda_error(); /* the next pool's call clears it */
        }
    }
    pthread_mutex_unlock(&rt->lock);
    sp__set_cuda_error(cuda_err);
    return err;
}

int sp__busy_message(const char *call, sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    (void)sp_pool_stats(pool, &st);
    return sp__errorf(SP_ERR_BUSY,
                      "%s: pool '%s' still has %llu live allocation%s (%llu bytes requested): "
                      "sp_free them first (sp_pool_dump_live lists them)",
                      call, pool->name, (unsigned long long)(st.allocs - st.frees),
                      st.allocs - st.frees == 1 ? "" : "s",
                      (unsigned long long)st.requested.current);
}
