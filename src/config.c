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
#include <strings.h>

#include "conf.h"
#include "cuda_calls.h"
#include "pool.h"
#include "runtime.h"
#include "status.h"
#include "format.h"
#include "versioned.h"

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

int sp__errorf(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(config_error, sizeof config_error, fmt, ap);
    va_end(ap);
    return status;
}

/* Case-insensitive, for values: keywords and suffixes read the same in any case. */
/* The one message for a versioned struct whose .size the caller did not set: `sp_stats st =
 * {0}` is the C habit, and a bare SP_ERR_INVALID does not say what is missing. A zero size is
 * refused rather than read as "the current size": a program built against an older, shorter
 * struct would then be written past its end. */
int sp__bad_size(const char *call, const char *type, size_t got)
{
    return sp__errorf(SP_ERR_INVALID,
                      "%s: the %s's .size is %zu, %s: set .size = sizeof(%s) (or start from its "
                      "_INIT macro) before the call",
                      call, type, got, got ? "smaller than any version of it" : "not set", type);
}

static bool equals_word(slice s, const char *word)
{
    return strlen(word) == s.n && strncasecmp(s.p, word, s.n) == 0;
}

/* Bytes with an optional K/M/G/T suffix (powers of 1024), optionally followed by "B" or "iB",
 * any case; blanks may stand between the number and its suffix ("1 G" reads as "1G", as "limit:
 * 1G" does), so that no spacing is refused here and accepted there. */
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
    while (*end == ' ' || *end == '\t')
        end++;
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
        if (toupper((unsigned char)end[0]) == 'I' && toupper((unsigned char)end[1]) == 'B')
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

/* "80%" or "12.5%": a share of the device's memory, in millionths (0 < share <= 100%). */
static bool parse_percent(slice v, uint64_t *millionths)
{
    if (v.n < 2 || v.p[v.n - 1] != '%')
        return false;
    slice num = trim((slice){v.p, v.n - 1});
    uint64_t whole = 0, frac = 0, scale = 10000; /* 1% = 10000 millionths */
    size_t i = 0;
    for (; i < num.n && isdigit((unsigned char)num.p[i]); i++) {
        whole = whole * 10 + (uint64_t)(num.p[i] - '0');
        if (whole > 100)
            return false;
    }
    if (i == 0)
        return false;
    if (i < num.n && num.p[i] == '.') {
        size_t digits = 0;
        for (i++; i < num.n && isdigit((unsigned char)num.p[i]); i++, digits++)
            if (scale > 1) {
                scale /= 10;
                frac += (uint64_t)(num.p[i] - '0') * scale;
            }
        if (digits == 0)
            return false;
    }
    uint64_t share = whole * 10000 + frac;
    if (i != num.n || share == 0 || share > 1000000)
        return false;
    *millionths = share;
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

/* Where a percentage ("limit:80%") finds the device's memory: `device`'s total, read once per
 * walk; SP__CONF_CURRENT the caller's current device (sp_config_apply); SP__CONF_SYNTAX none:
 * the string is only checked (sp_runtime_create, before the device is), a percentage reads 0. */
typedef struct {
    int device;
    bool have_total;
    uint64_t total;
} conf_ctx;

static int size_value(conf_ctx *ctx, slice key, slice value, uint64_t *out, char *err,
                      size_t errlen)
{
    uint64_t share;
    if (parse_size(value, out))
        return SP_OK;
    if (!parse_percent(value, &share))
        return fail(err, errlen,
                    "SP_ALLOC_CONF: bad value '%.*s' for %.*s (a size like 512M or 4G, a share of "
                    "the device like 80%%%s)",
                    (int)value.n, value.p, (int)key.n, key.p,
                    equals(key, "limit") || equals(key, "reserve") ? "" : ", or max");
    if (ctx->device == SP__CONF_SYNTAX) {
        *out = 0;
        return SP_OK;
    }
    if (!ctx->have_total) {
        int device = ctx->device;
        uint64_t free_b;
        int rc = device == SP__CONF_CURRENT ? sp__cuda_current_device(&device) : SP_OK;
        if (rc == SP_OK)
            rc = sp__cuda_mem_info(device, &free_b, &ctx->total);
        if (rc != SP_OK)
            return fail(err, errlen,
                        "SP_ALLOC_CONF: %.*s:%.*s needs the device's memory size, which CUDA did "
                        "not give (%s)",
                        (int)key.n, key.p, (int)value.n, value.p, sp_strerror(rc));
        ctx->have_total = true;
    }
    *out = ctx->total / 1000000 * share + ctx->total % 1000000 * share / 1000000;
    return SP_OK;
}

/* Applies one key:value to cfg; SP_OK or SP_ERR_CONFIG with the message written. */
static int apply_one(sp_pool_config *cfg, slice key, slice value, conf_ctx *ctx, char *err,
                     size_t errlen)
{
    uint64_t size = 0;
    bool max = equals_word(value, "max");
    if (equals(key, "release_threshold") || equals(key, "cache_limit")) {
        int rc = max ? SP_OK : size_value(ctx, key, value, &size, err, errlen);
        if (rc != SP_OK)
            return rc;
        if (equals(key, "release_threshold"))
            cfg->release_threshold = max ? UINT64_MAX : size;
        else
            cfg->cache_limit = max ? UINT64_MAX : size;
    } else if (equals(key, "limit") || equals(key, "reserve")) {
        int rc = size_value(ctx, key, value, &size, err, errlen);
        if (rc != SP_OK)
            return rc;
        if (equals(key, "limit"))
            cfg->limit = size;
        else
            cfg->reserve = size;
    } else if (equals(key, "priority")) {
        if (!parse_int(value, &cfg->priority))
            return fail(err, errlen, "SP_ALLOC_CONF: bad value '%.*s' for priority (an integer)",
                        (int)value.n, value.p);
    } else if (equals(key, "cross_stream")) {
        if (equals_word(value, "balanced"))
            cfg->cross_stream = SP_CROSS_STREAM_BALANCED;
        else if (equals_word(value, "wait"))
            cfg->cross_stream = SP_CROSS_STREAM_WAIT;
        else if (equals_word(value, "no_wait"))
            cfg->cross_stream = SP_CROSS_STREAM_NO_WAIT;
        else
            return fail(err, errlen,
                        "SP_ALLOC_CONF: bad value '%.*s' for cross_stream (balanced, wait or no_wait)",
                        (int)value.n, value.p);
    } else {
        return fail(err, errlen, "SP_ALLOC_CONF: unknown key '%.*s'", (int)key.n, key.p);
    }
    return SP_OK;
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

/* One entry "pool.key:value" split at its colon and at the key's last dot (pool.p NULL: no
 * prefix); false if it has no colon. */
static bool split_entry(slice entry, slice *pool, slice *key, slice *value)
{
    const char *colon = memchr(entry.p, ':', entry.n);
    if (!colon)
        return false;
    *key = trim((slice){entry.p, (size_t)(colon - entry.p)});
    *value = trim((slice){colon + 1, entry.n - (size_t)(colon - entry.p) - 1});
    *pool = (slice){NULL, 0};
    for (size_t i = key->n; i-- > 0;) {
        if (key->p[i] == '.') {
            *pool = (slice){key->p, i};
            *key = (slice){key->p + i + 1, key->n - i - 1};
            break;
        }
    }
    return true;
}

/* Whether an entry of conf before `upto` sets the same key for the same pool. */
static bool set_before(const char *conf, const char *upto, slice pool, slice key)
{
    for (const char *p = conf; p < upto && *p;) {
        const char *comma = strchr(p, ',');
        slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
        p = comma ? comma + 1 : p + strlen(p);
        slice epool, ekey, evalue;
        if (entry.p >= upto || !split_entry(entry, &epool, &ekey, &evalue))
            continue;
        if (ekey.n != key.n || memcmp(ekey.p, key.p, key.n) != 0)
            continue;
        if ((epool.p == NULL) == (pool.p == NULL) &&
            (!pool.p || (epool.n == pool.n && memcmp(epool.p, pool.p, pool.n) == 0)))
            return true;
    }
    return false;
}

/* A key's pool prefix must be a name a pool can have (names.c), so that a typo or stray bytes
 * fail here and every message can show it as it is. */
static int check_prefix(slice pool, slice key, char *err, size_t errlen)
{
    char name[SP_POOL_NAME_MAX + 1];
    if (pool.n == 0)
        return fail(err, errlen, "SP_ALLOC_CONF: empty pool name before '.%.*s'", (int)key.n,
                    key.p);
    if (pool.p[pool.n - 1] == '.')
        return fail(err, errlen,
                    "SP_ALLOC_CONF: pool name '%.*s' ends with a dot before '.%.*s' (one dot "
                    "separates pool and key: '%.*s.%.*s')",
                    (int)pool.n, pool.p, (int)key.n, key.p, (int)(pool.n - 1), pool.p, (int)key.n,
                    key.p);
    if (pool.n > SP_POOL_NAME_MAX)
        return fail(err, errlen,
                    "SP_ALLOC_CONF: the pool name before '.%.*s' is longer than %d bytes",
                    (int)key.n, key.p, SP_POOL_NAME_MAX);
    memcpy(name, pool.p, pool.n);
    name[pool.n] = '\0';
    if (sp__pool_name_check(name) != SP_OK)
        return fail(err, errlen,
                    "SP_ALLOC_CONF: the pool name before '.%.*s' is not UTF-8 without control "
                    "characters, which no pool can be named",
                    (int)key.n, key.p);
    return SP_OK;
}

/* Walks conf; applies the unprefixed entries (pass 0) or those prefixed with pool_name (pass 1)
 * to cfg. Every entry is parsed in both passes, so any bad one fails. An unprefixed reserve is
 * the default pool's alone (and what a caller asking for unprefixed keys, pool_name NULL, gets):
 * memory set aside for every pool of a server, named or not, is never what an operator means,
 * and it would refuse every pool created with a smaller limit. */
static int walk(sp_pool_config *cfg, const char *pool_name, const char *conf, int pass,
                conf_ctx *ctx, char *err, size_t errlen)
{
    if (trim((slice){conf, strlen(conf)}).n == 0)
        return SP_OK; /* an empty or blank string sets nothing */
    for (const char *p = conf; *p;) {
        const char *comma = strchr(p, ',');
        slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
        p = comma ? comma + 1 : p + strlen(p);
        if (entry.n == 0)
            return fail(err, errlen, "SP_ALLOC_CONF: empty setting in '%s'", conf);
        slice pool, key, value;
        if (!split_entry(entry, &pool, &key, &value))
            return fail(err, errlen, "SP_ALLOC_CONF: '%.*s' is not key:value", (int)entry.n, entry.p);
        if (pool.p) {
            int rc = check_prefix(pool, key, err, errlen);
            if (rc != SP_OK)
                return rc;
        }
        if (set_before(conf, entry.p, pool, key))
            return fail(err, errlen, "SP_ALLOC_CONF: '%.*s%s%.*s' is set twice",
                        (int)pool.n, pool.p ? pool.p : "", pool.p ? "." : "", (int)key.n, key.p);
        if (equals(key, "trace")) { /* the runtime's, read by sp__config_trace_path */
            if (pool.p)
                return fail(err, errlen, "SP_ALLOC_CONF: trace is set for the runtime, not for pool '%.*s'",
                            (int)pool.n, pool.p);
            if (value.n == 0)
                return fail(err, errlen, "SP_ALLOC_CONF: trace needs a file name (trace:FILE)");
            continue;
        }
        if (equals(key, "check_free_order")) { /* the runtime's: sp__config_check_free_order */
            if (pool.p)
                return fail(err, errlen, "SP_ALLOC_CONF: check_free_order is set for the "
                                         "runtime, not for pool '%.*s'", (int)pool.n, pool.p);
            if (!equals(value, "0") && !equals(value, "1"))
                return fail(err, errlen, "SP_ALLOC_CONF: check_free_order is 0 or 1, not '%.*s'",
                            (int)value.n, value.p);
            continue;
        }
        sp_pool_config scratch = *cfg;
        bool mine = pass == 0 ? pool.p == NULL : pool.p && pool_name && equals(pool, pool_name);
        if (mine && pass == 0 && equals(key, "reserve") && pool_name &&
            strcmp(pool_name, "default") != 0)
            mine = false;
        int rc = apply_one(mine ? cfg : &scratch, key, value, ctx, err, errlen);
        if (rc != SP_OK)
            return rc;
    }
    return SP_OK;
}

int sp__config_apply_on(sp_pool_config *cfg, const char *pool_name, const char *conf, int device,
                        char *err, size_t errlen)
{
    int rc = sp__struct_check(cfg, SP__MIN_POOL_CONFIG, "sp_config_apply", "sp_pool_config");
    if (rc != SP_OK || !conf)
        return rc;
    conf_ctx ctx = {device, false, 0};
    sp_pool_config work = SP_POOL_CONFIG_INIT;
    sp__struct_read(&work, sizeof work, cfg);
    rc = walk(&work, pool_name, conf, 0, &ctx, err, errlen);
    if (rc == SP_OK)
        rc = walk(&work, pool_name, conf, 1, &ctx, err, errlen);
    if (rc == SP_OK)
        rc = sp__config_check(&work, err, errlen);
    if (rc == SP_OK)
        sp__struct_write(cfg, &work, sizeof work);
    return rc;
}

int sp_config_apply(sp_pool_config *cfg, const char *pool_name, const char *conf, char *err,
                    size_t errlen)
{
    sp__cuda_error_clear();
    return sp__config_apply_on(cfg, pool_name, conf, SP__CONF_CURRENT, err, errlen);
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

/* A pool whose name differs from `name` only in case: what "CHAT.limit" most likely meant. */
static const sp_pool *near_match(const sp_runtime *rt, slice name)
{
    for (const sp_pool *p = rt->pools; p; p = p->next)
        if (equals_word(name, p->name))
            return p;
    return NULL;
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
    for (size_t i = 0; i < u.listed; i++) {
        const sp_pool *near = near_match(rt, u.names[i]);
        fprintf(stderr,
                "streampool: warning: the configuration sets keys for pool '%.*s', but no pool "
                "of that name was created (%s%s%s)\n",
                (int)u.names[i].n, u.names[i].p,
                near ? "pool names are case-sensitive: did you mean '" : "a typo?",
                near ? near->name : "", near ? "'?" : "");
    }
}

/* ---- the runtime keys trace:FILE and check_free_order:0|1 ---- */

static bool runtime_value(const char *conf, const char *name, slice *out)
{
    bool found = false;
    for (const char *p = conf; p && *p;) {
        const char *comma = strchr(p, ',');
        slice entry = trim((slice){p, comma ? (size_t)(comma - p) : strlen(p)});
        p = comma ? comma + 1 : p + strlen(p);
        const char *colon = entry.n ? memchr(entry.p, ':', entry.n) : NULL;
        if (colon && equals(trim((slice){entry.p, (size_t)(colon - entry.p)}), name)) {
            *out = trim((slice){colon + 1, entry.n - (size_t)(colon - entry.p) - 1});
            found = true; /* the last one wins, as for every key */
        }
    }
    return found;
}

bool sp__config_trace_path(const sp_runtime *rt, char *out, size_t len)
{
    slice v;
    if (!runtime_value(rt->env_conf, "trace", &v) && !runtime_value(rt->alloc_conf, "trace", &v))
        return false;
    if (len == 0 || v.n >= len)
        return false;
    memcpy(out, v.p, v.n);
    out[v.n] = '\0';
    return true;
}

bool sp__config_check_free_order(const sp_runtime *rt)
{
    slice v;
    return (runtime_value(rt->env_conf, "check_free_order", &v) ||
            runtime_value(rt->alloc_conf, "check_free_order", &v)) &&
           equals(v, "1");
}
