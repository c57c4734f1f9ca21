/* Pool settings as a string, "key:value,key:value" (SP_ALLOC_CONF and
 * sp_runtime_config.alloc_conf), in the style of PYTORCH_CUDA_ALLOC_CONF and MALLOC_CONF. A key
 * may be prefixed with a pool name and a dot; the last dot separates them, so pool names may
 * contain dots. Every entry is checked, whichever pool it names, so a typo fails at start-up
 * rather than being ignored. Hand-written: the grammar is a dozen lines, and Debian's ini and
 * JSON parsers do not speak it. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "pool.h"
#include "runtime.h"
#include "status.h"
#include "format.h"

static _Thread_local char config_error[256];

const char *sp_config_error(void)
{
    return config_error;
}

/* A piece of the string: not NUL-terminated. */
typedef struct {
    const char *p;
    size_t n;
} slice;

static slice trim(slice s)
{
    while (s.n && isspace((unsigned char)s.p[0]))
        s.p++, s.n--;
    while (s.n && isspace((unsigned char)s.p[s.n - 1]))
        s.n--;
    return s;
}

static bool equals(slice s, const char *word)
{
    return strlen(word) == s.n && strncmp(s.p, word, s.n) == 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(config_error, sizeof config_error, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s", config_error);
    return SP_ERR_CONFIG;
}

/* Bytes with an optional K/M/G/T suffix (powers of 1024), optionally followed by "B" or "iB". */
static bool parse_size(slice v, uint64_t *out)
{
    char buf[64];
    if (v.n == 0 || v.n >= sizeof buf || !isdigit((unsigned char)v.p[0]))
        return false;
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    errno = 0;
    char *end;
    unsigned long long n = strtoull(buf, &end, 10);
    if (errno)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        end++;
        if (end[0] == 'i' && toupper((unsigned char)end[1]) == 'B')
            end += 2;
        else if (toupper((unsigned char)end[0]) == 'B')
            end++;
    } else if (toupper((unsigned char)*end) == 'B') {
        end++;
    }
    if (*end || (shift && n > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)n << shift;
    return true;
}

static bool parse_int(slice v, int *out)
{
    char buf[32];
    if (v.n == 0 || v.n >= sizeof buf)
        return false;
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    errno = 0;
    char *end;
    long x = strtol(buf, &end, 10);
    if (errno || *end || x < -1000000 || x > 1000000)
        return false;
    *out = (int)x;
    return true;
}

/* Applies one key:value to cfg; SP_OK or SP_ERR_CONFIG with the message written. */
static int apply_one(sp_pool_config *cfg, slice key, slice value, char *err, size_t errlen)
{
    uint64_t size;
    bool max = equals(value, "max");
    if (equals(key, "release_threshold") || equals(key, "cache_limit")) {
        if (!max && !parse_size(value, &size))
            goto bad_size;
        if (equals(key, "release_threshold"))
            cfg->release_threshold = max ? UINT64_MAX : size;
        else
            cfg->cache_limit = max ? UINT64_MAX : size;
    } else if (equals(key, "limit") || equals(key, "reserve")) {
        if (!parse_size(value, &size))
            goto bad_size;
        if (equals(key, "limit"))
            cfg->limit = size;
        else
            cfg->reserve = size;
    } else if (equals(key, "priority")) {
        if (!parse_int(value, &cfg->priority))
            return fail(err, errlen, "SP_ALLOC_CONF: bad value '%.*s' for priority (an integer)",
                        (int)value.n, value.p);
    } else if (equals(key, "cross_stream")) {
        if (equals(value, "balanced"))
            cfg->cross_stream = SP_CROSS_STREAM_BALANCED;
        else if (equals(value, "wait"))
            cfg->cross_stream = SP_CROSS_STREAM_WAIT;
        else if (equals(value, "no_wait"))
            cfg->cross_stream = SP_CROSS_STREAM_NO_WAIT;
        else
            return fail(err, errlen,
                        "SP_ALLOC_CONF: bad value '%.*s' for cross_stream (balanced, wait or no_wait)",
                        (int)value.n, value.p);
    } else {
        return fail(err, errlen, "SP_ALLOC_CONF: unknown key '%.*s'", (int)key.n, key.p);
    }
    return SP_OK;
bad_size:
    return fail(err, errlen, "SP_ALLOC_CONF: bad value '%.*s' for %.*s (a size like 512M or 4G%s)",
                (int)value.n, value.p, (int)key.n, key.p,
                equals(key, "limit") || equals(key, "reserve") ? "" : ", or max");
}

int sp__config_check(const sp_pool_config *cfg, char *err, size_t errlen)
{
    if (cfg->limit && cfg->reserve > cfg->limit)
        return fail(err, errlen, "pool config: reserve (%llu bytes) exceeds limit (%llu bytes)",
                    (unsigned long long)cfg->reserve, (unsigned long long)cfg->limit);
    if ((unsigned)cfg->cross_stream > SP_CROSS_STREAM_NO_WAIT)
        return fail(err, errlen, "pool config: cross_stream %d is not a policy", (int)cfg->cross_stream);
    return SP_OK;
}

/* Walks conf; applies the unprefixed entries (pass 0) or those prefixed with pool_name (pass 1)
 * to cfg. Every entry is parsed in both passes, so any bad one fails. */
static int walk(sp_pool_config *cfg, const char *pool_name, const char *conf, int pass, char *err,
                size_t errlen)
{
    if (trim((slice){conf, strlen(conf)}).n == 0)
        return SP_OK; /* an empty or blank string sets nothing */
    for (const char *p = conf; *p;) {
        const char *comma = strchr(p, ',');
        slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
        p = comma ? comma + 1 : p + strlen(p);
        if (entry.n == 0)
            return fail(err, errlen, "SP_ALLOC_CONF: empty setting in '%s'", conf);
        const char *colon = memchr(entry.p, ':', entry.n);
        if (!colon)
            return fail(err, errlen, "SP_ALLOC_CONF: '%.*s' is not key:value", (int)entry.n, entry.p);
        slice key = trim((slice){entry.p, (size_t)(colon - entry.p)});
        slice value = trim((slice){colon + 1, entry.n - (size_t)(colon - entry.p) - 1});
        slice pool = {NULL, 0};
        for (size_t i = key.n; i-- > 0;) {
            if (key.p[i] == '.') {
                pool = (slice){key.p, i};
                key = (slice){key.p + i + 1, key.n - i - 1};
                break;
            }
        }
        if (pool.p && pool.n == 0)
            return fail(err, errlen, "SP_ALLOC_CONF: empty pool name before '.%.*s'", (int)key.n, key.p);
        if (equals(key, "trace")) { /* the runtime's, read by sp__config_trace_path */
            if (pool.p)
                return fail(err, errlen, "SP_ALLOC_CONF: trace is set for the runtime, not for pool '%.*s'",
                            (int)pool.n, pool.p);
            if (value.n == 0)
                return fail(err, errlen, "SP_ALLOC_CONF: trace needs a file name (trace:FILE)");
            continue;
        }
        sp_pool_config scratch = *cfg;
        bool mine = pass == 0 ? pool.p == NULL : pool.p && pool_name && equals(pool, pool_name);
        int rc = apply_one(mine ? cfg : &scratch, key, value, err, errlen);
        if (rc != SP_OK)
            return rc;
    }
    return SP_OK;
}

int sp_config_apply(sp_pool_config *cfg, const char *pool_name, const char *conf, char *err,
                    size_t errlen)
{
    sp__cuda_error_clear();
    if (!cfg || cfg->size < offsetof(sp_pool_config, cross_stream) + sizeof cfg->cross_stream)
        return SP_ERR_INVALID;
    if (!conf)
        return SP_OK;
    sp_pool_config work = SP_POOL_CONFIG_INIT;
    memcpy(&work, cfg, cfg->size < sizeof work ? cfg->size : sizeof work);
    int rc = walk(&work, pool_name, conf, 0, err, errlen);
    if (rc == SP_OK)
        rc = walk(&work, pool_name, conf, 1, err, errlen);
    if (rc == SP_OK)
        rc = sp__config_check(&work, err, errlen);
    if (rc == SP_OK)
        memcpy(cfg, &work, cfg->size < sizeof work ? cfg->size : sizeof work);
    return rc;
}

/* ---- pool names in the conf strings that no pool has had (typos) ----
 * The i-th pool-prefixed entry, counting through alloc_conf and then SP_ALLOC_CONF, owns bit i
 * of rt->conf_pools_seen, sized at sp_runtime_create for every such entry: a server with many
 * tenants sets many keys, and a pool destroyed since (a tenant unloaded) was no typo. Both
 * strings parsed at sp_runtime_create, so the walk below meets only well-formed entries. */

#define CONF_TRACKED 64 /* unknown names listed */

typedef void (*prefix_fn)(sp_runtime *rt, size_t index, slice pool, void *arg);

static void each_prefix(sp_runtime *rt, prefix_fn fn, void *arg)
{
    size_t index = 0;
    const char *confs[2] = {rt->alloc_conf, rt->env_conf};
    for (int k = 0; k < 2; k++) {
        for (const char *p = confs[k]; p && *p;) {
            const char *comma = strchr(p, ',');
            slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
            p = comma ? comma + 1 : p + strlen(p);
            const char *colon = entry.n ? memchr(entry.p, ':', entry.n) : NULL;
            if (!colon)
                continue;
            slice key = trim((slice){entry.p, (size_t)(colon - entry.p)});
            for (size_t i = key.n; i-- > 0;) {
                if (key.p[i] == '.') {
                    fn(rt, index++, (slice){key.p, i}, arg);
                    break;
                }
            }
        }
    }
}

static void count_prefix(sp_runtime *rt, size_t index, slice pool, void *arg)
{
    (void)rt, (void)pool;
    *(size_t *)arg = index + 1;
}

int sp__config_seen_init(sp_runtime *rt)
{
    size_t n = 0;
    each_prefix(rt, count_prefix, &n);
    if (n && !(rt->conf_pools_seen = calloc((n + 63) / 64, sizeof *rt->conf_pools_seen)))
        return SP_ERR_NO_HOST_MEMORY;
    return SP_OK;
}

static bool seen(const sp_runtime *rt, size_t index)
{
    return rt->conf_pools_seen[index / 64] >> (index % 64) & 1;
}

static void mark_seen(sp_runtime *rt, size_t index, slice pool, void *arg)
{
    if (equals(pool, (const char *)arg))
        rt->conf_pools_seen[index / 64] |= (uint64_t)1 << (index % 64);
}

void sp__config_pool_created(sp_runtime *rt, const char *name)
{
    each_prefix(rt, mark_seen, (void *)name);
}

typedef struct {
    slice names[CONF_TRACKED];
    size_t count;        /* unknown names, each once */
    size_t listed;       /* of them, kept in names[] */
} unknown_list;

static bool pool_alive(const sp_runtime *rt, slice name)
{
    for (const sp_pool *p = rt->pools; p; p = p->next)
        if (equals(name, p->name))
            return true;
    return false;
}

static void collect_unknown(sp_runtime *rt, size_t index, slice pool, void *arg)
{
    unknown_list *u = arg;
    if (seen(rt, index) || pool_alive(rt, pool))
        return;
    for (size_t i = 0; i < u->listed; i++)
        if (u->names[i].n == pool.n && memcmp(u->names[i].p, pool.p, pool.n) == 0)
            return;
    if (u->listed < CONF_TRACKED)
        u->names[u->listed++] = pool;
    u->count++;
}

int sp_runtime_check_config(sp_runtime *rt, char *buf, size_t len)
{
    if (!rt || (!buf && len))
        return SP_ERR_INVALID;
    sp__cuda_error_clear();
    unknown_list u = {.count = 0};
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    sp_mutex_lock(&rt->lock, SP_RANK_RUNTIME);
    each_prefix(rt, collect_unknown, &u);
    for (size_t i = 0; i < u.listed; i++)
        sp__appendf(buf, len, &used, "%s%.*s", i ? "," : "", (int)u.names[i].n, u.names[i].p);
    sp_mutex_unlock(&rt->lock);
    return u.count > INT32_MAX ? INT32_MAX : (int)u.count;
}

void sp__config_warn_unused(sp_runtime *rt)
{
    if (getenv("SP_ALLOC_CONF_QUIET"))
        return;
    unknown_list u = {.count = 0};
    each_prefix(rt, collect_unknown, &u);
    for (size_t i = 0; i < u.listed; i++)
        fprintf(stderr,
                "streampool: warning: the configuration sets keys for pool '%.*s', but no pool "
                "of that name was created (a typo?)\n",
                (int)u.names[i].n, u.names[i].p);
}

/* ---- the runtime key trace:FILE ---- */

static bool trace_value(const char *conf, slice *out)
{
    bool found = false;
    for (const char *p = conf; p && *p;) {
        const char *comma = strchr(p, ',');
        slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
        p = comma ? comma + 1 : p + strlen(p);
        const char *colon = entry.n ? memchr(entry.p, ':', entry.n) : NULL;
        if (colon && equals(trim((slice){entry.p, (size_t)(colon - entry.p)}), "trace")) {
            *out = trim((slice){colon + 1, entry.n - (size_t)(colon - entry.p) - 1});
            found = true; /* the last one wins, as for every key */
        }
    }
    return found;
}

bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len)
{
    slice v;
    if (!trace_value(rt->env_conf, &v) && !trace_value(rt->alloc_conf, &v))
        return false;
    if (len == 0 || v.n >= len)
        return false;
    memcpy(out, v.p, v.n);
    out[v.n] = '\0';
    return true;
}
