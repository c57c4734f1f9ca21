/* A downstream project's own CI on the installed cudasim (cudasim.pc): a 64 MiB device, so a
 * 128 MiB request is out of memory, which on a build farm only the emulator can show. */
#include <stdio.h>
#include <cudasim.h>
#include <streampool.h>

int main(void)
{
    sp_runtime *rt;
    sp_pool *pool;
    void *p = NULL;
    if (cudasimSetDeviceMemory(0, (size_t)64 << 20) != cudaSuccess ||
        sp_runtime_create(0, NULL, &rt) != SP_OK || sp_runtime_default_pool(rt, &pool) != SP_OK)
        return 1;
    int rc = sp_alloc(pool, &p, (size_t)128 << 20, 0);
    printf("128 MiB on a 64 MiB device: %s\n", sp_status_name(rc));
    return rc == SP_ERR_OUT_OF_MEMORY && p == NULL && sp_runtime_destroy(rt) == SP_OK ? 0 : 1;
}
