/* The example server's HTTP side on libmicrohttpd: routes, and the accounting that lets a
 * shutdown drain every request before the daemon stops. */
#ifndef SERVER_HTTP_H
#define SERVER_HTTP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "streampool.h"
#include "tenants.h"
#include "workers.h"

typedef struct server {
    sp_runtime *rt;
    tenant_table tenants;
    workers *workers;
    const char *trace_path;            /* where POST /trace/start writes */
    uint64_t device_bytes;             /* the device's total memory; 0: unknown */
    atomic_bool stopping;              /* new inference requests get 503 */
    pthread_mutex_t lock;
    pthread_cond_t changed;            /* inflight or suspended went down */
    unsigned inflight;                 /* requests between their first call and completion */
    unsigned suspended;                /* connections suspended while a worker has their job */
} server;

/* MHD_AccessHandlerCallback and MHD_RequestCompletedCallback, with the server as cls. */
enum MHD_Result http_handle(void *cls, struct MHD_Connection *c, const char *url,
                            const char *method, const char *version, const char *upload_data,
                            size_t *upload_data_size, void **con_cls);
void http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode why);

/* Refuses new inference requests, opens every gate, and waits until no job is left with the
 * workers (every suspended connection resumed: MHD must not stop before) and then, for at most
 * `grace_s` seconds, until every request has been answered. */
void http_drain(server *s, unsigned grace_s);

#endif
