/* streampool-pair: the example server split in two processes. A worker owns the tenants'
 * pools (shareable, each with its limit) and serves requests; a front end, another process,
 * writes each request's input straight into the worker's tenant pool, with no copy through the
 * worker, and the worker checks and serves it:
 *
 *   front end                                worker
 *   REQ {id, tenant, bytes}           ->     sp_alloc in the tenant's pool (its limit counts)
 *                                     <-     GRANT {status, sp_block_handle} (sp_export_block)
 *   sp_import_block, write the input,
 *   sp_import_release (unless --hold)
 *   READY {id}                        ->     read the input back, check every byte, sp_free
 *                                     <-     DONE {id, mismatched bytes}
 *
 * The pools reach the front end at its connection (sp_pool_export, one per tenant, over the
 * same Unix socket). An sp_free of a block the front end has not released does not free it:
 * the worker's sp_pool_share_poll frees it once the front end releases it or is gone, killed
 * included. Each side prints JSON lines (one per event) that tests/test_pair.py checks.
 *
 *   streampool-pair worker SOCKET_PATH NAME:LIMIT...      serves front ends one after another
 *                                                          until SIGTERM
 *   streampool-pair frontend SOCKET_PATH REQUESTS BYTES [--hold N]
 *                                                          REQUESTS over the tenants in turn,
 *                                                          sizes up to BYTES; --hold: keep the
 *                                                          last N imports and wait to be killed */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "streampool.h"

#define MAX_TENANTS 8

enum { MSG_TENANT = 1, MSG_REQ, MSG_GRANT, MSG_READY, MSG_DONE };

typedef struct {
    uint32_t type, tenant;
    uint64_t id, bytes;
    int32_t status;
    uint32_t pad;
    uint64_t mismatched;
    char name[SP_POOL_NAME_MAX + 1];
    sp_block_handle handle;
} pair_msg;

static int io(int fd, void *buf, size_t len, int writing)
{
    char *p = buf;
    while (len) {
        ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            return -1; /* a signal: the caller looks at its flag */
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The input of request `id`: every byte a function of its request and offset, so that a byte
 * of another request, or of nobody, is told apart. */
static unsigned char input_byte(uint64_t id, uint64_t i)
{
    return (unsigned char)((id * 131u + i * 7u + (i >> 12)) & 0xff);
}

static uint64_t request_bytes(uint64_t id, uint64_t max)
{
    /* a spread of sizes: small blocks of shared slabs and large ones of their own segments */
    static const uint64_t fraction[] = {1, 3, 17, 64, 256, 1024};
    uint64_t b = max * fraction[id % 6] / 1024;
    return b ? b : 1;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "streampool-pair: %s: %s (%s)\n", what, sp_strerror(rc), sp_status_name(rc));
    return 1;
}

/* ---- the worker ---- */

static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
    (void)sig;
    stopping = 1;
}

typedef struct {
    char name[SP_POOL_NAME_MAX + 1];
    sp_pool *pool;
    sp_export *exp;
} tenant;

typedef struct {
    sp_runtime *rt;
    cudaStream_t stream;
    tenant t[MAX_TENANTS];
    size_t n;
    unsigned char *host;
    size_t host_len;
} worker;

static sp_stats pool_stats(sp_pool *pool)
{
    sp_stats st = {.size = sizeof st};
    (void)sp_pool_stats(pool, &st);
    return st;
}

/* Frees what the guard may now free, until nothing is held or `patience_ms` passed: after a
 * front end's end of file, the kernel may close its liveness socket a moment later. */
static size_t settle_held(worker *w, int patience_ms)
{
    size_t total = 0;
    for (int waited = 0;; waited++) {
        uint64_t held = 0;
        for (size_t i = 0; i < w->n; i++) {
            size_t freed = 0;
            (void)sp_pool_share_poll(w->t[i].pool, &freed);
            total += freed;
            held += pool_stats(w->t[i].pool).importer_held;
        }
        if (!held || waited >= patience_ms)
            return total;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* Reads request `id`'s input back from the block and counts the bytes that are not its own. */
static uint64_t check_input(worker *w, const void *block, uint64_t id, uint64_t bytes)
{
    if (w->host_len < bytes) {
        free(w->host);
        w->host = malloc(bytes);
        w->host_len = w->host ? bytes : 0;
    }
    if (!w->host || cudaMemcpyAsync(w->host, block, bytes, cudaMemcpyDeviceToHost, w->stream) ||
        cudaStreamSynchronize(w->stream))
        return bytes;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < bytes; i++)
        bad += w->host[i] != input_byte(id, i);
    return bad;
}

/* One front end, from its connection to its end of file: its requests, then what the guard
 * gave back. */
static void serve(worker *w, int conn)
{
    uint64_t served = 0, rejected = 0, bytes_checked = 0, mismatched = 0;
    int rc = SP_OK;
    for (size_t i = 0; i < w->n && rc == SP_OK; i++) {
        pair_msg m = {.type = MSG_TENANT, .tenant = (uint32_t)i, .bytes = w->n};
        strcpy(m.name, w->t[i].name);
        rc = io(conn, &m, sizeof m, 1) ? SP_ERR_IO
                                       : sp_pool_export(w->t[i].pool, conn, &w->t[i].exp);
    }
    void *live = NULL; /* the block of the request in flight, of tenant live_t */
    uint32_t live_t = 0;
    while (rc == SP_OK && !stopping) {
        pair_msg m;
        if (io(conn, &m, sizeof m, 0))
            break;
        if (m.type == MSG_REQ && m.tenant < w->n) {
            tenant *t = &w->t[m.tenant];
            pair_msg g = {.type = MSG_GRANT, .id = m.id, .bytes = m.bytes};
            g.status = sp_alloc(t->pool, &live, m.bytes, w->stream);
            live_t = m.tenant;
            if (g.status == SP_OK && (g.status = sp_export_block(t->exp, live, &g.handle)) !=
                                         SP_OK)
                (void)sp_free(t->pool, live, w->stream);
            if (g.status != SP_OK)
                live = NULL;
            rejected += g.status != SP_OK;
            if (io(conn, &g, sizeof g, 1))
                break;
        } else if (m.type == MSG_READY && m.tenant == live_t && live) {
            tenant *t = &w->t[m.tenant];
            pair_msg d = {.type = MSG_DONE, .id = m.id};
            d.mismatched = check_input(w, live, m.id, m.bytes);
            /* served: freed in stream order; held by the guard if the front end kept it */
            d.status = sp_free(t->pool, live, w->stream);
            live = NULL;
            served++;
            bytes_checked += m.bytes;
            mismatched += d.mismatched;
            (void)sp_pool_share_poll(t->pool, NULL);
            if (io(conn, &d, sizeof d, 1))
                break;
        } else {
            break; /* not the protocol: drop the front end */
        }
    }
    if (live) /* the front end went in the middle of a request: it is over */
        (void)sp_free(w->t[live_t].pool, live, w->stream);
    uint64_t held_before = 0, held_bytes_before = 0;
    for (size_t i = 0; i < w->n; i++) {
        sp_stats st = pool_stats(w->t[i].pool);
        held_before += st.importer_held;
        held_bytes_before += st.importer_held_bytes;
    }
    size_t freed = settle_held(w, 5000);
    uint64_t held = 0, held_bytes = 0, active = 0, reclaims = 0;
    for (size_t i = 0; i < w->n; i++) {
        sp_stats st = pool_stats(w->t[i].pool);
        held += st.importer_held;
        held_bytes += st.importer_held_bytes;
        active += st.active.current;
        reclaims += st.importer_reclaims;
    }
    printf("{\"event\":\"frontend-gone\",\"served\":%llu,\"rejected\":%llu,\"bytes_checked\":%llu,"
           "\"mismatched\":%llu,\"held_at_eof\":%llu,\"held_bytes_at_eof\":%llu,"
           "\"freed_after_eof\":%zu,\"importer_held\":%llu,"
           "\"importer_held_bytes\":%llu,\"importer_reclaims\":%llu,\"active\":%llu}\n",
           (unsigned long long)served, (unsigned long long)rejected,
           (unsigned long long)bytes_checked, (unsigned long long)mismatched,
           (unsigned long long)held_before, (unsigned long long)held_bytes_before, freed,
           (unsigned long long)held,
           (unsigned long long)held_bytes, (unsigned long long)reclaims,
           (unsigned long long)active);
    fflush(stdout);
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mul = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
    if (end == s || (mul > 1 && end[1]) || (mul == 1 && *end))
        return -1;
    *out = v * mul;
    return 0;
}

static int run_worker(const char *path, int ntenants, char **specs)
{
    worker w = {0};
    if (ntenants < 1 || ntenants > MAX_TENANTS) {
        fprintf(stderr, "streampool-pair: 1 to %d tenants, NAME:LIMIT\n", MAX_TENANTS);
        return 2;
    }
    int rc = sp_runtime_create(0, NULL, &w.rt);
    if (rc != SP_OK)
        return fail("sp_runtime_create", rc);
    if (cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking) != cudaSuccess)
        return fail("cudaStreamCreate", SP_ERR_CUDA);
    for (int i = 0; i < ntenants; i++) {
        char *colon = strchr(specs[i], ':');
        sp_pool_config cfg = SP_POOL_CONFIG_INIT;
        cfg.share = SP_SHARE_POSIX_FD;
        if (!colon || (size_t)(colon - specs[i]) > SP_POOL_NAME_MAX ||
            parse_size(colon + 1, &cfg.limit)) {
            fprintf(stderr, "streampool-pair: bad tenant '%s' (NAME:LIMIT)\n", specs[i]);
            return 2;
        }
        memcpy(w.t[i].name, specs[i], (size_t)(colon - specs[i]));
        if ((rc = sp_pool_create(w.rt, w.t[i].name, &cfg, &w.t[i].pool)) != SP_OK)
            return fail("sp_pool_create", rc);
        w.n++;
    }
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (ls < 0 || strlen(path) >= sizeof addr.sun_path)
        return fail("socket", SP_ERR_IO);
    strcpy(addr.sun_path, path);
    (void)unlink(path);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 4))
        return fail("bind", SP_ERR_IO);
    struct sigaction sa = {.sa_handler = on_term}; /* no SA_RESTART: accept and recv return */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("{\"event\":\"listening\",\"path\":\"%s\",\"tenants\":%zu}\n", path, w.n);
    fflush(stdout);
    while (!stopping) {
        int conn = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            continue;
        serve(&w, conn);
        close(conn);
    }
    close(ls);
    (void)unlink(path);
    /* what is left: every block back, every pool destroyed */
    settle_held(&w, 5000);
    uint64_t active = 0, held_after_trim = 0;
    int destroyed = 1;
    for (size_t i = 0; i < w.n; i++) {
        (void)sp_pool_trim(w.t[i].pool, 0);
        sp_stats st = pool_stats(w.t[i].pool);
        active += st.active.current;
        held_after_trim += st.held.current;
        destroyed &= sp_pool_destroy(w.t[i].pool) == SP_OK;
    }
    (void)cudaStreamDestroy(w.stream);
    destroyed &= sp_runtime_destroy(w.rt) == SP_OK;
    free(w.host);
    printf("{\"event\":\"exit\",\"active\":%llu,\"held_after_trim\":%llu,\"destroyed\":%s}\n",
           (unsigned long long)active, (unsigned long long)held_after_trim,
           destroyed ? "true" : "false");
    return destroyed && !active && !held_after_trim ? 0 : 1;
}

/* ---- the front end ---- */

static int run_frontend(const char *path, uint64_t requests, uint64_t max_bytes, uint64_t hold)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (s < 0 || strlen(path) >= sizeof addr.sun_path)
        return fail("socket", SP_ERR_IO);
    strcpy(addr.sun_path, path);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr))
        return fail("connect", SP_ERR_IO);
    sp_runtime *rt = NULL;
    int rc = sp_runtime_create(0, NULL, &rt);
    if (rc != SP_OK)
        return fail("sp_runtime_create", rc);
    cudaStream_t stream;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        return fail("cudaStreamCreate", SP_ERR_CUDA);
    sp_import *imp[MAX_TENANTS];
    uint32_t n = 0;
    /* the tenants: each announced (with their count), then its export on the same socket */
    pair_msg m = {0};
    do {
        if (io(s, &m, sizeof m, 0) || m.type != MSG_TENANT || m.tenant != n ||
            m.bytes > MAX_TENANTS)
            return fail("the worker's tenants", SP_ERR_IO);
        if ((rc = sp_pool_import(rt, s, m.name, &imp[n])) != SP_OK)
            return fail("sp_pool_import", rc);
        n++;
    } while (n < m.bytes);
    unsigned char *host = malloc(max_bytes);
    void **kept = calloc(hold + 1, sizeof *kept);
    if (!host || !kept)
        return fail("malloc", SP_ERR_NO_HOST_MEMORY);
    uint64_t sent = 0, written = 0, rejected = 0, mismatched = 0, nkept = 0;
    int worker_gone = 0;
    for (uint64_t id = 1; id <= requests && !worker_gone; id++) {
        uint32_t t = (uint32_t)(id % n);
        pair_msg r = {.type = MSG_REQ, .tenant = t, .id = id,
                      .bytes = request_bytes(id, max_bytes)};
        pair_msg g;
        if (io(s, &r, sizeof r, 1) || io(s, &g, sizeof g, 0)) {
            worker_gone = 1;
            break;
        }
        sent++;
        if (g.status != SP_OK) {
            rejected++;
            continue;
        }
        void *p = NULL;
        if ((rc = sp_import_block(imp[t], &g.handle, &p)) != SP_OK)
            return fail("sp_import_block", rc);
        for (uint64_t i = 0; i < r.bytes; i++)
            host[i] = input_byte(id, i);
        if (cudaMemcpyAsync(p, host, r.bytes, cudaMemcpyHostToDevice, stream) ||
            cudaStreamSynchronize(stream))
            return fail("writing the input", SP_ERR_CUDA);
        written += r.bytes;
        if (requests - id < hold) {
            kept[nkept++] = p; /* the guard keeps it for us after the worker's free */
        } else if ((rc = sp_import_release(imp[t], p, stream)) != SP_OK) {
            return fail("sp_import_release", rc);
        }
        pair_msg ready = {.type = MSG_READY, .tenant = t, .id = id, .bytes = r.bytes};
        pair_msg done;
        if (io(s, &ready, sizeof ready, 1) || io(s, &done, sizeof done, 0)) {
            worker_gone = 1;
            break;
        }
        mismatched += done.mismatched;
    }
    printf("{\"event\":\"%s\",\"requests\":%llu,\"bytes_written\":%llu,\"rejected\":%llu,"
           "\"mismatched\":%llu,\"kept\":%llu}\n",
           worker_gone ? "worker-gone" : hold ? "holding" : "done", (unsigned long long)sent,
           (unsigned long long)written, (unsigned long long)rejected,
           (unsigned long long)mismatched, (unsigned long long)nkept);
    fflush(stdout);
    if (hold && !worker_gone) {
        /* keep the imports until killed (the test's SIGKILL), or until the worker goes */
        char byte;
        while (recv(s, &byte, 1, 0) > 0)
            ;
        worker_gone = 1;
    }
    int status = 0;
    for (uint32_t i = 0; i < n; i++)
        if (sp_import_close(imp[i]) != SP_OK && !worker_gone)
            status = 1;
    close(s);
    free(host);
    free(kept);
    (void)cudaStreamDestroy(stream);
    if (sp_runtime_destroy(rt) != SP_OK)
        status = 1;
    return status || mismatched ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "worker") == 0)
        return run_worker(argv[2], argc - 3, argv + 3);
    if ((argc == 5 || argc == 7) && strcmp(argv[1], "frontend") == 0) {
        uint64_t requests = strtoull(argv[3], NULL, 10), bytes = 0, hold = 0;
        if (parse_size(argv[4], &bytes) || !requests || !bytes ||
            (argc == 7 && (strcmp(argv[5], "--hold") || !(hold = strtoull(argv[6], NULL, 10)))))
            goto usage;
        return run_frontend(argv[2], requests, bytes, hold);
    }
usage:
    fprintf(stderr, "usage: streampool-pair worker SOCKET NAME:LIMIT...\n"
                    "       streampool-pair frontend SOCKET REQUESTS BYTES [--hold N]\n");
    return 2;
}
