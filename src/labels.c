/* Stream labels: the names users give streams (sp_stream_set_name), which reports, the OOM
 * report and the trace print. Below everything that reports, so that a rung of the miss ladder
 * (the OOM report) and the trace can read a label without calling up into introspection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"
#include "names.h"
#include "status.h"
#include "format.h"

/* ---- stream labels ----
 * One table for the process, keyed by (runtime, stream key), under its own mutex: taken after
 * runtime->lock (the OOM report reads a label under it) and before nothing else. */

typedef struct label {
    const sp_runtime *rt;
    sp_stream_key key;
    char name[SP_STREAM_NAME_MAX + 1];
    struct label *next;
} label;

static sp_mutex labels_lock = SP_MUTEX_INITIALIZER(SP_RANK_LEAF, "labels_lock");
static label *labels;
atomic_uint sp__label_changes;

static label **label_find(const sp_runtime *rt, sp_stream_key key)
{
    label **l = &labels;
    while (*l && !((*l)->rt == rt && (*l)->key.stream == key.stream && (*l)->key.thread == key.thread))
        l = &(*l)->next;
    return l;
}

int sp_stream_set_name(sp_runtime *rt, cudaStream_t stream, const char *name)
{
    sp__cuda_error_clear();
    if (!rt || (name && sp__names_check_pool(name) != SP_OK))
        return SP_ERR_INVALID;
    sp_stream_key key = sp__cache_key(stream);
    int rc = SP_OK;
    sp_mutex_lock(&labels_lock);
    label **l = label_find(rt, key);
    if (!name) {
        label *gone = *l;
        if (gone)
            *l = gone->next;
        free(gone);
    } else {
        if (!*l && (*l = calloc(1, sizeof **l))) {
            (*l)->rt = rt;
            (*l)->key = key;
        }
        if (*l)
            memcpy((*l)->name, name, strlen(name) + 1);
        else
            rc = SP_ERR_NO_HOST_MEMORY;
    }
    atomic_fetch_add_explicit(&sp__label_changes, 1, memory_order_relaxed);
    sp_mutex_unlock(&labels_lock);
    return rc;
}

void sp__label_of(const sp_runtime *rt, sp_stream_key key, char *out, size_t len)
{
    if (!len)
        return;
    out[0] = '\0';
    sp_mutex_lock(&labels_lock);
    label *l = *label_find(rt, key);
    if (l) {
        size_t n = strlen(l->name);
        n = n < len - 1 ? n : len - 1;
        memcpy(out, l->name, n);
        out[n] = '\0';
    }
    sp_mutex_unlock(&labels_lock);
}

void sp__label_of_any_thread(const sp_runtime *rt, cudaStream_t stream, char *out, size_t len)
{
    if (!len)
        return;
    out[0] = '\0';
    sp_mutex_lock(&labels_lock);
    for (label *l = labels; l; l = l->next)
        if (l->rt == rt && l->key.stream == stream) {
            snprintf(out, len, "%s", l->name);
            break;
        }
    sp_mutex_unlock(&labels_lock);
}

size_t sp_stream_name(sp_runtime *rt, cudaStream_t stream, char *buf, size_t len)
{
    char name[SP_STREAM_NAME_MAX + 1];
    if (!rt)
        return 0;
    sp__label_of(rt, sp__cache_key(stream), name, sizeof name);
    if (len)
        snprintf(buf, len, "%s", name);
    return strlen(name);
}

void sp__label_forget(const sp_runtime *rt, const cudaStream_t *stream)
{
    sp_stream_key key = stream ? sp__cache_key(*stream) : (sp_stream_key){0, 0};
    sp_mutex_lock(&labels_lock);
    for (label **l = &labels; *l;) {
        if ((*l)->rt == rt && (!stream || ((*l)->key.stream == key.stream &&
                                           (*l)->key.thread == key.thread))) {
            label *gone = *l;
            *l = gone->next;
            free(gone);
        } else {
            l = &(*l)->next;
        }
    }
    atomic_fetch_add_explicit(&sp__label_changes, 1, memory_order_relaxed);
    sp_mutex_unlock(&labels_lock);
}
