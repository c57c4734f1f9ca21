/* The tenant table (tenants.h): the config file's parser, one pool per tenant, and the text
 * renderings of the per-tenant counters. */
#include "tenants.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

int tenants_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > TENANT_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* A size token goes into an SP_ALLOC_CONF string: letters and digits only, so that it cannot
 * smuggle in another key. */
static int size_token_ok(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return 0;
    return 1;
}

/* Parses one non-empty line into *t and creates its pool. */
static int load_line(char *line, const char *where, sp_runtime *rt, tenant *t, char *err,
                     size_t errlen)
{
    char *save = NULL, *field[3] = {0};
    int n = 0;
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save))
        if (n++ < 3)
            field[n - 1] = tok;
    if (n < 2 || n > 3) {
        snprintf(err, errlen, "%s: expected NAME LIMIT [RESERVE]", where);
        return SP_ERR_CONFIG;
    }
    if (!tenants_name_ok(field[0])) {
        snprintf(err, errlen, "%s: tenant name '%s' is not 1 to %d of [A-Za-z0-9_.-]", where,
                 field[0], TENANT_NAME_MAX);
        return SP_ERR_CONFIG;
    }
    const char *reserve = n == 3 ? field[2] : "0";
    if (!size_token_ok(field[1]) || !size_token_ok(reserve)) {
        snprintf(err, errlen, "%s: a size is digits with an optional K, M, G or T suffix", where);
        return SP_ERR_CONFIG;
    }
    char conf[160], why[128];
    snprintf(conf, sizeof conf, "limit:%s,reserve:%s", field[1], reserve);
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    if (sp_config_apply(&cfg, NULL, conf, why, sizeof why) != SP_OK) {
        snprintf(err, errlen, "%s: %s", where, why);
        return SP_ERR_CONFIG;
    }
    int rc = sp_pool_create(rt, field[0], &cfg, &t->pool);
    if (rc != SP_OK) {
        snprintf(err, errlen, "%s: tenant '%s': %s (%s)", where, field[0], sp_strerror(rc),
                 rc == SP_ERR_CONFIG ? sp_config_error() : sp_status_name(rc));
        return rc;
    }
    snprintf(t->name, sizeof t->name, "%s", field[0]);
    /* the limit in force (whole pages, at most the device), what the pool is held to: the 413
     * check and the summary use it */
    sp_pool_config got = {.size = sizeof got};
    t->limit = sp_pool_get_config(t->pool, &got) == SP_OK ? got.limit : cfg.limit;
    t->reserve = cfg.reserve;
    return SP_OK;
}

int tenants_load(const char *path, sp_runtime *rt, tenant_table *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return SP_ERR_IO;
    }
    tenant_table t = {0};
    size_t cap = 0, cap_line = 0, lineno = 0;
    char *line = NULL;
    int rc = SP_OK;
    while (rc == SP_OK && getline(&line, &cap_line, f) >= 0) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        if (t.n == cap) {
            size_t grown = cap ? 2 * cap : 8;
            tenant *v = realloc(t.v, grown * sizeof *v);
            if (!v) {
                snprintf(err, errlen, "%s: out of host memory", path);
                rc = SP_ERR_NO_HOST_MEMORY;
                break;
            }
            t.v = v;
            cap = grown;
        }
        char where[512];
        snprintf(where, sizeof where, "%s:%zu", path, lineno);
        tenant *slot = &t.v[t.n];
        memset(slot, 0, sizeof *slot);
        rc = load_line(line, where, rt, slot, err, errlen);
        if (rc == SP_OK)
            t.n++;
    }
    if (rc == SP_OK && ferror(f)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = SP_ERR_IO;
    }
    if (rc == SP_OK && t.n == 0) {
        snprintf(err, errlen, "%s: no tenants", path);
        rc = SP_ERR_CONFIG;
    }
    free(line);
    fclose(f);
    if (rc != SP_OK) {
        (void)tenants_destroy(&t);
        return rc;
    }
    *out = t;
    return SP_OK;
}

tenant *tenants_find(const tenant_table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0)
            return &t->v[i];
    return NULL;
}

int tenants_destroy(tenant_table *t)
{
    int first = SP_OK;
    for (size_t i = 0; i < t->n; i++) {
        int rc = sp_pool_destroy(t->v[i].pool);
        if (rc != SP_OK) {
            fprintf(stderr, "streampool-server: tenant %s: sp_pool_destroy: %s\n", t->v[i].name,
                    sp_status_name(rc));
            if (first == SP_OK)
                first = rc;
        }
    }
    free(t->v);
    t->v = NULL;
    t->n = 0;
    return first;
}

static uint64_t load(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* One metric family: its HELP and TYPE lines, then a sample per tenant of the counter at
 * `field` (an offsetof in tenant). */
static size_t family(const tenant_table *t, char *buf, size_t len, size_t at, const char *name,
                     const char *type, const char *help, size_t field)
{
    at = text_put(buf, len, at, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (size_t i = 0; i < t->n; i++)
        at = text_put(buf, len, at, "%s{tenant=\"%s\"} %" PRIu64 "\n", name, t->v[i].name,
                      load((_Atomic uint64_t *)((char *)&t->v[i] + field)));
    return at;
}

size_t tenants_metrics(const tenant_table *t, char *buf, size_t len)
{
    size_t at = 0;
    at = family(t, buf, len, at, "spserver_served_requests_total", "counter",
                "Inference requests served (HTTP 200).", offsetof(tenant, served_requests));
    at = family(t, buf, len, at, "spserver_served_bytes_total", "counter",
                "Bytes the buffers of served requests asked for.", offsetof(tenant, served_bytes));
    at = text_put(buf, len, at,
                  "# HELP spserver_rejected_requests_total Inference requests refused: 429 over "
                  "the tenant's limit now, 413 larger than its limit.\n"
                  "# TYPE spserver_rejected_requests_total counter\n");
    for (size_t i = 0; i < t->n; i++) {
        at = text_put(buf, len, at,
                      "spserver_rejected_requests_total{tenant=\"%s\",code=\"429\"} %" PRIu64 "\n",
                      t->v[i].name, load(&t->v[i].rejected_limit));
        at = text_put(buf, len, at,
                      "spserver_rejected_requests_total{tenant=\"%s\",code=\"413\"} %" PRIu64 "\n",
                      t->v[i].name, load(&t->v[i].rejected_too_large));
    }
    at = family(t, buf, len, at, "spserver_request_peak_bytes", "gauge",
                "The most bytes one request had allocated at once "
                "(sp_request_stats.requested_peak), over the requests ended.",
                offsetof(tenant, request_peak_bytes));
    at = family(t, buf, len, at, "spserver_request_freed_at_end_bytes_total", "counter",
                "Bytes of buffers freed by their request's end "
                "(sp_request_stats.freed_at_end_bytes).",
                offsetof(tenant, request_freed_at_end_bytes));
    return at;
}

size_t tenants_summary(const tenant_table *t, char *buf, size_t len)
{
    size_t at = text_put(buf, len, 0, "%-20s %14s %14s %10s %16s %8s %8s\n", "tenant", "limit",
                         "reserve", "served", "served bytes", "429", "413");
    for (size_t i = 0; i < t->n; i++) {
        tenant *x = &t->v[i];
        at = text_put(buf, len, at,
                      "%-20s %14" PRIu64 " %14" PRIu64 " %10" PRIu64 " %16" PRIu64 " %8" PRIu64
                      " %8" PRIu64 "\n",
                      x->name, x->limit, x->reserve, load(&x->served_requests), load(&x->served_bytes),
                      load(&x->rejected_limit), load(&x->rejected_too_large));
    }
    return at;
}
