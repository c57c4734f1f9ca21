/* Configuration strings (config.c): parsing and checking alloc_conf / SP_ALLOC_CONF for the
 * pools and the runtime. Calls only the leaves. */
#ifndef SP_CONF_H
#define SP_CONF_H

#include "base.h"

/* ---- config.c ---- */

/* Checks a merged pool config (reserve within limit, a known policy); SP_ERR_CONFIG with the
 * message otherwise. */
int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen);
/* SP_ALLOC_CONF's syntax applied to cfg for pool_name, a percentage ("limit:80%") taken of
 * `device`'s memory, or of the caller's current device (SP__CONF_CURRENT), or read as 0 where the
 * string is only checked (SP__CONF_SYNTAX). sp_config_apply is this with SP__CONF_CURRENT. */
#define SP__CONF_CURRENT (-1)
#define SP__CONF_SYNTAX (-2)
int sp__config_apply_on(sp_pool_config *cfg, const char *pool_name, const char *conf, int device,
                        char *err, size_t errlen);
/* Sets the message sp_config_error() returns (printf-style) and returns `status`: for errors
 * other than SP_ERR_CONFIG that a caller needs words for (a struct's .size, a busy runtime). */
int sp__errorf(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* SP_ERR_INVALID for a versioned struct whose .size (`got`) is too small, with a message naming
 * the call, the type and the field. */
int sp__bad_size(const char *call, const char *type, size_t got);
/* Allocates rt->conf_pools_seen for the pool-prefixed keys of both conf strings. */
int sp__config_seen_init(sp_runtime *rt);
/* Notes that a pool called `name` exists, for sp_runtime_check_config (rt->lock held). */
void sp__config_pool_created(sp_runtime *rt, const char *name);
/* Prints a warning on stderr for each conf pool name no pool has had (rt->lock held). */
void sp__config_warn_unused(sp_runtime *rt);
/* The value of the runtime key trace:FILE (SP_ALLOC_CONF wins over alloc_conf), copied into
 * out; false if neither string has it. */
bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len);
/* The runtime key check_free_order:1 (SP_ALLOC_CONF wins over alloc_conf): sp_free checks that
 * a free on another stream than the allocation's is ordered after it (free_order.c). */
bool sp__config_check_free_order(const sp_runtime *rt);

#endif /* SP_CONF_H */
