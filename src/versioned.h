/* The one rule for the versioned public structs (streampool.h, "versioned structs"): each begins
 * with a uint32_t size, a call accepts any version down to the struct's first fields, reads
 * defaults for what an older struct lacks and writes nothing past the caller's size. Every call
 * that takes such a struct goes through these three helpers, so the rule lives in one place.
 * Header-only (no file to link against): config.c uses them as well as the files above it. */
#ifndef SP_VERSIONED_H
#define SP_VERSIONED_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"

/* Bytes of `type` up to and including `field`. */
#define SP__SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* The least size each call accepts: the fields every version had and the call cannot do
 * without. Shorter is refused (sp__struct_check); a size of 0 always is. */
#define SP__MIN_RUNTIME_CONFIG SP__SIZE_THROUGH(sp_runtime_config, capture_check)
#define SP__MIN_POOL_CONFIG SP__SIZE_THROUGH(sp_pool_config, cross_stream)
#define SP__MIN_REQUEST_CONFIG SP__SIZE_THROUGH(sp_request_config, expected_bytes)
#define SP__MIN_STATS offsetof(sp_stats, requested)
#define SP__MIN_STREAM_USAGE offsetof(sp_stream_usage, requested)
#define SP__MIN_PTR_INFO offsetof(sp_ptr_info, requested)
#define SP__MIN_OOM_REPORT offsetof(sp_oom_report, npools)
#define SP__MIN_REQUEST_STATS SP__SIZE_THROUGH(sp_request_stats, id)

/* The size a caller set: the struct's first four bytes, whatever its type. */
static inline uint32_t sp__struct_size(const void *s)
{
    uint32_t size;
    memcpy(&size, s, sizeof size);
    return size;
}

/* SP_OK if the caller's struct s holds at least `min` bytes. Otherwise SP_ERR_INVALID: plain for
 * s NULL (as for any missing argument), and with sp_config_error() naming `call`, `type` and the
 * .size for a size too small, the mistake `sp_stats st = {0}` makes. */
static inline int sp__struct_check(const void *s, size_t min, const char *call, const char *type)
{
    if (!s)
        return SP_ERR_INVALID;
    uint32_t size = sp__struct_size(s);
    return size < min ? sp__config_bad_size(call, type, size) : SP_OK;
}

/* Reads the caller's struct into the library's `full` one of `full_size` bytes, which holds the
 * defaults: the fields an older, shorter struct lacks keep them. full's size becomes full_size. */
static inline void sp__struct_read(void *full, size_t full_size, const void *caller)
{
    size_t size = sp__struct_size(caller);
    memcpy(full, caller, size < full_size ? size : full_size);
    uint32_t whole = (uint32_t)full_size;
    memcpy(full, &whole, sizeof whole);
}

/* Writes the library's `full` struct into the caller's, no byte past the caller's size (an
 * older program's struct ends there); the caller's size becomes the bytes written. */
static inline void sp__struct_write(void *caller, const void *full, size_t full_size)
{
    uint32_t size = sp__struct_size(caller);
    uint32_t n = size < full_size ? size : (uint32_t)full_size;
    memcpy(caller, full, n);
    memcpy(caller, &n, sizeof n);
}

#endif /* SP_VERSIONED_H */
