/* cudasim streams and events. Every stream runs its ops in order on its own worker thread,
 * later than the call that enqueued them. Each stream keeps a vector clock of how far its
 * future work is ordered after every other stream (through event waits and the legacy
 * stream's implicit synchronization); the memory pools read it to apply reuse rule 11(a). */
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* ---- vector clocks ---- */

uint64_t sim_clock_get(const sim_clock *c, uint64_t stream_id)
{
    for (uint32_t i = 0; i < c->len; i++)
        if (c->ticks[i].stream_id == stream_id)
            return c->ticks[i].seq;
    return 0;
}

bool sim_clock_set_max(sim_clock *c, uint64_t stream_id, uint64_t seq)
{
    for (uint32_t i = 0; i < c->len; i++) {
        if (c->ticks[i].stream_id == stream_id) {
            if (c->ticks[i].seq < seq)
                c->ticks[i].seq = seq;
            return true;
        }
    }
    if (c->len == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 4;
        sim_tick *t = realloc(c->ticks, cap * sizeof *t);
        if (!t)
            return false;
        c->ticks = t;
        c->cap = cap;
    }
    c->ticks[c->len++] = (sim_tick){stream_id, seq};
    return true;
}

bool sim_clock_merge(sim_clock *into, const sim_clock *from, uint64_t self_id)
{
    for (uint32_t i = 0; i < from->len; i++)
        if (from->ticks[i].stream_id != self_id &&
            !sim_clock_set_max(into, from->ticks[i].stream_id, from->ticks[i].seq))
            return false;
    return true;
}

static bool clock_copy(sim_clock *dst, const sim_clock *src)
{
    dst->len = 0;
    return sim_clock_merge(dst, src, 0);
}

void sim_clock_free(sim_clock *c)
{
    free(c->ticks);
    *c = (sim_clock){0};
}

/* ---- stream lifetime ---- */

/* Atomic: shared-lock holders (a pool's free ranges, 11(d) waits) take and drop references. The
 * last one can go in either lock mode: nothing else reaches a stream without a reference. */
void sim_stream_ref(sim_stream *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void sim_stream_unref(sim_stream *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    sim_clock_free(&s->clock);
    pthread_mutex_destroy(&s->slock);
    pthread_mutex_destroy(&s->qlock);
    pthread_mutex_destroy(&s->dlock);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free((struct CUstream_st *)s);
}

/* The device list holds one reference: it lets the legacy stream and device synchronize see
 * every stream with work pending, including destroyed ones still draining. */
static void stream_unlink(sim_stream *s)
{
    sim_device *d = &sim_g.devices[s->device];
    for (sim_stream **p = &d->streams; *p; p = &(*p)->next_in_device) {
        if (*p == s) {
            *p = s->next_in_device;
            sim_stream_unref(s);
            return;
        }
    }
}

static void stream_maybe_retire(sim_stream *s)
{
    if (s->destroyed && s->completed == s->submitted && !s->retired_at) {
        /* the next device synchronize is the host's proof that its frees completed */
        s->retired_at = sim_g.devices[s->device].syncs_started + 1;
        stream_unlink(s);
    }
}

static sim_stream *stream_new(int device, unsigned flags, int priority, bool legacy)
{
    struct CUstream_st *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    sim_stream *s = &h->s;
    s->id = ++sim_g.next_stream_id;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    s->legacy = legacy;
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->slock, NULL);
    pthread_mutex_init(&s->qlock, NULL);
    pthread_mutex_init(&s->dlock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    sim_device *d = &sim_g.devices[device];
    s->next_in_device = d->streams;
    d->streams = s;
    return s;
}

/* Streams without a handle, for work a graph launch runs concurrently with the launch stream.
 * Non-blocking: the legacy stream's implicit synchronization reaches them through the launch
 * stream. */
sim_stream *sim_stream_new_internal(int device)
{
    return stream_new(device, cudaStreamNonBlocking, 0, false);
}

void sim_stream_destroy_internal(sim_stream *s)
{
    pthread_mutex_lock(&s->qlock);
    s->destroyed = true; /* as cudaStreamDestroy: pending work runs first */
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->qlock);
    stream_maybe_retire(s);
}

/* ---- the worker ---- */

static void event_release_if_done(struct CUevent_st *e)
{
    if (e->destroyed && e->pending == 0) {
        sim_graph_event_forget(e);
        if (e->stream)
            sim_stream_unref(e->stream);
        sim_clock_free(&e->clock);
        free(e);
    }
}

/* Blocks until t has executed op `seq` (the caller holds a reference on t). With `relock`, the
 * caller holds the exclusive lock: it is released while waiting, as a condition wait on it
 * would, and taken again; state may move meanwhile. */
static void wait_completed(sim_stream *t, uint64_t seq, bool relock)
{
    if (t->completed >= seq)
        return;
    if (relock)
        sim_unlock();
    atomic_fetch_add(&t->done_waiters, 1);
    pthread_mutex_lock(&t->dlock);
    while (t->completed < seq)
        pthread_cond_wait(&t->done_cv, &t->dlock);
    pthread_mutex_unlock(&t->dlock);
    atomic_fetch_sub(&t->done_waiters, 1);
    if (relock)
        sim_lock();
}

/* Without any lock but dlock: publishes op `seq` as executed. A waiter counts itself before it
 * reads `completed`, and this reads the count after writing it (both sequentially consistent),
 * so either the waiter sees the new value or this sees the waiter and wakes it under dlock
 * (which the waiter holds from its check of `completed` until it sleeps). */
static void stream_complete(sim_stream *s, uint64_t seq)
{
    s->completed = seq;
    if (atomic_load(&s->done_waiters)) {
        /* Once this has held dlock, every counted waiter is asleep or will see `completed`;
         * waking them after letting go spares each a second sleep on dlock. */
        pthread_mutex_lock(&s->dlock);
        pthread_mutex_unlock(&s->dlock);
        pthread_cond_broadcast(&s->done_cv);
    }
}

/* Runs one op on s's worker, without the global lock held; takes it for shared state. */
static void run_op(sim_stream *s, sim_op *op)
{
    if (op->kind == OP_FREE && !op->bad_address)
        return; /* its seq marks the point from which the block may be reused (rule 11) */
    if (op->kind == OP_HOST) {
        sim_in_host_fn = true;
        op->u.host.fn(op->u.host.arg);
        sim_in_host_fn = false;
        return;
    }
    if (op->kind == OP_UNMAP) {
        sim_pool_unmap(op);
        return;
    }
    if (op->kind == OP_WAIT) { /* the op's reference keeps the target alive */
        sim_stream *t = op->u.wait.target;
        wait_completed(t, op->u.wait.seq, false);
        sim_stream_unref(t);
        return;
    }
    sim_device *d = &sim_g.devices[s->device];
    if ((op->kind == OP_MEMSET || op->kind == OP_MEMCPY) && !op->bad_address) {
        /* sticky is written only under the exclusive lock, so the shared lock reads it, and
         * the copy itself needs no lock: a good copy costs no exclusive hand-off. */
        bool shared = sim_lock_shared();
        if (!shared)
            sim_lock();
        cudaError_t sticky = d->sticky;
        sim_unlock();
        if (!sticky) {
            if (op->kind == OP_MEMSET)
                memset(op->u.set.dst, op->u.set.value, op->u.set.count);
            else
                memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.count);
        }
        return;
    }
    sim_lock();
    switch (op->kind) {
    case OP_MEMSET:
    case OP_MEMCPY: /* a bad address (a good one returned above) */
    case OP_FREE:   /* a free out of order with a pending use (free_on_stream) */
        if (!d->sticky)
            d->sticky = cudaErrorIllegalAddress; /* a device fault: sticky for the context */
        break;
    case OP_RECORD: {
        struct CUevent_st *e = op->u.record.event;
        if (e->gen == op->u.record.gen) {
            clock_gettime(CLOCK_MONOTONIC, &e->time);
            e->time_valid = true;
        }
        e->pending--;
        event_release_if_done(e);
        break;
    }
    case OP_WAIT:
    case OP_HOST:
    case OP_UNMAP:
        break;
    }
    sim_unlock();
}

static void *worker_main(void *arg)
{
    sim_stream *s = arg;
    pthread_mutex_lock(&s->qlock);
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->work_cv, &s->qlock);
        if (!s->head)
            break;
        sim_op *op = s->head;
        pthread_mutex_unlock(&s->qlock);
        run_op(s, op);
        pthread_mutex_lock(&s->qlock);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        bool drained = s->destroyed && !s->head;
        pthread_mutex_unlock(&s->qlock);
        stream_complete(s, op->seq);
        free(op);
        if (drained) {
            sim_lock();
            stream_maybe_retire(s);
            sim_unlock();
        }
        pthread_mutex_lock(&s->qlock);
    }
    pthread_mutex_unlock(&s->qlock);
    sim_lock();
    stream_maybe_retire(s); /* destroyed while its last op was completing */
    s->has_worker = false;
    pthread_mutex_lock(&sim_g.workers_lock);
    sim_g.workers--;
    pthread_cond_broadcast(&sim_g.workers_cv);
    pthread_mutex_unlock(&sim_g.workers_lock);
    sim_stream_unref(s);
    sim_unlock();
    return NULL;
}

sim_op *sim_op_new(sim_op_kind kind)
{
    sim_op *op = calloc(1, sizeof *op);
    if (op)
        op->kind = kind;
    return op;
}

cudaError_t sim_stream_enqueue(sim_stream *s, sim_op *op)
{
    if (!s->has_worker) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, (size_t)512 << 10);
        int rc = pthread_create(&thread, &attr, worker_main, s);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            free(op);
            return cudaErrorMemoryAllocation;
        }
        s->has_worker = true;
        sim_stream_ref(s);
        pthread_mutex_lock(&sim_g.workers_lock);
        sim_g.workers++;
        pthread_mutex_unlock(&sim_g.workers_lock);
    }
    op->seq = ++s->submitted;
    pthread_mutex_lock(&s->qlock);
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->qlock);
    return cudaSuccess;
}

cudaError_t sim_stream_wait_for(sim_stream *s, sim_stream *target, uint64_t seq,
                                const sim_clock *target_clock)
{
    if (target == s || sim_clock_get(&s->clock, target->id) >= seq)
        return cudaSuccess;
    if (target->completed < seq) {
        sim_op *op = sim_op_new(OP_WAIT);
        if (!op)
            return cudaErrorMemoryAllocation;
        op->u.wait.target = target;
        op->u.wait.seq = seq;
        sim_stream_ref(target);
        cudaError_t err = sim_stream_enqueue(s, op);
        if (err) {
            sim_stream_unref(target);
            return err;
        }
    }
    if (!sim_clock_set_max(&s->clock, target->id, seq) ||
        (target_clock && !sim_clock_merge(&s->clock, target_clock, s->id)))
        return cudaErrorMemoryAllocation;
    return cudaSuccess;
}

/* Rule 14: work on the legacy stream waits for all earlier work on blocking streams, and later
 * work on blocking streams waits for it. Rule 15: non-blocking streams take no part. */
void sim_stream_implicit_sync(sim_stream *s)
{
    sim_device *d = &sim_g.devices[s->device];
    if (s->legacy) {
        for (sim_stream *x = d->streams; x; x = x->next_in_device)
            if (x != s && !(x->flags & cudaStreamNonBlocking) && x->submitted > 0)
                (void)sim_stream_wait_for(s, x, x->submitted, &x->clock);
    } else if (!(s->flags & cudaStreamNonBlocking) && d->legacy && d->legacy->submitted > 0) {
        (void)sim_stream_wait_for(s, d->legacy, d->legacy->submitted, &d->legacy->clock);
    }
}

/* ---- resolving handles ---- */

typedef struct {
    uint64_t generation, device_resets;
    sim_stream *stream;
} per_thread_slot;

static _Thread_local per_thread_slot per_thread[SIM_MAX_DEVICES];

/* Is the thread's per-thread stream of `dev` still alive (no reset since it was made)? */
static bool slot_current(const per_thread_slot *slot, int dev)
{
    return slot->stream && slot->generation == sim_g.generation &&
           slot->device_resets == sim_g.device_resets[dev];
}

sim_stream *sim_stream_resolve(cudaStream_t handle, cudaError_t *err)
{
    int dev = sim_current_device();
    sim_device *d = sim_dev(dev);
    *err = cudaSuccess;
    if (handle == NULL || handle == cudaStreamLegacy) {
        if (!d) {
            *err = cudaErrorInvalidDevice;
            return NULL;
        }
        if (!d->legacy && !(d->legacy = stream_new(dev, 0, 0, true)))
            *err = cudaErrorMemoryAllocation;
        return d->legacy;
    }
    if (handle == cudaStreamPerThread) {
        per_thread_slot *slot = &per_thread[dev];
        if (!d) {
            *err = cudaErrorInvalidDevice;
            return NULL;
        }
        if (!slot_current(slot, dev)) {
            slot->stream = stream_new(dev, 0, 0, false); /* blocking (rule 15) */
            slot->generation = sim_g.generation;
            slot->device_resets = sim_g.device_resets[dev];
            if (!slot->stream)
                *err = cudaErrorMemoryAllocation;
        }
        return slot->stream;
    }
    if (!sim_handle_valid(handle, SIM_H_STREAM)) {
        *err = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return &handle->s;
}

sim_stream *sim_stream_lookup(cudaStream_t handle, cudaError_t *err)
{
    int dev = sim_current_device();
    *err = cudaSuccess;
    if (!sim_dev_ready(dev) || handle == NULL || handle == cudaStreamLegacy)
        return NULL; /* the legacy stream's implicit sync reads every blocking stream */
    if (handle == cudaStreamPerThread) {
        per_thread_slot *slot = &per_thread[dev];
        return slot_current(slot, dev) ? slot->stream : NULL;
    }
    if (!sim_handle_valid(handle, SIM_H_STREAM)) {
        *err = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return &handle->s;
}

sim_stream *sim_stream_resolve_live(cudaStream_t handle, cudaError_t *err)
{
    sim_stream *s = sim_stream_resolve(handle, err);
    if (s && sim_g.devices[s->device].sticky) {
        *err = sim_g.devices[s->device].sticky;
        return NULL;
    }
    return s;
}

/* ---- synchronization ---- */

void sim_stream_sync_to(sim_stream *s, uint64_t seq)
{
    sim_stream_ref(s);
    wait_completed(s, seq, true);
    if (s->observed < seq)
        s->observed = seq;
    sim_stream_unref(s);
}

void sim_stream_wait_done(sim_stream *s, uint64_t seq)
{
    sim_stream_ref(s);
    wait_completed(s, seq, true);
    sim_stream_unref(s);
}

void sim_device_sync(int device)
{
    sim_device *d = &sim_g.devices[device];
    uint64_t start = ++d->syncs_started;
    size_t n = 0;
    for (sim_stream *x = d->streams; x; x = x->next_in_device)
        n++;
    if (n == 0) {
        if (d->device_syncs < start)
            d->device_syncs = start;
        return;
    }
    struct { sim_stream *s; uint64_t seq; } *all = calloc(n, sizeof *all);
    if (!all)
        abort();
    n = 0;
    for (sim_stream *x = d->streams; x; x = x->next_in_device) {
        sim_stream_ref(x);
        all[n].s = x;
        all[n++].seq = x->submitted;
    }
    for (size_t i = 0; i < n; i++) {
        sim_stream_sync_to(all[i].s, all[i].seq);
        sim_stream_unref(all[i].s);
    }
    free(all);
    if (d->device_syncs < start)
        d->device_syncs = start;
}

bool sim_stream_observed(const sim_stream *s, uint64_t seq)
{
    return s->observed >= seq ||
           (s->retired_at && sim_g.devices[s->device].device_syncs >= s->retired_at);
}

void sim_stream_sync_observing(sim_stream *s, uint64_t seq, const sim_clock *deps)
{
    sim_clock snapshot = {0}; /* the lock is released while waiting: deps may move */
    if (!clock_copy(&snapshot, deps))
        abort(); /* out of host memory in the emulator itself */
    sim_stream_sync_to(s, seq);
    sim_device *d = &sim_g.devices[s->device];
    for (sim_stream *x = d->streams; x; x = x->next_in_device) {
        uint64_t dep = sim_clock_get(&snapshot, x->id);
        if (x->observed < dep)
            x->observed = dep; /* s waited for it, so it is complete too */
    }
    sim_clock_free(&snapshot);
}

/* ---- streams ---- */

static cudaError_t stream_create(sim_api api, cudaStream_t *out, unsigned flags, int priority)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    int dev = sim_current_device();
    sim_device *d = sim_dev(dev);
    sim_stream *s = NULL;
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else if (!(s = stream_new(dev, flags, priority, false)))
        err = cudaErrorMemoryAllocation;
    else
        sim_handle_add(s, SIM_H_STREAM);
    sim_unlock();
    if (err)
        return sim_ret(err);
    *out = (cudaStream_t)s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return stream_create(SIM_API_cudaStreamCreate, pStream, 0, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return stream_create(SIM_API_cudaStreamCreateWithFlags, pStream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    /* CUDA clamps priorities to the device's range; the emulator's range is [-5, 0]. */
    priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
    return stream_create(SIM_API_cudaStreamCreateWithPriority, pStream, flags, priority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamDestroy);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(stream, SIM_H_STREAM)) {
        sim_unlock();
        return sim_ret(cudaErrorInvalidResourceHandle);
    }
    sim_stream *s = &stream->s;
    err = sim_g.devices[s->device].sticky; /* reported; the handle goes all the same */
    sim_handle_remove(stream);
    sim_graph_stream_destroyed(s);
    pthread_mutex_lock(&s->qlock);
    s->destroyed = true; /* rule 16: pending work still runs, then resources go */
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->qlock);
    stream_maybe_retire(s);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamSynchronize);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    if (s && (err = sim_graph_stream_check(s)))
        s = NULL; /* Programming Guide: a capturing stream cannot be synchronized */
    if (s) {
        sim_stream_sync_observing(s, s->submitted, &s->clock);
        sim_pools_release_after_sync(s->device);
        err = sim_g.devices[s->device].sticky;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamQuery);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    if (s && (err = sim_graph_stream_check(s)))
        s = NULL; /* Programming Guide: nor queried */
    if (s && s->completed < s->submitted)
        err = cudaErrorNotReady;
    sim_unlock();
    /* NotReady is an answer, not an error: CUDA does not record it as the last error. */
    return err == cudaErrorNotReady ? err : sim_ret(err);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    cudaError_t err = sim_enter(SIM_API_cudaLaunchHostFunc);
    if (err)
        return sim_ret(err);
    if (!fn)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    if (s)
        err = sim_host_fn_locked(s, fn, userData);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t sim_host_fn_locked(sim_stream *s, cudaHostFn_t fn, void *userData)
{
    cudaError_t err = cudaSuccess;
    sim_op *op = sim_op_new(OP_HOST);
    if (!op)
        return cudaErrorMemoryAllocation;
    op->u.host.fn = fn;
    op->u.host.arg = userData;
    if (!sim_graph_capture_op(s, op, false, false, &err)) {
        sim_stream_implicit_sync(s);
        err = sim_stream_enqueue(s, op);
    }
    return err;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemsetAsync);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    if (s)
        err = sim_memset_locked(s, devPtr, value, count);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t sim_memset_locked(sim_stream *s, void *devPtr, int value, size_t count)
{
    cudaError_t err = cudaSuccess;
    if (count == 0)
        return cudaSuccess;
    sim_op *op = sim_op_new(OP_MEMSET);
    if (!op)
        return cudaErrorMemoryAllocation;
    op->u.set.dst = devPtr;
    op->u.set.value = value;
    op->u.set.count = count;
    if (!sim_graph_capture_op(s, op, true, false, &err)) {
        sim_stream_implicit_sync(s);
        sim_seg *seg;
        op->bad_address = !sim_range_use_ok(devPtr, count, s, true, &seg) ||
                          !sim_range_access_ok(devPtr, count, s->device, true);
        bool bad = op->bad_address;
        err = sim_stream_enqueue(s, op);
        if (!err && !bad)
            sim_range_note_use(seg, devPtr, count, s, s->submitted, true);
    }
    return err;
}

cudaError_t sim_copy_enqueue(sim_stream *s, void *dst, const void *src, size_t count,
                             bool dst_dev, bool src_dev, bool check_access)
{
    sim_op *op = sim_op_new(OP_MEMCPY);
    if (!op)
        return cudaErrorMemoryAllocation;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.count = count;
    cudaError_t err;
    if (sim_graph_capture_op(s, op, dst_dev, src_dev, &err))
        return err;
    sim_stream_implicit_sync(s);
    sim_seg *dseg = NULL, *sseg = NULL;
    /* Pool memory the stream's device has no access to (cudaMemPoolSetAccess) is unmapped for
     * it: the copy faults when it runs, as any other bad address does. */
    op->bad_address = (dst_dev && !sim_range_use_ok(dst, count, s, true, &dseg)) ||
                      (src_dev && !sim_range_use_ok(src, count, s, false, &sseg)) ||
                      (check_access && dst_dev &&
                       !sim_range_access_ok(dst, count, s->device, true)) ||
                      (check_access && src_dev &&
                       !sim_range_access_ok(src, count, s->device, false));
    bool bad = op->bad_address;
    err = sim_stream_enqueue(s, op);
    if (!err && !bad && dst_dev)
        sim_range_note_use(dseg, dst, count, s, s->submitted, true);
    if (!err && !bad && src_dev)
        sim_range_note_use(sseg, src, count, s, s->submitted, false);
    return err;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemcpyAsync);
    if (err)
        return sim_ret(err);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return sim_ret(cudaErrorInvalidMemcpyDirection); /* the Runtime API's error for it */
    if (count > 0 && (!dst || !src))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve_live(stream, &err);
    if (s && count > 0) {
        bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                       (kind == cudaMemcpyDefault && sim_is_device_address(dst));
        bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                       (kind == cudaMemcpyDefault && sim_is_device_address(src));
        err = sim_copy_enqueue(s, dst, src, count, dst_dev, src_dev, true);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceSynchronize);
    if (err)
        return sim_ret(err);
    sim_lock();
    int dev = sim_current_device();
    if (!sim_dev(dev)) {
        err = cudaErrorInvalidDevice;
    } else if (sim_graph_capturing_any() && (err = sim_graph_device_sync_check(dev))) {
        /* Programming Guide: the device handle encompasses the capturing streams */
    } else {
        sim_device_sync(dev);
        sim_pools_release_after_sync(dev);
        err = sim_g.devices[dev].sticky;
    }
    sim_unlock();
    return sim_ret(err);
}

/* ---- events ---- */

static cudaError_t event_create(sim_api api, cudaEvent_t *out, unsigned flags)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!out || (flags & ~known) ||
        ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
        return sim_ret(cudaErrorInvalidValue);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return sim_ret(cudaErrorMemoryAllocation);
    e->flags = flags;
    sim_lock();
    e->device = sim_current_device();
    sim_device *d = sim_dev(e->device);
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky; /* a device fault: no further work on the context */
    else
        sim_handle_add(e, SIM_H_EVENT);
    sim_unlock();
    if (err) {
        free(e);
        return sim_ret(err);
    }
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return event_create(SIM_API_cudaEventCreate, event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    return event_create(SIM_API_cudaEventCreateWithFlags, event, flags);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventDestroy);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(event, SIM_H_EVENT)) {
        err = cudaErrorInvalidResourceHandle;
    } else {
        err = sim_g.devices[event->device].sticky; /* reported; the handle goes all the same */
        sim_handle_remove(event);
        event->destroyed = true;
        event_release_if_done(event);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventRecord);
    if (err)
        return sim_ret(err);
    return sim_ret(sim_event_record(event, stream));
}

cudaError_t sim_event_record(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t err = cudaSuccess;
    sim_lock();
    sim_stream *s = NULL;
    if (!sim_handle_valid(event, SIM_H_EVENT))
        err = cudaErrorInvalidResourceHandle;
    else
        s = sim_stream_resolve_live(stream, &err);
    if (s && s->device != event->device) {
        err = cudaErrorInvalidResourceHandle; /* cuEventRecord: not the event's context */
        s = NULL;
    }
    if (s && sim_graph_event_record(event, s, &err))
        s = NULL; /* recorded into the capture (no node), or refused */
    if (s) {
        sim_op *op = sim_op_new(OP_RECORD);
        if (!op) {
            err = cudaErrorMemoryAllocation;
        } else {
            sim_stream_implicit_sync(s);
            op->u.record.event = event;
            op->u.record.gen = ++event->gen;
            err = sim_stream_enqueue(s, op);
        }
        if (!err) {
            /* rule 20: capture the stream's work now; a re-record overwrites */
            event->pending++;
            sim_stream_ref(s);
            if (event->stream)
                sim_stream_unref(event->stream);
            event->stream = s;
            event->seq = s->submitted;
            event->recorded = true;
            event->time_valid = false;
            if (!clock_copy(&event->clock, &s->clock) ||
                !sim_clock_set_max(&event->clock, s->id, event->seq))
                abort(); /* out of host memory in the emulator itself */
        }
    }
    sim_unlock();
    return err;
}

static bool event_complete(const struct CUevent_st *e)
{
    return !e->recorded || e->stream->completed >= e->seq; /* rule 20: never recorded = done */
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventQuery);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(event, SIM_H_EVENT))
        err = cudaErrorInvalidResourceHandle;
    else if (sim_g.devices[event->device].sticky)
        err = sim_g.devices[event->device].sticky;
    else if ((err = sim_graph_event_usable(event)))
        ; /* Programming Guide: a captured event cannot be queried */
    else if ((err = sim_graph_unsafe_call_locked()))
        ; /* potentially unsafe during a capture (cudaThreadExchangeStreamCaptureMode) */
    else if (!event_complete(event))
        err = cudaErrorNotReady;
    sim_unlock();
    return err == cudaErrorNotReady ? err : sim_ret(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventSynchronize);
    if (err)
        return sim_ret(err);
    sim_lock();
    if (!sim_handle_valid(event, SIM_H_EVENT)) {
        err = cudaErrorInvalidResourceHandle;
    } else if (sim_g.devices[event->device].sticky) {
        err = sim_g.devices[event->device].sticky; /* recorded or not */
    } else if ((err = sim_graph_event_usable(event))) {
        /* Programming Guide: nor synchronized */
    } else if ((err = sim_graph_unsafe_call_locked())) {
        /* potentially unsafe during a capture (cudaThreadExchangeStreamCaptureMode) */
    } else if (event->recorded) {
        sim_stream *s = event->stream;
        sim_stream_ref(s);
        sim_stream_sync_observing(s, event->seq, &event->clock);
        sim_pools_release_after_sync(s->device);
        err = sim_g.devices[s->device].sticky;
        sim_stream_unref(s);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaStreamWaitEvent);
    if (err)
        return sim_ret(err);
    if (flags & ~(unsigned)cudaEventWaitExternal)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = NULL;
    if (!sim_handle_valid(event, SIM_H_EVENT))
        err = cudaErrorInvalidResourceHandle;
    else
        s = sim_stream_resolve_live(stream, &err);
    if (s && sim_graph_event_wait(s, event, flags, &err))
        s = NULL; /* a capture joined or extended, or a wait the capture forbids */
    if (s && event->recorded) {
        /* rule 18: the wait covers the record as of now; later records do not change it */
        sim_stream_implicit_sync(s);
        err = sim_stream_wait_for(s, event->stream, event->seq, &event->clock);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t err = sim_enter(SIM_API_cudaEventElapsedTime);
    if (err)
        return sim_ret(err);
    if (!ms)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    if (!sim_handle_valid(start, SIM_H_EVENT) || !sim_handle_valid(end, SIM_H_EVENT) ||
        !start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) ||
        (end->flags & cudaEventDisableTiming))
        err = cudaErrorInvalidResourceHandle;
    else if (sim_g.devices[start->device].sticky)
        err = sim_g.devices[start->device].sticky;
    else if ((err = sim_graph_event_usable(start)) || (err = sim_graph_event_usable(end)))
        ;
    else if (!event_complete(start) || !event_complete(end))
        err = cudaErrorNotReady;
    else
        *ms = (float)((double)(end->time.tv_sec - start->time.tv_sec) * 1e3 +
                      (double)(end->time.tv_nsec - start->time.tv_nsec) / 1e6);
    sim_unlock();
    return err == cudaErrorNotReady ? err : sim_ret(err);
}

/* ---- reset ---- */

void sim_streams_reset(void)
{
    for (int dev = 0; dev < sim_g.device_count; dev++)
        if (sim_g.devices[dev].ready)
            sim_device_sync(dev);
    void **events;
    size_t n = sim_handles_of_type(SIM_H_EVENT, &events);
    for (size_t i = 0; i < n; i++) {
        struct CUevent_st *e = events[i];
        sim_handle_remove(e);
        e->destroyed = true;
        event_release_if_done(e);
    }
    free(events);
    for (int dev = 0; dev < sim_g.device_count; dev++) {
        sim_device *d = &sim_g.devices[dev];
        for (sim_stream *x = d->streams; x; x = x->next_in_device) {
            sim_handle_remove(x);
            pthread_mutex_lock(&x->qlock);
            x->destroyed = true;
            pthread_cond_signal(&x->work_cv);
            pthread_mutex_unlock(&x->qlock);
        }
    }
    sim_unlock(); /* exiting workers take the lock to retire their streams */
    pthread_mutex_lock(&sim_g.workers_lock);
    while (sim_g.workers)
        pthread_cond_wait(&sim_g.workers_cv, &sim_g.workers_lock);
    pthread_mutex_unlock(&sim_g.workers_lock);
    sim_lock();
    for (int dev = 0; dev < sim_g.device_count; dev++) {
        sim_device *d = &sim_g.devices[dev];
        while (d->streams)
            stream_unlink(d->streams);
        d->legacy = NULL;
    }
}

void sim_streams_device_reset(int device)
{
    sim_device *d = &sim_g.devices[device];
    sim_device_sync(device);
    void **events;
    size_t n = sim_handles_of_type(SIM_H_EVENT, &events);
    for (size_t i = 0; i < n; i++) {
        struct CUevent_st *e = events[i];
        if (e->device != device)
            continue;
        sim_handle_remove(e);
        e->destroyed = true;
        event_release_if_done(e);
    }
    free(events);
    /* as cudaStreamDestroy does: each worker, its queue empty, retires its stream */
    for (sim_stream *x = d->streams, *next; x; x = next) {
        next = x->next_in_device;
        if (x->destroyed)
            continue;
        sim_handle_remove(x);
        sim_graph_stream_destroyed(x);
        pthread_mutex_lock(&x->qlock);
        x->destroyed = true;
        pthread_cond_signal(&x->work_cv);
        pthread_mutex_unlock(&x->qlock);
        stream_maybe_retire(x);
    }
    d->legacy = NULL;
    sim_g.device_resets[device]++;
}
