/* Tenants of the example server: one streampool pool each, read from a config file, with the
 * counters of what the server served and refused for them. */
#ifndef SERVER_TENANTS_H
#define SERVER_TENANTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "streampool.h"

#define TENANT_NAME_MAX SP_POOL_NAME_MAX

typedef struct tenant {
    char name[TENANT_NAME_MAX + 1];
    uint64_t limit, reserve;           /* as configured; limit 0: none */
    sp_pool *pool;
    /* Requests answered 200 and the bytes their buffers asked for; requests refused with 429
     * (over the limit now) and 413 (larger than the limit). */
    _Atomic uint64_t served_requests, served_bytes, rejected_limit, rejected_too_large;
    /* Of the request scopes ended, served or not: the most bytes one had allocated at once, and
     * the bytes their ends freed (every buffer of a request is freed by its end). */
    _Atomic uint64_t request_peak_bytes, request_freed_at_end_bytes;
} tenant;

typedef struct tenant_table {
    tenant *v;
    size_t n;
} tenant_table;

/* Reads `path`: one tenant a line, "NAME LIMIT [RESERVE]", sizes as in SP_ALLOC_CONF (bytes
 * with an optional K, M, G or T suffix; LIMIT 0: none), '#' starts a comment. NAME is 1 to
 * TENANT_NAME_MAX characters of [A-Za-z0-9_.-]. Creates a pool per tenant in rt. On error
 * writes a message naming the line into err, destroys what it created and returns a negative
 * streampool status (SP_ERR_CONFIG for the file's own mistakes, SP_ERR_IO if it cannot be read). */
int tenants_load(const char *path, sp_runtime *rt, tenant_table *out, char *err, size_t errlen);

tenant *tenants_find(const tenant_table *t, const char *name);

/* Whether `name` may name a tenant or a gate: 1 to TENANT_NAME_MAX of [A-Za-z0-9_.-], so that
 * it needs no escaping in JSON, Prometheus labels or URLs. */
int tenants_name_ok(const char *name);

/* Destroys every tenant's pool and frees the table. Returns the first error (SP_ERR_BUSY: a pool
 * still had live allocations, which is a leak); it goes on with the others regardless. */
int tenants_destroy(tenant_table *t);

/* The served, rejected and request-scope figures in the Prometheus text format, snprintf-style:
 * writes into buf (NUL-terminated when len > 0) and returns the length the whole text needs. */
size_t tenants_metrics(const tenant_table *t, char *buf, size_t len);

/* One line per tenant for people: limit, reserve, served and refused. snprintf-style. */
size_t tenants_summary(const tenant_table *t, char *buf, size_t len);

#endif
