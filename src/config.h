/* Configuration strings (config.c): parsing and checking alloc_conf / SP_ALLOC_CONF for the
 * pools and the runtime, from the one table of keys (conf_keys.h). Calls only the leaves. */
#ifndef SP_CONF_H
#define SP_CONF_H

#include "base.h"

/* ---- config.c ---- */

/* Both conf strings of a runtime, parsed once (config.c's own struct). */
typedef struct sp_conf sp_conf;

/* Checks a merged pool config (reserve within limit, a known policy); SP_ERR_CONFIG with the
 * message otherwise. */
int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen);
/* Parses the runtime's alloc_conf and SP_ALLOC_CONF (either NULL: none; both copied) for
 * `device`, checking every entry whichever pool it names; SP_ERR_CONFIG with the message for
 * sp_config_error, SP_ERR_NO_HOST_MEMORY. Linear in the strings' length. */
int sp__config_new(const char *alloc_conf, const char *env, int device, sp_conf **out);
void sp__config_free(sp_conf *c);
/* The configuration of a new pool `name`: the code's (`code`, NULL: defaults), then
 * dev->conf's alloc_conf, then its SP_ALLOC_CONF; checked, its limit clamped to the device's
 * memory (with a warning) and put in whole driver pages, the limit in force (the runtime's lock
 * held, or the runtime not yet shared). */
#define SP__CONF_CURRENT (-1)
#define SP__CONF_SYNTAX (-2)
int sp__config_for_pool(const sp_device *dev, const char *name, const sp_pool_config *code,
                        sp_pool_config *out);
/* The limit in force for a pool `name` configured with *limit (0: none): clamped to the
 * device's memory with a warning on stderr (unless SP_ALLOC_CONF_QUIET), then rounded down to
 * whole driver pages; SP_ERR_CONFIG (with the message) for a limit below one page. For
 * sp__config_for_pool, and for a limit changed at run time (sp_pool_set_limit), so that both
 * show the same figure (the runtime's lock held, or the runtime not yet shared: it caches the
 * device's size). */
int sp__config_limit_in_force(const sp_device *dev, const char *name, uint64_t *limit);
/* Sets the message sp_config_error() returns (printf-style) and returns `status`: for errors
 * other than SP_ERR_CONFIG that a caller needs words for (a struct's .size, a busy runtime). */
int sp__config_errorf(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* SP_ERR_INVALID for a versioned struct whose .size (`got`) is too small, with a message naming
 * the call, the type and the field. */
int sp__config_bad_size(const char *call, const char *type, size_t got);
/* Notes that the creation of a pool called `name` returned `status` (SP_OK: it exists), for
 * sp_runtime_check_config and the warnings: a failed one was no typo (the runtime's lock held). */
void sp__config_pool_created(const sp_device *dev, const char *name, int status);
/* sp_runtime_check_config's list: the conf pool names no pool has had, comma-separated into
 * buf (truncated to len, NUL-terminated if len); returns how many (the runtime's lock held). */
size_t sp__config_unseen(const sp_device *dev, char *buf, size_t len);
/* Prints a warning on stderr for each conf pool name no pool has had (the runtime's lock held). */
void sp__config_warn_unused(const sp_device *dev);
/* The value of the runtime key trace:FILE (SP_ALLOC_CONF wins over alloc_conf), copied into
 * out; false if neither string has it. */
bool sp__config_trace_path(const sp_device *dev, char *out, size_t len);
/* The runtime key check_free_order:1 (SP_ALLOC_CONF wins over alloc_conf): sp_free checks that
 * a free on another stream than the allocation's is ordered after it (free_order.c). */
bool sp__config_check_free_order(const sp_device *dev);

#endif /* SP_CONF_H */
