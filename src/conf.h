/* Configuration strings (config.c): parsing and checking alloc_conf / SP_ALLOC_CONF for the
 * pools and the runtime. Calls only the leaves. */
#ifndef SP_CONF_H
#define SP_CONF_H

#include "base.h"

/* ---- config.c ---- */

/* Checks a merged pool config (reserve within limit, a known policy); SP_ERR_CONFIG with the
 * message otherwise. */
int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen);
/* Allocates rt->conf_pools_seen for the pool-prefixed keys of both conf strings. */
int sp__config_seen_init(sp_runtime *rt);
/* Notes that a pool called `name` exists, for sp_runtime_check_config (rt->lock held). */
void sp__config_pool_created(sp_runtime *rt, const char *name);
/* Prints a warning on stderr for each conf pool name no pool has had (rt->lock held). */
void sp__config_warn_unused(sp_runtime *rt);
/* The value of the runtime key trace:FILE (SP_ALLOC_CONF wins over alloc_conf), copied into
 * out; false if neither string has it. */
bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len);

#endif /* SP_CONF_H */
