/* The runtime of one device (runtime.c), the API's top: its pools by name, the default pool,
 * the OOM callback and report, the declared captures' streams and the process's list of
 * runtimes. What the layers below need of the device (service stream, fences, pointer map,
 * figures, configuration, trace) is its sp_device (device.h), which it embeds and hands down to
 * its pools: only the files at the top, which walk its pools or take its lock, read this
 * struct. */
#ifndef SP_RUNTIME_H
#define SP_RUNTIME_H

#include "cache.h"
#include "device.h"

/* ---- runtime (runtime.c) ---- */

struct sp_runtime {
    sp_device dev;                       /* handed down: sp_pool.dev points here */
    sp_mutex lock;                       /* pools list and names, capture list */
    sp_pool *pools;
    sp_pool *default_pool;
    sp_oom_callback oom_cb;
    void *oom_user;
    sp_oom_report last_oom;              /* under `lock` */
    sp_stream_key *capturing;
    size_t capturing_len, capturing_cap;
    sp_runtime *next_runtime;            /* in the process's list, for threads that exit */
};

#endif /* SP_RUNTIME_H */
