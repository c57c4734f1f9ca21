/* cudasim: a CPU implementation of the CUDA runtime calls streampool uses.
 *
 * The library exports NVIDIA's own entry points (cudaMallocAsync, cudaStreamCreate, ...),
 * compiled against the toolkit's headers and built as a drop-in libcudart.so.<major>, so a program
 * linked against the real libcudart runs on either, unchanged. This header is the emulator's own extension API, for tests and
 * benchmarks only: device capacity, fault injection, call counters and reset.
 *
 * Where CUDA's documentation leaves a behaviour open, cudasim takes the stricter one, so that
 * code passing on cudasim is not relying on leniency a real driver may not give:
 *  - Every stream op (including cudaFreeAsync) runs later, on the stream's own worker thread;
 *    an op is never complete at the moment it is enqueued.
 *  - A pool's freed memory counts as "observed complete by the host" (rule 11c, and what
 *    cudaMemPoolTrimTo and the release threshold may release) only after cudaStreamSynchronize,
 *    cudaEventSynchronize or cudaDeviceSynchronize covering the free. cudaStreamQuery and
 *    cudaEventQuery returning cudaSuccess do not count, and do not trigger release.
 *  - cudaStreamSynchronize/cudaEventSynchronize mark as observed the synchronized stream's
 *    frees and those of the streams it had waited on through events (as its vector clock records
 *    them), nothing else; cudaDeviceSynchronize marks every stream's, destroyed ones included.
 *  - cudaStreamSynchronize(0) waits for the legacy stream's own work (which already waits for
 *    blocking streams' earlier work), not for blocking-stream work enqueued after it.
 *  - Free ranges merge only when their reuse state matches: both observed, or both pending on
 *    the same stream (the merged range then waits for the later free). A pending free never
 *    merges into an observed neighbour, and two streams' frees merge once both are observed.
 *  - A pool's address space is backed by 2 MiB pages. A request that no single reusable free
 *    range fits first remaps whole free pages the requesting stream may reuse (rules 9, 11a-c)
 *    into a new contiguous range and reserves only the shortfall (NVIDIA's "Using the CUDA
 *    Stream-Ordered Memory Allocator, Part 1"). If any remapped page was not yet observed free,
 *    the new range's unused rest counts as freed on the requesting stream at that point.
 *    Pages whose free has not run yet leave the old range in stream order, as on a GPU: the
 *    old addresses stay reserved and their contents intact (work enqueued before the free
 *    still sees its data) until an op on the requesting stream, after the free, wipes and
 *    releases them. The device counts the pages once, in the new range.
 *    11(d) reuses only a single free range, never remapped pages.
 *  - Free ranges are chosen best fit.
 *  - UsedMemCurrent drops when cudaFreeAsync is called; ReservedMemCurrent when pages are
 *    released. Allocations are rounded to 512 bytes. cudaMemPoolTrimTo and the release threshold
 *    release whole observed-free pages and never take the pool below the amount to keep.
 *  - Allocating memory costs host address space only: pages are touched on first use.
 *  - cudaMemsetAsync/cudaMemcpyAsync are checked against live allocations when enqueued (in
 *    stream order, as the device would see them); a bad range fails when the op executes,
 *    setting the sticky cudaErrorIllegalAddress on its device. No memory is touched.
 *  - A sticky error fails every later call on its device's context ("any further CUDA work
 *    will return the same error"): streams, events (a never-recorded one's synchronize too),
 *    pools and their attributes, cudaMemGetInfo, cudaMalloc/cudaFree, pinned memory. The
 *    destroy and free calls report it but still release the handle or memory. Calls that need
 *    no context (device count, attributes and properties, versions, the current device) do not.
 *  - Stream order of pool memory (rules 2, 3, 13b), where a GPU races silently: a memset or copy
 *    on a stream not ordered after the allocation (same stream, event or legacy dependency)
 *    while the allocating stream has not yet run past it; one that writes bytes a pending
 *    memset/copy of another stream reads or writes, or reads bytes it writes, not ordered after
 *    it (two streams may read the same bytes, or write disjoint parts of one allocation, at
 *    once); and a cudaFreeAsync not ordered after the allocation and every memset/copy of the
 *    block still pending on another stream, fault (sticky cudaErrorIllegalAddress) when they
 *    execute; a cudaFree of stream-ordered memory with such a use pending faults at once. A
 *    use or allocation that has already executed is never a fault: the check flags only what
 *    could still run out of order. Graph-launched copies and memsets are not tracked
 *    (nor checked for pool access).
 *  - A host function that calls any CUDA API gets cudaErrorNotPermitted (rule 19).
 *  - cudaDeviceGetAttribute answers a documented subset; others give cudaErrorInvalidValue.
 *  - cudaFreeHost does not synchronize the device (a pending copy on the freed buffer is the
 *    caller's bug, and AddressSanitizer shows it).
 *  - IPC: every device reports cudaMemHandleTypePosixFileDescriptor
 *    (cudaDevAttrMemoryPoolSupportedHandleTypes); other handle types are cudaErrorNotSupported at
 *    cudaMemPoolCreate. A shareable pool keeps its pages in a memfd, mapped MAP_SHARED at their
 *    arena addresses; cudaMemPoolExportToShareableHandle gives a dup of it (not close-on-exec, so
 *    it can be inherited across exec or sent with SCM_RIGHTS; the caller closes it), and
 *    cudaMemPoolImportFromShareableHandle (the descriptor passed by value, as the Programming
 *    Guide shows) maps the whole file at a window of the importing process: the imported pool is
 *    on the exporter's device, makes no allocations (cudaMallocFromPoolAsync, cudaDeviceSetMemPool:
 *    cudaErrorInvalidValue), reports no memory (the exporter's device counts the pages, once).
 *    cudaMemPoolExportPointer fills 64 bytes (pool identity, export-table slot, serial, offset,
 *    size) for the start of a live block of a shareable pool; cudaMemPoolImportPointer gives
 *    window + offset, whose bytes are the exporter's both ways, freed by cudaFree/cudaFreeAsync in
 *    the importer alone. Refused with cudaErrorInvalidValue (the error the Runtime API documents
 *    for the four calls), outputs untouched: exporting a pool without the handle type or an
 *    imported one, another handle type, flags; importing a descriptor that is not a shareable
 *    pool's, or onto a device the process lacks; exporting an interior pointer or a block of
 *    another pool; importing a block into a pool that is not imported (a pool of the wrong handle
 *    type), data of another pool, a block this pool holds already, or a block its exporter has
 *    freed (the exporter's cudaFree/cudaFreeAsync call ends the export at once). An importer's
 *    use of a block its exporter has freed is a bad address: a device fault. Released pages are
 *    punched out of the file, so an importer still mapping them reads zeros.
 *  - cudaDeviceReset waits for the current device's work, then destroys its streams, events,
 *    executable graphs (graphs stay), graph memory, cudaMalloc and pinned host memory, and clears
 *    its sticky error; the legacy and per-thread streams are made afresh on their next use.
 *    Pools and their stream-ordered allocations stay, as the Runtime API's note says
 *    (cudaMallocAsync memory "need[s] to be destroyed explicitly"). Faults and counters stay.
 *  - Graph memory attributes: used and reserved are both the physical memory the device's graphs
 *    hold (cudasim keeps none that no graph holds); cudaDeviceSetGraphMemAttribute takes only the
 *    two high watermarks and only 0, which restarts them from the current figure (as rule 8 for
 *    pools); cudaDeviceGraphMemTrim releases the memory of each graph neither running nor holding
 *    a live allocation (it takes it again at its next launch).
 *  - Graph capture (sim_graph.c) covers memset, memcpy, host functions, event record/wait,
 *    cudaMallocAsync/cudaMallocFromPoolAsync (allocation nodes) and cudaFreeAsync (free nodes).
 *    A launch enqueues the nodes in capture order; forked branches run concurrently on streams
 *    of their own, which the launch stream waits for at the end. Event record inside a
 *    capture adds no node; cudaEventRecordWithFlags's external records, child graphs, kernel
 *    nodes and explicit graph construction (cudaGraphAdd*) are not emulated.
 *  - Stricter readings of capture where the documentation is silent: a launch of a graph into a
 *    capturing stream fails (cudaErrorStreamCaptureUnsupported) and invalidates the capture;
 *    cudaStreamEndCapture from the wrong thread, from a joined stream (Unmatched) and any
 *    cudaErrorCapturedEvent / Merge / Isolation error invalidate the capture; an event last
 *    recorded inside a capture stays unusable (cudaErrorCapturedEvent on query, synchronize,
 *    elapsed time and wait) even after the capture ends, until it is recorded outside one;
 *    waiting in a capture on a never-recorded event is cudaErrorStreamCaptureIsolation; any
 *    capture of a blocking stream, in any mode, makes the legacy stream unusable
 *    (cudaErrorStreamCaptureImplicit, invalidating it); cudaDeviceSynchronize fails while any
 *    stream of the device captures, in any mode; cudaFree(NULL) and cudaFreeHost count as
 *    potentially unsafe calls, like cudaMalloc and cudaFree; so do cudaEventQuery and
 *    cudaEventSynchronize of any event (PyTorch moves its event queries to relaxed or
 *    thread-local mode for this; a captured event gives cudaErrorCapturedEvent first), and
 *    cudaMemPoolGetAttribute, cudaMemPoolSetAttribute and cudaMemPoolTrimTo (NVIDIA/cccl#11360);
 *    destroying a capture's origin stream ends the capture, a joined stream invalidates it.
 *  - Error codes where the Runtime API lists none: capture of the legacy stream is
 *    cudaErrorStreamCaptureUnsupported, beginning on a capturing stream or ending on a stream
 *    that is not capturing is cudaErrorIllegalState.
 *  - Graph allocations take addresses from their own host range, fixed from capture on. A
 *    graph's physical memory (its allocations' sizes summed, in 2 MiB units) is charged to the
 *    device at its first launch and kept until the graph and its last live allocation are gone
 *    or cudaDeviceGraphMemTrim finds the graph idle; pool statistics do not
 *    include it. A free node whose allocation is not live when the launch reaches it is a
 *    device fault (sticky cudaErrorIllegalAddress). A graph allocation freed outside its graph
 *    (cudaFreeAsync, or another graph's free node) counts as freed for a relaunch only if the
 *    launch stream is ordered after that free or the host has synchronized on it; otherwise the
 *    relaunch fails with cudaErrorInvalidValue, as with an unfreed allocation.
 *  - cudaMallocAsync/cudaMallocFromPoolAsync of 0 bytes succeed with NULL, as cudaMalloc does.
 *  - cudaFree of a stream-ordered pointer frees it at once, in no stream's order and without
 *    synchronizing (rules 4, 13b): any stream may reuse it as soon as cudaFree returns.
 *  - cudaFreeAsync accepts cudaMalloc memory (rule 13b); it returns to the device at the first
 *    synchronize that observes the free (or at the next cudaMalloc/cudaFree).
 *  - The device's reserved bytes are 2 MiB pages (cudaMalloc's too), so cudaMemGetInfo moves in
 *    2 MiB steps.
 *  - cudaMallocManaged: a device without concurrent managed access (the attribute is 0): the
 *    current device's pages hold it from the call on, counted by cudaMemGetInfo like cudaMalloc's;
 *    the host reaches it directly. Size 0 and flags other than exactly cudaMemAttachGlobal or
 *    cudaMemAttachHost are cudaErrorInvalidValue; cudaFree releases it.
 *  - Peers: without CUDASIM_PEER_ACCESS=1 no two emulated devices are peers: cudaDeviceCanAccessPeer
 *    answers 0 (also for a device and itself), cudaDeviceEnablePeerAccess is cudaErrorInvalidDevice,
 *    cudaMemPoolSetAccess refuses read or write access for another device with
 *    cudaErrorNotSupported (ProtNone is accepted) and cudaMemPoolGetAccess reports ProtNone. With
 *    CUDASIM_PEER_ACCESS=1 and two devices or more, every pair of distinct devices is a peer pair
 *    (a device is still not its own): cudaDeviceEnablePeerAccess/DisablePeerAccess keep a
 *    one-way [current][peer] state with CUDA's errors (cudaErrorPeerAccessAlreadyEnabled,
 *    cudaErrorPeerAccessNotEnabled, cudaErrorInvalidDevice for the device itself or a bad
 *    ordinal, cudaErrorInvalidValue for flags), cleared by cudaDeviceReset of either device; and
 *    cudaMemPoolSetAccess grants ProtNone, ProtRead or ProtReadWrite per device, all descriptors
 *    or none (the owning device only ProtReadWrite: cudaErrorInvalidValue; other flag values:
 *    cudaErrorInvalidValue; a bad location: cudaErrorInvalidDevice).
 *  - Pool access is enforced, as the Programming Guide says, by the pool's grants alone (not by
 *    cudaDeviceEnablePeerAccess): a cudaMemsetAsync, cudaMemcpyAsync or cudaMemcpy whose stream's
 *    device has no access to a pool allocation it touches, or only ProtRead and writes it, is a
 *    device fault when it executes: sticky cudaErrorIllegalAddress on the stream's device, memory
 *    untouched, as an unmapped access is on a GPU. It is checked against the grants in force when
 *    the op is enqueued. A GPU reports the fault the same way (sticky), so a test of it must
 *    reset the faulting device (cudaDeviceReset clears it and leaves the other device alone),
 *    which is why cudasim keeps it, rather than a cudaErrorInvalidValue at the call that no GPU
 *    gives. cudaMemcpyPeer/PeerAsync need no access (CUDA stages them); cudaMalloc memory is
 *    not checked (copies between devices stage it).
 *  - cudaMemcpy runs on the current device's legacy stream (rule 14 orders it). Copies to the host,
 *    host to host, and host to device (pinned or pageable: CUDA may return earlier for pageable
 *    memory) return once executed; device to device returns at once, queued. Waiting is not a
 *    synchronize that observes frees. Refused at the call, not sticky: a kind outside
 *    cudaMemcpyKind (cudaErrorInvalidMemcpyDirection, cudaMemcpyAsync too); NULL pointers, an
 *    explicit kind that contradicts where the pointers are (undefined in CUDA), a device range
 *    not inside one live allocation (cudaErrorInvalidValue). A live range used out of stream
 *    order, or pool memory the current device has no access to, faults as cudaMemcpyAsync does.
 *  - cudaMemcpyPeer needs no peer access (CUDA stages it): it waits for the work of the current,
 *    source and destination devices (without observing frees), copies, and returns, so it is
 *    serialized with their pending and later work as documented; like cudaDeviceSynchronize it
 *    fails (cudaErrorStreamCaptureUnsupported, invalidating the capture) while one of their
 *    streams captures. cudaMemcpyPeerAsync is queued on
 *    its stream (of any device) like cudaMemcpyAsync, without an access check. Both refuse a bad
 *    ordinal (cudaErrorInvalidDevice) and a pointer outside the named device's memory
 *    (cudaErrorInvalidValue; cudaMemcpyPeer also a range not inside a live allocation, and graph
 *    memory, which cudasim places on no device).
 *  - cudaStreamGetId: ids are never reused, not even across cudasimReset.
 *  - cudaEventRecord of an event on another device's stream is cudaErrorInvalidResourceHandle
 *    (cuEventRecord: both must be of one context); cudaStreamWaitEvent across devices is legal.
 *  - Host threads: cudaMallocAsync, cudaMallocFromPoolAsync and cudaFreeAsync on a stream other
 *    than the legacy one, outside capture, run concurrently with each other, one at a time per
 *    stream and per pool (each call sees its pool as it would under one lock, so the reuse
 *    rules are unchanged; the device's capacity is shared by compare-and-swap). Every other
 *    call, and any allocator call on the legacy stream or on a per-thread stream's first use,
 *    runs alone. Destroying a stream or pool while another thread uses it is undefined, as in
 *    CUDA.
 *
 *  - What PyTorch imports beyond the above (sim_torch_exports.c, sim_host.c): the emulated device
 *    runs no device code. nvcc's registration calls (__cudaRegisterFatBinary and the rest) are
 *    accepted, and every kernel, function and symbol of the registered fatbinaries has no image
 *    for the device: launches (cudaLaunchKernel, __cudaLaunchKernel, cooperative, Ex),
 *    __cudaGetKernel, cudaFuncGetAttributes/SetAttribute, occupancy, cudaGetSymbolAddress and
 *    cudaMemcpyToSymbol answer cudaErrorNoKernelImageForDevice, recorded as the last error (not
 *    sticky); cudaLibraryLoadData/LoadFromFile the same, and every library handle is
 *    cudaErrorInvalidResourceHandle. Explicit graph construction and inspection
 *    (cudaGraphAddNode, cudaGraphGetNodes, ...), capture to a graph, capture dependency updates,
 *    conditional handles and user objects are cudaErrorNotSupported. So is legacy IPC
 *    (cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle, cudaIpcGetEventHandle
 *    of an interprocess event, cudaIpcOpenEventHandle): cudaMalloc memory is private to the
 *    process (pools exported with a shareable handle are the way across processes).
 *  - cudaMemset is asynchronous for device memory (the Runtime API's synchronization table), on
 *    the legacy stream; cudaMemcpy2DAsync enqueues its rows, each checked as a cudaMemcpyAsync.
 *  - cudaPointerGetAttributes: device memory is what a live mapping holds (freed pool memory
 *    still mapped included), managed memory is cudaMallocManaged's, host memory is pinned
 *    (cudaMallocHost, cudaHostAlloc) or registered (cudaHostRegister) memory, interior pointers
 *    included, with the device current when it was made; anything else is
 *    cudaMemoryTypeUnregistered with device cudaInvalidDeviceId and cudaSuccess (CUDA 11 on).
 *    cudaHostRegister refuses any overlap with known host memory
 *    (cudaErrorHostMemoryAlreadyRegistered), device memory (cudaErrorInvalidValue) and
 *    cudaHostRegisterIoMemory (cudaErrorNotSupported); cudaDeviceReset forgets registrations.
 *  - Stream priorities range over [-5, 0] (an H100's); cudaEventRecordWithFlags with
 *    cudaEventRecordExternal is a plain record outside capture and cudaErrorNotSupported inside
 *    one; cudaStreamAddCallback in a capture is cudaErrorStreamCaptureUnsupported (the capture
 *    is not invalidated), and its callback gets the device's sticky error as its status.
 *  - cudaGetDriverEntryPointByVersion: no driver API behind cudasim, so every symbol is
 *    cudaDriverEntryPointSymbolNotFound with a NULL function and cudaSuccess. The stand-in
 *    libcuda.so.1 (tools/cudasim/driver, for the pytorch suite only) answers device queries and
 *    cuDevicePrimaryCtxGetState (active once the runtime initialised the device) and refuses
 *    modules, linking and launches. cudaProfilerStart/Stop succeed (no profiler attached).
 *
 * Environment: CUDASIM_DEVICE_COUNT (default 1), CUDASIM_DEVICE_MEMORY (default 16G; suffixes
 * K, M, G, T), CUDASIM_PEER_ACCESS (1: every pair of devices may be peers; default none), read
 * when the emulator first starts and after cudasimReset().
 */
#ifndef CUDASIM_H
#define CUDASIM_H

#include <stddef.h>
#include <cuda_runtime_api.h>

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "cudasim does not export the _ptsz/_ptds entry points: do not define CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sets device `device`'s memory capacity. Fails with cudaErrorNotPermitted if the device
 * already holds more than `bytes`, cudaErrorInvalidDevice for a bad ordinal. */
cudaError_t cudasimSetDeviceMemory(int device, size_t bytes);

/* Fails the `nth` call (1 = the next one) of API `api` (its CUDA name, e.g.
 * "cudaMallocFromPoolAsync") with `error`; if `persistent`, every call from then on fails too.
 * A failing call leaves its outputs unmodified. Replaces any earlier fault on that API. */
cudaError_t cudasimInjectFault(const char *api, unsigned long nth, cudaError_t error, int persistent);

/* Fails each call of `api` with probability per_million / 1e6, from a generator seeded with
 * `seed` (deterministic for a given call order). */
cudaError_t cudasimInjectFaultRate(const char *api, unsigned per_million, cudaError_t error,
                                   unsigned long long seed);

/* Removes every injected fault. */
void cudasimClearFaults(void);

/* Calls made to `api` since the last reset of counters; api NULL: all APIs together.
 * Unknown names count 0. */
unsigned long long cudasimCallCount(const char *api);
void cudasimResetCallCounts(void);

/* Whether the runtime has initialised `device` (on a GPU: its primary context exists), for the
 * stand-in libcuda.so.1's cuDevicePrimaryCtxGetState. cudaErrorInvalidDevice for a bad
 * ordinal. */
cudaError_t cudasimDeviceInitialized(int device, int *initialized);

/* Waits for all work, then returns every device to its initial state: all streams, events and
 * pools are destroyed (their handles become invalid), memory is released, sticky errors,
 * faults and counters are cleared, and the environment is read again. No other thread may be
 * using the runtime meanwhile. */
void cudasimReset(void);

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H */
