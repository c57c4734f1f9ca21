/* The one table of SP_ALLOC_CONF keys (config.c), one row per key, in the style of mimalloc's
 * options table. Each row drives the parser (config.c reads its rows, nothing else names a key),
 * the defaults (SP_POOL_CONFIG_INIT's values are checked against DEFAULT by test_config), and
 * README's key table (tools/sp-conf-doc prints it from these rows; the conf_doc test fails when
 * README's copy differs). Included by config.c and by that tool alone: it needs only the public
 * header.
 *
 * SP__CONF_POOL_KEYS(X): X(NAME, TYPE, DEFAULT, DEFAULT_TEXT, DOC), a field of sp_pool_config.
 * SP__CONF_RUNTIME_KEYS(X): X(NAME, TYPE, DEFAULT_TEXT, DOC), the runtime's (no pool prefix).
 * TYPE is one of sp__conf_type's names without the prefix. DOC is Markdown, one line. */
#ifndef SP_CONF_KEYS_H
#define SP_CONF_KEYS_H

#include <stdint.h>

#include "streampool.h"

typedef enum {
    SP__CONF_SIZE,      /* bytes (K/M/G/T, fractions "1.5G") or a share of the device ("80%") */
    SP__CONF_SIZE_OR_MAX,/* the same, or "max" (UINT64_MAX) */
    SP__CONF_INT,       /* an integer in [-1000000, 1000000] */
    SP__CONF_POLICY,    /* balanced | wait | no_wait (sp_cross_stream_policy) */
    SP__CONF_FLAG,      /* 0 | 1 */
    SP__CONF_PATH,      /* a file name, not empty */
} sp__conf_type;

#define SP__CONF_POOL_KEYS(X)                                                                   \
    X(release_threshold, SIZE_OR_MAX, UINT64_MAX, "max",                                          \
      "bytes the `cudaMemPool` keeps at a synchronize, or `max`; kept within [reserve, limit]") \
    X(cache_limit, SIZE_OR_MAX, UINT64_MAX, "max", "freed bytes the stream caches keep, or `max`") \
    X(limit, SIZE, 0, "0",                                                                     \
      "most bytes the pool may hold from the device, `0` for none; in force in whole 2 MiB "    \
      "pages (`3M` holds 2 MiB), and at most the device's memory (a larger one is clamped to "  \
      "it, with a warning)")                                                                   \
    X(reserve, SIZE, 0, "0",                                                                   \
      "bytes taken at creation and kept; an unprefixed `reserve` is the default pool's alone")  \
    X(priority, INT, 0, "0", "integer; lower is reclaimed first")                              \
    X(cross_stream, POLICY, SP_CROSS_STREAM_BALANCED, "balanced",                              \
      "`balanced`, `wait` or `no_wait` (see `streampool.h`)")

#define SP__CONF_RUNTIME_KEYS(X)                                                                \
    X(trace, PATH, "none", "a file: the runtime's allocation trace (below)")                   \
    X(check_free_order, FLAG, "0",                                                             \
      "`1`: `sp_free` checks that a free on another stream than the allocation's is ordered "   \
      "after it (below)")

#endif /* SP_CONF_KEYS_H */
