/* Routes of the example server (http.h):
 *   POST /infer?tenant=NAME&sizes=S1,S2,...[&delay_us=N][&hold=GATE]
 *   GET  /metrics   streampool's Prometheus text, then the per-tenant served counters
 *   GET  /summary   sp_runtime_summary, then a table of the tenants
 *   POST /trace/start, POST /trace/stop   the runtime's allocation trace
 *   POST /release?hold=GATE   opens a gate
 * An inference request is suspended while a worker serves it, so that the polling thread
 * never waits on a stream. */
#include "http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text.h"

enum { REQ_NEW, REQ_QUEUED, REQ_DONE };

typedef struct request {
    server *server;
    struct MHD_Connection *conn;
    atomic_int phase;                  /* REQ_DONE is stored (release) after job's answer */
    job job;
} request;

static const char *const JSON = "application/json";
static const char *const TEXT = "text/plain; charset=utf-8";

/* Queues `body` (malloc'd; taken over, NULL: out of memory) as the answer. */
static enum MHD_Result reply_owned(struct MHD_Connection *c, unsigned status, const char *type,
                                   char *body, const char *allow)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (ok == MHD_YES && allow)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body)
{
    return reply_owned(c, status, type, strdup(body), NULL);
}

/* {"error": what} with a status; `what` is one of this file's own sentences. */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *what)
{
    char body[256];
    snprintf(body, sizeof body, "{\"error\":\"%s\"}", what);
    return reply(c, status, JSON, body);
}

/* A size: digits with an optional K, M or G suffix (powers of 1024), more than 0. */
static int parse_size(const char *s, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == s)
        return -1;
    unsigned shift = 0;
    if (p < end) {
        switch (*p++) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        default: return -1;
        }
    }
    if (p != end || v == 0 || v > (SIZE_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

/* Fills j->sizes, nbuf and bytes from "S1,S2,..."; NULL on success, else why not. */
static const char *parse_sizes(const char *text, job *j)
{
    j->nbuf = 0;
    j->bytes = 0;
    for (const char *p = text;; ) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        uint64_t v;
        if (parse_size(p, end, &v) != 0)
            return "sizes: each is a byte count above 0, with an optional K, M or G suffix";
        if (j->nbuf == JOB_MAX_BUFFERS)
            return "sizes: at most 64 buffers";
        if (v > UINT64_MAX - j->bytes)
            return "sizes: the total overflows";
        j->sizes[j->nbuf++] = (size_t)v;
        j->bytes += v;
        if (!comma)
            return NULL;
        p = comma + 1;
    }
}

static void job_done(job *j)
{
    request *r = j->user;
    server *s = r->server;
    struct MHD_Connection *c = r->conn;
    atomic_store_explicit(&r->phase, REQ_DONE, memory_order_release);
    /* from here the polling thread may answer and free r */
    MHD_resume_connection(c);
    pthread_mutex_lock(&s->lock);
    s->suspended--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

static enum MHD_Result infer(server *s, request *r, struct MHD_Connection *c)
{
    if (atomic_load(&s->stopping))
        return reply_error(c, 503, "shutting down");
    const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tenant");
    const char *sizes = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "sizes");
    const char *delay = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "delay_us");
    const char *hold = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "hold");
    if (!name || !sizes)
        return reply_error(c, 400, "tenant and sizes are required");
    job *j = &r->job;
    j->tenant = tenants_find(&s->tenants, name);
    if (!j->tenant)
        return reply_error(c, 404, "no such tenant");
    const char *why = parse_sizes(sizes, j);
    if (why)
        return reply_error(c, 400, why);
    if (delay) {
        char *end;
        errno = 0;
        unsigned long us = strtoul(delay, &end, 10);
        if (errno || end == delay || *end || delay[0] == '-' || us > JOB_MAX_DELAY_US)
            return reply_error(c, 400, "delay_us: 0 to 1000000");
        j->delay_us = (unsigned)us;
    }
    if (hold) {
        if (!tenants_name_ok(hold))
            return reply_error(c, 400, "hold: 1 to 63 of [A-Za-z0-9_.-]");
        snprintf(j->hold, sizeof j->hold, "%s", hold);
    }
    tenant *t = j->tenant;
    /* no amount of waiting makes it fit: refused before it touches the pool */
    bool device_caps = s->device_bytes && (!t->limit || s->device_bytes < t->limit);
    uint64_t cap = device_caps ? s->device_bytes : t->limit;
    if (cap && j->bytes > cap) {
        atomic_fetch_add_explicit(&t->rejected_too_large, 1, memory_order_relaxed);
        char body[256];
        snprintf(body, sizeof body,
                 "{\"tenant\":\"%s\",\"error\":\"larger than the %s\",\"bytes\":%" PRIu64
                 ",\"%s\":%" PRIu64 "}",
                 t->name, device_caps ? "device's memory" : "tenant's limit", j->bytes,
                 device_caps ? "device_bytes" : "limit", cap);
        return reply(c, 413, JSON, body);
    }
    j->done = job_done;
    j->user = r;
    atomic_store(&r->phase, REQ_QUEUED);
    pthread_mutex_lock(&s->lock);
    s->suspended++;
    pthread_mutex_unlock(&s->lock);
    /* suspended before it is queued: a worker may resume it at once */
    MHD_suspend_connection(c);
    if (workers_submit(s->workers, j) != 0) {
        j->http_status = 503;
        snprintf(j->reply, sizeof j->reply, "{\"error\":\"shutting down\"}");
        job_done(j);
    }
    return MHD_YES;
}

/* streampool's text then the tenants' counters, in one buffer sized by a first pass. */
static enum MHD_Result metrics(server *s, struct MHD_Connection *c)
{
    size_t cap = 0;
    for (;;) {
        char *buf = cap ? malloc(cap) : NULL;
        if (cap && !buf)
            return MHD_NO;
        size_t sp_len = 0;
        int rc = sp_runtime_metrics_prometheus(s->rt, buf, cap, &sp_len);
        size_t at = tenants_metrics(&s->tenants, sp_len < cap ? buf + sp_len : NULL,
                                    sp_len < cap ? cap - sp_len : 0);
        if (buf && sp_len + at < cap) {
            if (rc != SP_OK)
                fprintf(stderr, "streampool-server: metrics: %s\n", sp_status_name(rc));
            return reply_owned(c, 200, "text/plain; version=0.0.4; charset=utf-8", buf, NULL);
        }
        free(buf);
        cap = sp_len + at + 4096; /* room for counters that grow between the passes */
    }
}

static enum MHD_Result summary(server *s, struct MHD_Connection *c)
{
    static const char title[] = "\nTenants\n";
    size_t cap = 0;
    for (;;) {
        char *buf = cap ? malloc(cap) : NULL;
        if (cap && !buf)
            return MHD_NO;
        size_t sp_len = 0;
        int rc = sp_runtime_summary(s->rt, buf, cap, &sp_len);
        size_t at = text_put(buf, cap, sp_len, "%s", title);
        at += tenants_summary(&s->tenants, at < cap ? buf + at : NULL, at < cap ? cap - at : 0);
        if (buf && at < cap) {
            if (rc != SP_OK)
                fprintf(stderr, "streampool-server: summary: %s\n", sp_status_name(rc));
            return reply_owned(c, 200, TEXT, buf, NULL);
        }
        free(buf);
        cap = at + 4096;
    }
}

static enum MHD_Result trace(server *s, struct MHD_Connection *c, int start)
{
    int rc = start ? sp_runtime_trace_start(s->rt, s->trace_path) : sp_runtime_trace_stop(s->rt);
    if (start && rc == SP_ERR_BUSY)
        return reply_error(c, 409, "a trace is already on");
    if (!start && rc == SP_ERR_INVALID)
        return reply_error(c, 409, "no trace is on");
    if (rc != SP_OK) {
        char body[256];
        snprintf(body, sizeof body, "{\"error\":\"%s\"}", sp_status_name(rc));
        return reply(c, 500, JSON, body);
    }
    size_t plen = strlen(s->trace_path);
    char *json_path = malloc(plen + sizeof ".json");
    if (!json_path)
        return MHD_NO;
    memcpy(json_path, s->trace_path, plen);
    memcpy(json_path + plen, ".json", sizeof ".json");
    size_t need = 0;
    char *body = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = text_put(body, need, 0, "{\"trace\":\"%s\",\"csv\":", start ? "on" : "off");
        at = text_put_json_string(body, need, at, s->trace_path);
        at = text_put(body, need, at, ",\"json\":");
        at = text_put_json_string(body, need, at, json_path);
        at = text_put(body, need, at, "}");
        if (pass == 0) {
            need = at + 1;
            body = malloc(need);
            if (!body)
                break;
        }
    }
    free(json_path);
    return reply_owned(c, 200, JSON, body, NULL);
}

static enum MHD_Result release(server *s, struct MHD_Connection *c)
{
    const char *hold = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "hold");
    if (!hold || !tenants_name_ok(hold))
        return reply_error(c, 400, "hold: 1 to 63 of [A-Za-z0-9_.-]");
    if (workers_release(s->workers, hold) != 0)
        return reply_error(c, 503, "too many open gates");
    char body[128];
    snprintf(body, sizeof body, "{\"released\":\"%s\"}", hold);
    return reply(c, 200, JSON, body);
}

static enum MHD_Result route(server *s, request *r, struct MHD_Connection *c, const char *url,
                             const char *method)
{
    static const struct {
        const char *path, *method;
        int id;
    } routes[] = {
        {"/infer", MHD_HTTP_METHOD_POST, 0},     {"/metrics", MHD_HTTP_METHOD_GET, 1},
        {"/summary", MHD_HTTP_METHOD_GET, 2},    {"/trace/start", MHD_HTTP_METHOD_POST, 3},
        {"/trace/stop", MHD_HTTP_METHOD_POST, 4}, {"/release", MHD_HTTP_METHOD_POST, 5},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path) != 0)
            continue;
        if (strcmp(method, routes[i].method) != 0)
            return reply_owned(c, 405, JSON, strdup("{\"error\":\"method not allowed\"}"),
                               routes[i].method);
        switch (routes[i].id) {
        case 0: return infer(s, r, c);
        case 1: return metrics(s, c);
        case 2: return summary(s, c);
        case 3: return trace(s, c, 1);
        case 4: return trace(s, c, 0);
        default: return release(s, c);
        }
    }
    return reply_error(c, 404, "no such endpoint");
}

enum MHD_Result http_handle(void *cls, struct MHD_Connection *c, const char *url,
                            const char *method, const char *version, const char *upload_data,
                            size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    server *s = cls;
    request *r = *con_cls;
    if (!r) {
        /* the headers are in; the body, if any, comes in the next calls */
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->server = s;
        r->conn = c;
        *con_cls = r;
        pthread_mutex_lock(&s->lock);
        s->inflight++;
        pthread_mutex_unlock(&s->lock);
        return MHD_YES;
    }
    if (*upload_data_size) { /* bodies are not used: every parameter is in the query */
        *upload_data_size = 0;
        return MHD_YES;
    }
    int phase = atomic_load_explicit(&r->phase, memory_order_acquire);
    if (phase == REQ_DONE)
        return reply(c, r->job.http_status, JSON, r->job.reply);
    if (phase == REQ_QUEUED) /* not called while suspended; kept from routing twice regardless */
        return MHD_YES;
    return route(s, r, c, url, method);
}

void http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode why)
{
    (void)c;
    (void)why;
    server *s = cls;
    request *r = *con_cls;
    if (!r)
        return;
    free(r);
    *con_cls = NULL;
    pthread_mutex_lock(&s->lock);
    s->inflight--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

void http_drain(server *s, unsigned grace_s)
{
    atomic_store(&s->stopping, true);
    workers_open_all(s->workers);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += grace_s;
    bool expired = false;
    pthread_mutex_lock(&s->lock);
    while (s->suspended > 0 || (s->inflight > 0 && !expired)) {
        if (expired)
            pthread_cond_wait(&s->changed, &s->lock);
        else if (pthread_cond_timedwait(&s->changed, &s->lock, &deadline) == ETIMEDOUT)
            expired = true;
    }
    if (s->inflight > 0)
        fprintf(stderr, "streampool-server: %u requests still unanswered after %u s\n",
                s->inflight, grace_s);
    pthread_mutex_unlock(&s->lock);
}
