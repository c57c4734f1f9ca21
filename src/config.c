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

#include "config.h"
#include "names.h"
#include "conf_keys.h"
#include "classes.h"
#include "cuda.h"
#include "device.h"
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

int sp__config_errorf(int status, const char *fmt, ...)
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
int sp__config_bad_size(const char *call, const char *type, size_t got)
{
    return sp__config_errorf(SP_ERR_INVALID,
                      "%s: the %s's .size is %zu, %s: set .size = sizeof(%s) (or start from its "
                      "_INIT macro) before the call",
                      call, type, got, got ? "smaller than any version of it" : "not set", type);
}

static bool equals_word(slice s, const char *word)
{
    return strlen(word) == s.n && strncasecmp(s.p, word, s.n) == 0;
}

/* ---- values ---- */

/* Bytes with an optional K/M/G/T suffix (powers of 1024), optionally followed by "B" or "iB",
 * any case; blanks may stand between the number and its suffix ("1 G" reads as "1G", as "limit:
 * 1G" does), so that no spacing is refused here and accepted there. A suffixed number may have
 * a fraction ("0.5G", "1.5G"), as a percentage may ("12.5%"): the bytes are rounded down. A
 * plain byte count has none (half a byte is no size). */
static bool parse_size(slice v, uint64_t *out)
{
    size_t i = 0;
    uint64_t whole = 0, frac = 0, scale = 1; /* the fraction is frac / scale */
    if (v.n == 0 || !isdigit((unsigned char)v.p[0]))
        return false;
    for (; i < v.n && isdigit((unsigned char)v.p[i]); i++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return false;
        whole = whole * 10 + (uint64_t)(v.p[i] - '0');
    }
    bool dot = i < v.n && v.p[i] == '.';
    if (dot) {
        size_t digits = 0;
        for (i++; i < v.n && isdigit((unsigned char)v.p[i]); i++, digits++)
            if (scale < 1000000000000ull) { /* 12 digits: finer than a byte of a terabyte */
                frac = frac * 10 + (uint64_t)(v.p[i] - '0');
                scale *= 10;
            }
        if (digits == 0)
            return false;
    }
    while (i < v.n && (v.p[i] == ' ' || v.p[i] == '\t'))
        i++;
    unsigned shift = 0;
    switch (i < v.n ? toupper((unsigned char)v.p[i]) : 0) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        i++;
        if (i + 2 <= v.n && toupper((unsigned char)v.p[i]) == 'I' &&
            toupper((unsigned char)v.p[i + 1]) == 'B')
            i += 2;
        else if (i < v.n && toupper((unsigned char)v.p[i]) == 'B')
            i++;
    } else if (i < v.n && toupper((unsigned char)v.p[i]) == 'B') {
        i++;
    }
    if (i != v.n || (dot && !shift) || whole > (UINT64_MAX >> shift))
        return false;
    uint64_t bytes = whole << shift;
    /* frac / scale of 2^shift, with no overflow: scale < 10^13 and 2^shift <= 2^40 would pass
     * 64 bits together, so the unit is split in 2^20 steps */
    uint64_t part = shift > 20 ? (frac << 20) / scale << (shift - 20)
                               : (frac << shift) / scale;
    if (bytes > UINT64_MAX - part)
        return false;
    *out = bytes + part;
    return true;
}

/* "80%" or "12.5%": a share of the device's memory, in millionths (0 < share <= 1000%). A
 * share above 100% reads like a size above the device's: the pool clamps either to the device,
 * with a warning (sp__config_for_pool), so that "150%" and "100G" on a 16 GiB device are one
 * case. */
static bool parse_percent(slice v, uint64_t *millionths)
{
    if (v.n < 2 || v.p[v.n - 1] != '%')
        return false;
    slice num = trim((slice){v.p, v.n - 1});
    uint64_t whole = 0, frac = 0, scale = 10000; /* 1% = 10000 millionths */
    size_t i = 0;
    for (; i < num.n && isdigit((unsigned char)num.p[i]); i++) {
        whole = whole * 10 + (uint64_t)(num.p[i] - '0');
        if (whole > 1000)
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
    if (i != num.n || share == 0 || share > 10000000)
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

/* ---- the table ---- */

typedef struct {
    const char *name;
    sp__conf_type type;
    bool pool;              /* a pool's key; else the runtime's, never prefixed */
    size_t offset, width;   /* a pool key's field in sp_pool_config */
} conf_key;

static const conf_key keys[] = {
#define POOL_KEY(n, t, def, def_text, doc)                                                    \
    {#n, SP__CONF_##t, true, offsetof(sp_pool_config, n), sizeof(((sp_pool_config *)0)->n)},
    SP__CONF_POOL_KEYS(POOL_KEY)
#undef POOL_KEY
#define RUNTIME_KEY(n, t, def_text, doc) {#n, SP__CONF_##t, false, 0, 0},
    SP__CONF_RUNTIME_KEYS(RUNTIME_KEY)
#undef RUNTIME_KEY
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])
_Static_assert(KEY_COUNT <= 32, "conf_group.set has a bit per key");

static int key_of(slice name)
{
    for (size_t k = 0; k < KEY_COUNT; k++)
        if (equals(name, keys[k].name))
            return (int)k;
    return -1;
}

/* Where a percentage ("limit:80%") finds the device's memory: `device`'s total, read once;
 * SP__CONF_CURRENT the caller's current device (sp_config_apply); SP__CONF_SYNTAX none: the
 * string is only checked (sp_runtime_create, before the device is), a percentage reads 0. */
typedef struct {
    int device;
    bool have_total;
    uint64_t total;
} conf_ctx;

static int device_total(conf_ctx *ctx, uint64_t *total)
{
    if (!ctx->have_total) {
        int device = ctx->device;
        uint64_t free_b;
        int rc = device == SP__CONF_CURRENT ? sp__cuda_current_device(&device) : SP_OK;
        if (rc == SP_OK)
            rc = sp__cuda_mem_info(device, &free_b, &ctx->total);
        if (rc != SP_OK)
            return rc;
        ctx->have_total = true;
    }
    *total = ctx->total;
    return SP_OK;
}

static int size_value(conf_ctx *ctx, const conf_key *key, slice value, uint64_t *out, char *err,
                      size_t errlen)
{
    uint64_t share, total;
    if (key->type == SP__CONF_SIZE_OR_MAX && equals_word(value, "max")) {
        *out = UINT64_MAX;
        return SP_OK;
    }
    if (parse_size(value, out))
        return SP_OK;
    if (!parse_percent(value, &share))
        return fail(err, errlen,
                    "SP_ALLOC_CONF: bad value '%.*s' for %s (a size like 512M, 1.5G or 4G, a share "
                    "of the device like 80%%%s)",
                    (int)value.n, value.p, key->name,
                    key->type == SP__CONF_SIZE_OR_MAX ? ", or max" : "");
    if (ctx->device == SP__CONF_SYNTAX) {
        *out = 0;
        return SP_OK;
    }
    int rc = device_total(ctx, &total);
    if (rc != SP_OK)
        return fail(err, errlen,
                    "SP_ALLOC_CONF: %s:%.*s needs the device's memory size, which CUDA did not "
                    "give (%s)",
                    key->name, (int)value.n, value.p, sp_strerror(rc));
    *out = total / 1000000 * share + total % 1000000 * share / 1000000;
    return SP_OK;
}

/* Reads one value of keys[k]; a pool key's is written into cfg (NULL: only checked). */
static int apply_value(sp_pool_config *cfg, int k, slice value, conf_ctx *ctx, char *err,
                       size_t errlen)
{
    const conf_key *key = &keys[k];
    uint64_t u = 0;
    int i = 0, rc = SP_OK;
    switch (key->type) {
    case SP__CONF_SIZE:
    case SP__CONF_SIZE_OR_MAX:
        rc = size_value(ctx, key, value, &u, err, errlen);
        break;
    case SP__CONF_INT:
        if (!parse_int(value, &i))
            return fail(err, errlen, "SP_ALLOC_CONF: bad value '%.*s' for %s (an integer)",
                        (int)value.n, value.p, key->name);
        break;
    case SP__CONF_POLICY:
        if (equals_word(value, "balanced"))
            i = SP_CROSS_STREAM_BALANCED;
        else if (equals_word(value, "wait"))
            i = SP_CROSS_STREAM_WAIT;
        else if (equals_word(value, "no_wait"))
            i = SP_CROSS_STREAM_NO_WAIT;
        else
            return fail(err, errlen,
                        "SP_ALLOC_CONF: bad value '%.*s' for %s (balanced, wait or no_wait)",
                        (int)value.n, value.p, key->name);
        break;
    case SP__CONF_FLAG:
        if (!equals(value, "0") && !equals(value, "1"))
            return fail(err, errlen, "SP_ALLOC_CONF: %s is 0 or 1, not '%.*s'", key->name,
                        (int)value.n, value.p);
        break;
    case SP__CONF_PATH:
        if (value.n == 0)
            return fail(err, errlen, "SP_ALLOC_CONF: %s needs a file name (%s:FILE)", key->name,
                        key->name);
        break;
    }
    if (rc != SP_OK || !cfg || !key->pool)
        return rc;
    if (key->width == sizeof u)
        memcpy((char *)cfg + key->offset, &u, sizeof u);
    else
        memcpy((char *)cfg + key->offset, &i, sizeof i);
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

/* ---- the parsed strings ----
 * Both strings are read once, at sp_runtime_create, into entries grouped by pool prefix (group
 * 0: the unprefixed keys), with a hash table of the groups by name, and one of them by name in
 * any case for the "did you mean" hint. A pool's creation then reads only its own group and
 * group 0, and every check (a key set twice, a name no pool had) is a look-up: parsing is
 * linear in the strings' length, however many pools they name. */

#define NONE UINT32_MAX

typedef struct {
    slice value;
    uint32_t key;           /* in keys[] */
    uint32_t source;        /* 0: alloc_conf, 1: SP_ALLOC_CONF (applied after) */
    uint32_t next;          /* the group's next entry, NONE at the end */
} conf_entry;

enum { POOL_NOT_SEEN, POOL_CREATED, POOL_FAILED };

typedef struct {
    slice name;             /* the prefix; {NULL, 0} for group 0 */
    uint32_t first, last;   /* entries */
    uint32_t next, next_fold; /* hash chains */
    uint32_t set[2];        /* per source, a bit per key: one set twice is refused */
    int state;              /* POOL_*: whether a pool of the name was created (under the
                               runtime's lock) */
    int failed_status;      /* POOL_FAILED: what its creation returned */
    char near[SP_POOL_NAME_MAX + 1]; /* a pool created with this name in another case, or "" */
} conf_group;

struct sp_conf {
    char *text[2];          /* copies of alloc_conf and SP_ALLOC_CONF (NULL: none) */
    conf_entry *entries;
    size_t nentries, cap_entries;
    conf_group *groups;
    size_t ngroups;
    uint32_t *buckets, *fold_buckets;
    size_t mask;            /* buckets - 1, a power of two minus one */
    conf_ctx ctx;           /* the runtime's device, its total read once (under the runtime's
                               lock) */
};

static uint64_t hash_name(slice s, bool fold)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        h = (h ^ (fold ? (unsigned char)tolower(c) : c)) * 1099511628211ull;
    }
    return h;
}

static conf_group *group_find(const sp_conf *c, slice name)
{
    if (name.n == 0) /* group 0 (no prefix: an empty one is refused) */
        return c->ngroups ? &c->groups[0] : NULL;
    for (uint32_t g = c->buckets[hash_name(name, false) & c->mask]; g != NONE; g = c->groups[g].next)
        if (c->groups[g].name.n == name.n && memcmp(c->groups[g].name.p, name.p, name.n) == 0)
            return &c->groups[g];
    return NULL;
}

static conf_group *group_get(sp_conf *c, slice name)
{
    conf_group *g = group_find(c, name);
    if (g)
        return g;
    uint32_t i = (uint32_t)c->ngroups++;
    g = &c->groups[i];
    *g = (conf_group){.name = name, .first = NONE, .last = NONE};
    size_t b = hash_name(name, false) & c->mask, f = hash_name(name, true) & c->mask;
    g->next = c->buckets[b];
    c->buckets[b] = i;
    g->next_fold = c->fold_buckets[f];
    c->fold_buckets[f] = i;
    return g;
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
    if (sp__names_check_pool(name) != SP_OK)
        return fail(err, errlen,
                    "SP_ALLOC_CONF: the pool name before '.%.*s' is not UTF-8 without control "
                    "characters, which no pool can be named",
                    (int)key.n, key.p);
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

/* Reads one string into c: every entry checked (its value read as the syntax allows, a
 * percentage as 0), so that any bad one fails, whichever pool it names. */
static int read_text(sp_conf *c, const char *text, uint32_t source, char *err, size_t errlen)
{
    size_t len = strlen(text);
    if (trim((slice){text, len}).n == 0)
        return SP_OK; /* an empty or blank string sets nothing */
    conf_ctx syntax = {SP__CONF_SYNTAX, false, 0};
    for (const char *p = text, *end = text + len; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        slice entry = trim((slice){p, (size_t)((comma ? comma : end) - p)});
        p = comma ? comma + 1 : end;
        if (entry.n == 0) {
            if (!comma)
                break; /* a trailing comma */
            return fail(err, errlen, "SP_ALLOC_CONF: empty setting in '%s'", text);
        }
        slice pool, key, value;
        if (!split_entry(entry, &pool, &key, &value))
            return fail(err, errlen, "SP_ALLOC_CONF: '%.*s' is not key:value", (int)entry.n,
                        entry.p);
        if (pool.p) {
            int rc = check_prefix(pool, key, err, errlen);
            if (rc != SP_OK)
                return rc;
        }
        int k = key_of(key);
        if (k < 0)
            return fail(err, errlen, "SP_ALLOC_CONF: unknown key '%.*s'", (int)key.n, key.p);
        if (pool.p && !keys[k].pool)
            return fail(err, errlen, "SP_ALLOC_CONF: %s is set for the runtime, not for pool '%.*s'",
                        keys[k].name, (int)pool.n, pool.p);
        conf_group *g = group_get(c, pool);
        if (g->set[source] >> k & 1)
            return fail(err, errlen, "SP_ALLOC_CONF: '%.*s%s%s' is set twice", (int)pool.n,
                        pool.p ? pool.p : "", pool.p ? "." : "", keys[k].name);
        int rc = apply_value(NULL, k, value, &syntax, err, errlen);
        if (rc != SP_OK)
            return rc;
        g->set[source] |= 1u << k;
        uint32_t e = (uint32_t)c->nentries++;
        c->entries[e] = (conf_entry){value, (uint32_t)k, source, NONE};
        if (g->last == NONE)
            g->first = e;
        else
            c->entries[g->last].next = e;
        g->last = e;
    }
    return SP_OK;
}

/* The entries of `g` from `source` applied to cfg; an unprefixed reserve only where `all`. */
static int apply_group(const sp_conf *c, const conf_group *g, uint32_t source, bool all,
                       sp_pool_config *cfg, conf_ctx *ctx, char *err, size_t errlen)
{
    for (uint32_t e = g ? g->first : NONE; e != NONE; e = c->entries[e].next) {
        const conf_entry *en = &c->entries[e];
        if (en->source != source || !keys[en->key].pool)
            continue;
        if (!all && strcmp(keys[en->key].name, "reserve") == 0)
            continue;
        int rc = apply_value(cfg, (int)en->key, en->value, ctx, err, errlen);
        if (rc != SP_OK)
            return rc;
    }
    return SP_OK;
}

/* Both strings applied to cfg for the pool `name`, in order: alloc_conf, then SP_ALLOC_CONF;
 * in each, the unprefixed keys, then the pool's own, which win. An unprefixed reserve is the
 * default pool's alone (and what a caller asking for unprefixed keys, name NULL, gets): memory
 * set aside for every pool of a server, named or not, is never what an operator means, and it
 * would refuse every pool created with a smaller limit. */
static int apply_conf(const sp_conf *c, const char *name, sp_pool_config *cfg, conf_ctx *ctx,
                      char *err, size_t errlen)
{
    const conf_group *all = c->ngroups ? &c->groups[0] : NULL;
    const conf_group *own = name ? group_find(c, (slice){name, strlen(name)}) : NULL;
    bool reserve = !name || strcmp(name, "default") == 0;
    for (uint32_t source = 0; source < 2; source++) {
        int rc = apply_group(c, all, source, reserve, cfg, ctx, err, errlen);
        if (rc == SP_OK)
            rc = apply_group(c, own, source, true, cfg, ctx, err, errlen);
        if (rc != SP_OK)
            return rc;
    }
    return sp__config_check(cfg, err, errlen);
}

void sp__config_free(sp_conf *c)
{
    if (!c)
        return;
    free(c->text[0]);
    free(c->text[1]);
    free(c->entries);
    free(c->groups);
    free(c->buckets);
    free(c->fold_buckets);
    free(c);
}

static size_t count_entries(const char *text)
{
    size_t n = 1;
    for (const char *p = text; p && (p = strchr(p, ',')); p++)
        n++;
    return text ? n : 0;
}

/* Parses both strings (copied) into *out, for `device`; a bad one fails with SP_ERR_CONFIG and
 * the message in err. */
static int conf_new(const char *alloc_conf, const char *env, int device, sp_conf **out,
                    char *err, size_t errlen)
{
    sp_conf *c = calloc(1, sizeof *c);
    if (!c)
        return SP_ERR_NO_HOST_MEMORY;
    c->ctx = (conf_ctx){device, false, 0};
    size_t n = count_entries(alloc_conf) + count_entries(env);
    size_t buckets = 16;
    while (buckets < 2 * (n + 1))
        buckets *= 2;
    c->mask = buckets - 1;
    c->entries = malloc((n ? n : 1) * sizeof *c->entries);
    c->groups = malloc((n + 1) * sizeof *c->groups);
    c->buckets = malloc(buckets * sizeof *c->buckets);
    c->fold_buckets = malloc(buckets * sizeof *c->fold_buckets);
    if ((alloc_conf && !(c->text[0] = strdup(alloc_conf))) || (env && !(c->text[1] = strdup(env))) ||
        !c->entries || !c->groups || !c->buckets || !c->fold_buckets) {
        sp__config_free(c);
        return SP_ERR_NO_HOST_MEMORY;
    }
    memset(c->buckets, 0xff, buckets * sizeof *c->buckets);
    memset(c->fold_buckets, 0xff, buckets * sizeof *c->fold_buckets);
    (void)group_get(c, (slice){NULL, 0}); /* group 0: the unprefixed keys */
    int rc = SP_OK;
    for (uint32_t s = 0; s < 2 && rc == SP_OK; s++)
        if (c->text[s])
            rc = read_text(c, c->text[s], s, err, errlen);
    /* the unprefixed keys of each string must agree with each other (a reserve above the limit
     * would refuse the default pool); percentages read 0 here */
    conf_ctx syntax = {SP__CONF_SYNTAX, false, 0};
    for (uint32_t s = 0; s < 2 && rc == SP_OK; s++) {
        sp_pool_config scratch = SP_POOL_CONFIG_INIT;
        rc = apply_group(c, &c->groups[0], s, true, &scratch, &syntax, err, errlen);
        if (rc == SP_OK)
            rc = sp__config_check(&scratch, err, errlen);
    }
    if (rc != SP_OK) {
        sp__config_free(c);
        return rc;
    }
    *out = c;
    return SP_OK;
}

int sp__config_new(const char *alloc_conf, const char *env, int device, sp_conf **out)
{
    return conf_new(alloc_conf, env, device, out, NULL, 0);
}

int sp_config_apply(sp_pool_config *cfg, const char *pool_name, const char *conf, char *err,
                    size_t errlen)
{
    sp__cuda_error_clear();
    int rc = sp__struct_check(cfg, SP__MIN_POOL_CONFIG, "sp_config_apply", "sp_pool_config");
    if (rc != SP_OK || !conf)
        return rc;
    sp_conf *c;
    rc = conf_new(conf, NULL, SP__CONF_CURRENT, &c, err, errlen);
    if (rc != SP_OK)
        return rc;
    sp_pool_config work = SP_POOL_CONFIG_INIT;
    sp__struct_read(&work, sizeof work, cfg);
    rc = apply_conf(c, pool_name, &work, &c->ctx, err, errlen);
    if (rc == SP_OK)
        sp__struct_write(cfg, &work, sizeof work);
    sp__config_free(c);
    return rc;
}

/* Whether warnings may be printed: SP_ALLOC_CONF_QUIET set to anything but "" or "0" silences
 * them (QUIET=0 says "not quiet"). */
static bool quiet(void)
{
    const char *q = getenv("SP_ALLOC_CONF_QUIET");
    return q && *q && strcmp(q, "0") != 0;
}

static const char *human(uint64_t b, char buf[32])
{
    static const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0)
        b /= 1024, u++;
    snprintf(buf, 32, "%llu %s", (unsigned long long)b, units[u]);
    return buf;
}

int sp__config_limit_in_force(const sp_device *dev, const char *name, uint64_t *limit)
{
    if (*limit && *limit < SP_DRIVER_GRANULARITY)
        return sp__config_errorf(SP_ERR_CONFIG,
                          "pool '%s': its limit of %llu bytes is below the driver's granularity "
                          "of %llu bytes (the device gives whole pages: the smallest limit is "
                          "one page)",
                          name, (unsigned long long)*limit,
                          (unsigned long long)SP_DRIVER_GRANULARITY);
    uint64_t total = 0;
    conf_ctx own = {dev->device, false, 0};
    conf_ctx *ctx = dev->conf ? &dev->conf->ctx : &own;
    if (*limit && device_total(ctx, &total) == SP_OK && total && *limit > total) {
        /* a limit the device cannot hold, however written (bytes, a suffix, a share above
         * 100%, code), is the device: said once, so that an operator who copied an 80 GiB
         * server's settings to a 16 GiB one learns that the limit is not the one written */
        char a[32], b[32];
        uint64_t in_pages = total / SP_DRIVER_GRANULARITY * SP_DRIVER_GRANULARITY;
        if (!quiet())
            fprintf(stderr,
                    "streampool: warning: pool '%s': its limit of %s is more than device %d's "
                    "memory; clamped to %s (the device in whole pages)\n",
                    name, human(*limit, a), dev->device, human(in_pages, b));
        *limit = in_pages;
    }
    /* whole driver pages, what the pool can hold (a 3 MiB limit holds 2 MiB), so that every
     * report shows what the pool is held to */
    *limit = *limit / SP_DRIVER_GRANULARITY * SP_DRIVER_GRANULARITY;
    return SP_OK;
}

int sp__config_for_pool(const sp_device *dev, const char *name, const sp_pool_config *code,
                        sp_pool_config *out)
{
    sp_pool_config merged = SP_POOL_CONFIG_INIT;
    if (code) {
        /* callers built against an older, shorter struct get defaults for the fields they lack */
        int rc = sp__struct_check(code, SP__MIN_POOL_CONFIG, "sp_pool_create", "sp_pool_config");
        if (rc != SP_OK)
            return rc;
        sp__struct_read(&merged, sizeof merged, code);
    }
    int rc = sp__config_check(&merged, NULL, 0);
    if (rc == SP_OK && dev->conf)
        rc = apply_conf(dev->conf, name, &merged, &dev->conf->ctx, NULL, 0);
    if (rc != SP_OK)
        return rc;
    rc = sp__config_limit_in_force(dev, name, &merged.limit);
    if (rc != SP_OK)
        return rc;
    *out = merged;
    return SP_OK;
}

/* ---- pool names in the conf strings that no pool has had (typos) ----
 * A group's state says whether a pool of its name was ever created, or failed to be: a pool
 * destroyed since (a tenant unloaded) was no typo, nor one the device had no memory for. */

#define CONF_LISTED 64 /* names printed by sp__config_warn_unused */

void sp__config_pool_created(const sp_device *dev, const char *name, int status)
{
    sp_conf *c = dev->conf;
    if (!c)
        return;
    slice s = {name, strlen(name)};
    conf_group *g = group_find(c, s);
    if (g && status == SP_OK)
        g->state = POOL_CREATED;
    else if (g && g->state == POOL_NOT_SEEN) {
        g->state = POOL_FAILED;
        g->failed_status = status;
    }
    if (status != SP_OK)
        return;
    /* the prefixes that match it but for case remember it for the hint, whatever becomes of
     * the pool by sp_runtime_destroy */
    for (uint32_t i = c->fold_buckets[hash_name(s, true) & c->mask]; i != NONE;
         i = c->groups[i].next_fold) {
        conf_group *o = &c->groups[i];
        if (o != g && o->name.p && !o->near[0] && o->name.n == s.n &&
            strncasecmp(o->name.p, name, s.n) == 0)
            memcpy(o->near, name, s.n + 1);
    }
}

size_t sp__config_unseen(const sp_device *dev, char *buf, size_t len)
{
    size_t used = 0, count = 0;
    if (len)
        buf[0] = '\0';
    const sp_conf *c = dev->conf;
    for (size_t i = 1; c && i < c->ngroups; i++) {
        const conf_group *g = &c->groups[i];
        if (g->state != POOL_NOT_SEEN)
            continue;
        sp__format_append(buf, len, &used, "%s%.*s", count ? "," : "", (int)g->name.n, g->name.p);
        count++;
    }
    return count;
}

void sp__config_warn_unused(const sp_device *dev)
{
    if (quiet() || !dev->conf)
        return;
    size_t listed = 0, more = 0;
    for (size_t i = 1; i < dev->conf->ngroups; i++) {
        const conf_group *g = &dev->conf->groups[i];
        if (g->state == POOL_CREATED)
            continue;
        if (listed == CONF_LISTED) {
            more++;
            continue;
        }
        listed++;
        if (g->state == POOL_FAILED)
            fprintf(stderr,
                    "streampool: warning: the configuration sets keys for pool '%.*s', which "
                    "was never created: its creation failed (%s)\n",
                    (int)g->name.n, g->name.p, sp_status_name(g->failed_status));
        else
            fprintf(stderr,
                    "streampool: warning: the configuration sets keys for pool '%.*s', but no "
                    "pool of that name was created (%s%s%s)\n",
                    (int)g->name.n, g->name.p,
                    g->near[0] ? "pool names are case-sensitive: did you mean '" : "a typo?",
                    g->near, g->near[0] ? "'?" : "");
    }
    if (more)
        fprintf(stderr, "streampool: warning: and %zu more such pool names "
                        "(sp_runtime_check_config lists them)\n", more);
}

/* ---- the runtime keys ---- */

/* The value of runtime key `name`: SP_ALLOC_CONF's wins over alloc_conf's. */
static bool runtime_value(const sp_device *dev, const char *name, slice *out)
{
    const sp_conf *c = dev->conf;
    bool found = false;
    uint32_t best = 0;
    for (uint32_t e = c && c->ngroups ? c->groups[0].first : NONE; e != NONE; e = c->entries[e].next) {
        if (strcmp(keys[c->entries[e].key].name, name) == 0 && (!found || c->entries[e].source >= best)) {
            *out = c->entries[e].value;
            best = c->entries[e].source;
            found = true;
        }
    }
    return found;
}

bool sp__config_trace_path(const sp_device *dev, char *out, size_t len)
{
    slice v = {0}; /* set when found; initialized for gcc -O2's -Wmaybe-uninitialized */
    if (!runtime_value(dev, "trace", &v) || len == 0 || v.n >= len)
        return false;
    memcpy(out, v.p, v.n);
    out[v.n] = '\0';
    return true;
}

bool sp__config_check_free_order(const sp_device *dev)
{
    slice v = {0}; /* as above */
    return runtime_value(dev, "check_free_order", &v) && equals(v, "1");
}
