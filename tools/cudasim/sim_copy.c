/* cudasim synchronous and peer copies (cudaMemcpy, cudaMemcpyPeer, cudaMemcpyPeerAsync) and
 * peer access between devices (cudaDeviceEnablePeerAccess / cudaDeviceDisablePeerAccess).
 * Stream-ordered copies share cudaMemcpyAsync's path (sim_copy_enqueue, sim_stream.c): the
 * same range, stream-order and access checks, the same device fault when a check fails. */
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* ---- peers ---- */

bool sim_peers_possible(void)
{
    return sim_g.peer_access && sim_g.device_count >= 2;
}

void sim_peer_device_reset(int device)
{
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        sim_g.peer_enabled[device][i] = sim_g.peer_enabled[i][device] = false;
}

/* The Runtime API: cudaErrorInvalidDevice when cudaDeviceCanAccessPeer says the current device
 * cannot reach peerDevice (so for the device itself, and for every pair without
 * CUDASIM_PEER_ACCESS=1), cudaErrorPeerAccessAlreadyEnabled the second time, cudaErrorInvalidValue
 * for flags other than 0. Access is unidirectional: [current][peer] only. */
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceEnablePeerAccess);
    if (err)
        return sim_ret(err);
    sim_lock();
    int cur = sim_current_device();
    sim_device *d = sim_dev(cur);
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else if (!sim_dev(peerDevice) || peerDevice == cur || !sim_peers_possible())
        err = cudaErrorInvalidDevice;
    else if (flags != 0)
        err = cudaErrorInvalidValue;
    else if (sim_g.peer_enabled[cur][peerDevice])
        err = cudaErrorPeerAccessAlreadyEnabled;
    else
        sim_g.peer_enabled[cur][peerDevice] = true;
    sim_unlock();
    return sim_ret(err);
}

/* cudaErrorPeerAccessNotEnabled unless enabled from the current device; a bad ordinal or the
 * device itself is cudaErrorInvalidDevice. */
cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceDisablePeerAccess);
    if (err)
        return sim_ret(err);
    sim_lock();
    int cur = sim_current_device();
    sim_device *d = sim_dev(cur);
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else if (!sim_dev(peerDevice) || peerDevice == cur)
        err = cudaErrorInvalidDevice;
    else if (!sim_g.peer_enabled[cur][peerDevice])
        err = cudaErrorPeerAccessNotEnabled;
    else
        sim_g.peer_enabled[cur][peerDevice] = false;
    sim_unlock();
    return sim_ret(err);
}

/* ---- copies ---- */

/* Exclusive lock (released while waiting): waits for all work submitted so far on every stream
 * of `device`, without counting as a synchronize that observes frees. */
static void drain_device(int device)
{
    sim_device *d = &sim_g.devices[device];
    size_t n = 0;
    for (sim_stream *x = d->streams; x; x = x->next_in_device)
        n++;
    if (!n)
        return;
    struct { sim_stream *s; uint64_t seq; } *all = calloc(n, sizeof *all);
    if (!all)
        abort(); /* out of host memory in the emulator itself */
    n = 0;
    for (sim_stream *x = d->streams; x; x = x->next_in_device) {
        sim_stream_ref(x);
        all[n].s = x;
        all[n++].seq = x->submitted;
    }
    for (size_t i = 0; i < n; i++) {
        sim_stream_wait_done(all[i].s, all[i].seq);
        sim_stream_unref(all[i].s);
    }
    free(all);
}

/* cudaMemcpy runs on the current device's legacy stream, so it waits for the blocking streams'
 * earlier work and their later work waits for it (rule 14). As the Runtime API describes its
 * synchronous behaviour: a copy to the host, a copy from host memory to host memory and (taking
 * the pinned-memory case for pageable memory too) a copy from the host to the device return once
 * the copy has executed; a copy from device to device returns at once, queued on the legacy
 * stream. Waiting is not a synchronize that observes frees (rule 11c).
 * Refused at the call: a kind outside cudaMemcpyKind (cudaErrorInvalidMemcpyDirection); NULL
 * pointers, an explicit kind that does not match where the pointers are (undefined in CUDA), and a
 * device range not inside one live allocation (cudaErrorInvalidValue). A live range used out of
 * stream order, or pool memory the current device has no access to, faults when the copy runs
 * (sticky cudaErrorIllegalAddress, returned by the waiting kinds). */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemcpy);
    if (err)
        return sim_ret(err);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return sim_ret(cudaErrorInvalidMemcpyDirection);
    if (count > 0 && (!dst || !src))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_stream *s = sim_stream_resolve(NULL, &err); /* the current device's legacy stream */
    if (s && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    if (!err && count > 0) {
        bool dst_is = sim_is_device_address(dst), src_is = sim_is_device_address(src);
        bool dst_dev = kind == cudaMemcpyDefault ? dst_is
                       : kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        bool src_dev = kind == cudaMemcpyDefault ? src_is
                       : kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
        if (dst_dev != dst_is || src_dev != src_is)
            err = cudaErrorInvalidValue;
        else if ((dst_dev && !sim_range_live(dst, count)) ||
                 (src_dev && !sim_range_live(src, count)))
            err = cudaErrorInvalidValue;
        else
            err = sim_copy_enqueue(s, dst, src, count, dst_dev, src_dev, true);
        if (!err && !(dst_dev && src_dev)) {
            sim_stream_wait_done(s, s->submitted);
            err = sim_g.devices[s->device].sticky;
        }
    }
    sim_unlock();
    return sim_ret(err);
}

/* Is [p, p+n) inside one live allocation in device `device`'s memory? */
static bool peer_range_ok(const void *p, size_t n, int device)
{
    return sim_device_of(p) == device && sim_range_live(p, n);
}

/* The Runtime API: asynchronous to the host but serialized with all pending and future work on
 * the current device, srcDevice and dstDevice. cudasim waits for those devices' work (without
 * observing frees), copies, and returns: later work is then necessarily after it. It needs no
 * peer access (CUDA stages such copies through the host when the devices cannot map each
 * other). cudaErrorInvalidDevice for a bad ordinal; cudaErrorInvalidValue for a pointer that is
 * not inside a live allocation of the device named for it (graph memory included, which cudasim
 * does not place on a device). */
cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemcpyPeer);
    if (err)
        return sim_ret(err);
    sim_lock();
    int cur = sim_current_device();
    int devs[3] = {cur, srcDevice, dstDevice};
    for (int i = 0; i < 3 && !err; i++)
        if (!sim_dev(devs[i]))
            err = cudaErrorInvalidDevice;
    for (int i = 0; i < 3 && !err; i++)
        err = sim_g.devices[devs[i]].sticky;
    /* it synchronizes with the devices' streams, as cudaDeviceSynchronize: not while one captures */
    for (int i = 0; i < 3 && !err && count > 0 && sim_graph_capturing_any(); i++)
        err = sim_graph_device_sync_check(devs[i]);
    if (!err && count > 0 &&
        (!dst || !src || !peer_range_ok(dst, count, dstDevice) ||
         !peer_range_ok(src, count, srcDevice)))
        err = cudaErrorInvalidValue;
    if (!err && count > 0) {
        for (int i = 0; i < 3; i++)
            if ((i == 0 || devs[i] != cur) && (i != 2 || dstDevice != srcDevice))
                drain_device(devs[i]);
        /* the lock was let go while waiting: the ranges must still be live */
        if (!peer_range_ok(dst, count, dstDevice) || !peer_range_ok(src, count, srcDevice))
            err = cudaErrorInvalidValue;
        for (int i = 0; i < 3 && !err; i++)
            err = sim_g.devices[devs[i]].sticky;
        if (!err)
            memmove(dst, src, count);
    }
    sim_unlock();
    return sim_ret(err);
}

/* Queued on `stream` (of any device), in its order only, like cudaMemcpyAsync, with the same
 * checks when it runs but no access check: CUDA stages a peer copy the devices cannot map.
 * Refused at the call: cudaErrorInvalidDevice for a bad ordinal, cudaErrorInvalidValue for a
 * pointer outside the named device's memory. */
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                size_t count, cudaStream_t stream)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemcpyPeerAsync);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_stream *s = sim_stream_resolve(stream, &err);
    if (s && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    if (!err && (!sim_dev(dstDevice) || !sim_dev(srcDevice)))
        err = cudaErrorInvalidDevice;
    if (!err && count > 0) {
        if (!dst || !src || sim_device_of(dst) != dstDevice || sim_device_of(src) != srcDevice)
            err = cudaErrorInvalidValue;
        else
            err = sim_copy_enqueue(s, dst, src, count, true, true, false);
    }
    sim_unlock();
    return sim_ret(err);
}
