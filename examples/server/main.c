/* streampool-server: a small multi-tenant inference-style HTTP server on streampool and
 * libmicrohttpd. Tenants come from a config file, one pool each; see http.c for the endpoints.
 * SIGTERM or SIGINT drains the workers, destroys the pools and the runtime, prints the final
 * figures and exits 0 when nothing leaked. */
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http.h"

#define DRAIN_GRACE_S 10

static void usage(FILE *f)
{
    fprintf(f,
            "usage: streampool-server [-a ADDRESS] [-p PORT] [-w WORKERS] [-d DEVICE] "
            "[-t TRACE_CSV] CONFIG\n"
            "  -a  IPv4 address to listen on (default 127.0.0.1)\n"
            "  -p  port (default 8080; 0: any free one, printed at start)\n"
            "  -w  worker threads, one stream each (default 4)\n"
            "  -d  CUDA device (default 0)\n"
            "  -t  where POST /trace/start writes the trace (default streampool-server-trace.csv)\n"
            "  CONFIG: one tenant a line, NAME LIMIT [RESERVE], e.g. 'llama 512M 64M'\n");
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || s[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Prints what the runtime and the tenants end with, then destroys the pools and the runtime;
 * 0 only if every pool was free of live allocations and everything was destroyed. */
static int finish(server *s)
{
    size_t need = 0;
    (void)sp_runtime_summary(s->rt, NULL, 0, &need);
    char *text = malloc(need + 1);
    if (text && sp_runtime_summary(s->rt, text, need + 1, &need) == SP_OK)
        fputs(text, stdout);
    free(text);
    char table[8192];
    tenants_summary(&s->tenants, table, sizeof table);
    printf("\nTenants at shutdown\n%s", table);
    int bad = 0;
    for (size_t i = 0; i < s->tenants.n; i++) {
        sp_stats st = {.size = sizeof st};
        if (sp_pool_stats(s->tenants.v[i].pool, &st) != SP_OK || st.requested.current != 0) {
            fprintf(stderr, "streampool-server: tenant %s still has live allocations\n",
                    s->tenants.v[i].name);
            bad = 1;
        }
    }
    int rc = tenants_destroy(&s->tenants);
    if (rc != SP_OK)
        bad = 1;
    rc = sp_runtime_destroy(s->rt);
    if (rc != SP_OK) {
        fprintf(stderr, "streampool-server: sp_runtime_destroy: %s\n", sp_status_name(rc));
        bad = 1;
    }
    return bad;
}

int main(int argc, char **argv)
{
    /* Every thread (streampool's, the runtime's, MHD's, the workers') inherits this mask, so
     * that the signals reach only sigwait below. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *address = "127.0.0.1";
    unsigned long port = 8080, nworkers = 4, device = 0;
    server s = {.trace_path = "streampool-server-trace.csv"};
    int opt;
    while ((opt = getopt(argc, argv, "a:p:w:d:t:h")) != -1) {
        int ok = 0;
        switch (opt) {
        case 'a': address = optarg; ok = 1; break;
        case 'p': ok = parse_uint(optarg, 65535, &port) == 0; break;
        case 'w': ok = parse_uint(optarg, 256, &nworkers) == 0 && nworkers > 0; break;
        case 'd': ok = parse_uint(optarg, 1024, &device) == 0; break;
        case 't': s.trace_path = optarg; ok = optarg[0] != '\0'; break;
        case 'h': usage(stdout); return 0;
        default: break;
        }
        if (!ok) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, address, &sa.sin_addr) != 1) {
        fprintf(stderr, "streampool-server: -a %s: not an IPv4 address\n", address);
        return 2;
    }

    int rc = sp_runtime_create((int)device, NULL, &s.rt);
    if (rc != SP_OK) {
        fprintf(stderr, "streampool-server: sp_runtime_create: %s (%s)\n", sp_strerror(rc),
                cudaGetErrorName((cudaError_t)sp_last_cuda_error()));
        return 1;
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
        s.device_bytes = total_bytes;
    char err[512];
    rc = tenants_load(argv[optind], s.rt, &s.tenants, err, sizeof err);
    if (rc == SP_OK)
        rc = workers_start(s.rt, (int)device, (unsigned)nworkers, &s.workers, err, sizeof err);
    if (rc != SP_OK) {
        fprintf(stderr, "streampool-server: %s\n", err);
        (void)tenants_destroy(&s.tenants);
        (void)sp_runtime_destroy(s.rt);
        return 1;
    }
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.changed, NULL);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, http_handle, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, http_completed, &s, MHD_OPTION_CONNECTION_TIMEOUT, 60u,
        MHD_OPTION_END);
    const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info) {
        fprintf(stderr, "streampool-server: cannot listen on %s:%lu\n", address, port);
        if (d)
            MHD_stop_daemon(d);
        (void)workers_stop(s.workers);
        (void)finish(&s);
        pthread_cond_destroy(&s.changed);
        pthread_mutex_destroy(&s.lock);
        return 1;
    }
    printf("streampool-server: listening on http://%s:%u (%zu tenants, %lu workers)\n", address,
           (unsigned)info->port, s.tenants.n, nworkers);
    fflush(stdout);

    int sig = 0;
    sigwait(&stop, &sig);
    printf("streampool-server: %s: draining\n", strsignal(sig));
    fflush(stdout);
    int listen_fd = MHD_quiesce_daemon(d);
    if (listen_fd >= 0)
        close(listen_fd);
    http_drain(&s, DRAIN_GRACE_S);
    MHD_stop_daemon(d);
    int bad = 0;
    rc = workers_stop(s.workers);
    if (rc != SP_OK) {
        fprintf(stderr, "streampool-server: stopping workers: %s\n", sp_status_name(rc));
        bad = 1;
    }
    bad |= finish(&s);
    pthread_cond_destroy(&s.changed);
    pthread_mutex_destroy(&s.lock);
    if (bad) {
        printf("streampool-server: shutdown found leaks or errors (see stderr)\n");
        return 1;
    }
    printf("streampool-server: clean shutdown: no live allocations, pools and runtime destroyed\n");
    return 0;
}
