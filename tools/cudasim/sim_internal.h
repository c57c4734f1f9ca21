/* cudasim internals shared by sim_core.c (devices, errors, handles, counters, faults),
 * sim_stream.c (streams, events, host functions, copies), sim_pool.c (memory, pool access, IPC)
 * and sim_copy.c (synchronous and peer copies, peer access).
 *
 * Locking. sim_g.lock is a writer-preferring rwlock (sim_rwlock). Every call takes it
 * exclusively (sim_lock) except the hot path of cudaMallocAsync / cudaMallocFromPoolAsync /
 * cudaFreeAsync on an existing non-legacy stream outside capture, which takes it shared
 * (sim_lock_shared), so that the allocator calls of different streams do not serialize behind
 * one lock. The rule that keeps this simple: state that shared holders write is guarded by a
 * finer lock (or is atomic); all other state is written only under the exclusive lock, so a
 * shared holder may read it freely.
 * Shared holders write only:
 *  - their own stream's submitted, clock, has_worker and op queue: under the stream's slock;
 *  - one pool's ranges, pages, counters and allocation map: under the pool's lock;
 *  - the device's page map (chunk_map, page_pool, map_hint): under the device's arena_lock;
 *  - the device's reserved bytes: atomic, reserved by compare-and-swap against capacity;
 *  - stream reference counts: atomic; sim_g.workers: under workers_lock.
 * Everything they read of other streams (completed: atomic; observed, retired_at, the legacy
 * stream's submitted and clock, device_syncs) and the handle registry are written only under
 * the exclusive lock. Pool structures are freed only under the exclusive lock, so a pool found
 * from a page under the shared lock stays valid until it is released. The legacy stream, stream
 * creation (per-thread, legacy), device initialisation, capture, synchronization, pool
 * destruction, trimming, attributes and reset all stay exclusive.
 *
 * Lock order (never take a lock to the left while holding one to its right):
 *   sim_g.lock (shared or exclusive) -> stream slock (one stream at a time)
 *     -> pool lock (one pool at a time) -> device arena_lock
 *   and the leaves, taken last and alone: stream qlock, stream dlock, sim_g.workers_lock,
 *   fault_lock. slock and the pool lock are taken only by shared holders (an exclusive holder
 *   has no one to exclude). A thread never takes sim_g.lock twice, in any mode (the rwlock is
 *   non-recursive, writer-preferring): to wait, it releases it (see wait_completed).
 * Stream workers take no lock for a free or a host function, sim_g.lock shared and then the
 * device's arena_lock for an unmap (OP_UNMAP), sim_g.lock shared to read the device's sticky
 * error before a memset or copy of a live range (which itself runs unlocked); for other ops
 * they take sim_g.lock exclusively; a stream's op queue (head, tail, destroyed) is guarded by
 * its qlock, and `completed` is atomic, written by the worker alone; waiters for it sleep on
 * done_cv with the stream's dlock, never holding sim_g.lock. */
#ifndef CUDASIM_INTERNAL_H
#define CUDASIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "cudasim.h"

#define SIM_MAX_DEVICES 16
#define SIM_ALLOC_ALIGN ((size_t)512)            /* allocation rounding (rule 8's 512 B) */
#define SIM_CHUNK ((size_t)2 << 20)              /* physical granularity, like the driver's */
#define SIM_DEFAULT_CAPACITY ((size_t)16 << 30)
#define SIM_MIN_ARENA ((size_t)64 << 30)         /* host address space reserved per device */

/* Every exported API, once: generates the counter and fault tables. */
#define SIM_APIS(X) \
    X(cudaMallocAsync) X(cudaFreeAsync) X(cudaMallocFromPoolAsync) X(cudaMemPoolCreate) \
    X(cudaMemPoolDestroy) X(cudaDeviceGetDefaultMemPool) X(cudaDeviceSetMemPool) \
    X(cudaDeviceGetMemPool) X(cudaMemPoolSetAttribute) X(cudaMemPoolGetAttribute) \
    X(cudaMemPoolTrimTo) X(cudaMemPoolSetAccess) X(cudaMemPoolExportToShareableHandle) \
    X(cudaMemPoolImportFromShareableHandle) X(cudaStreamCreate) X(cudaStreamCreateWithFlags) \
    X(cudaStreamCreateWithPriority) X(cudaStreamDestroy) X(cudaStreamSynchronize) \
    X(cudaStreamQuery) X(cudaStreamWaitEvent) X(cudaLaunchHostFunc) X(cudaEventCreate) \
    X(cudaEventCreateWithFlags) X(cudaEventRecord) X(cudaEventQuery) X(cudaEventSynchronize) \
    X(cudaEventDestroy) X(cudaEventElapsedTime) X(cudaMemsetAsync) X(cudaMemcpyAsync) \
    X(cudaMalloc) X(cudaMallocManaged) X(cudaFree) X(cudaMallocHost) X(cudaFreeHost) X(cudaHostAlloc) \
    X(cudaMemGetInfo) X(cudaDeviceSynchronize) X(cudaGetDeviceCount) X(cudaSetDevice) \
    X(cudaGetDevice) X(cudaDeviceGetAttribute) X(cudaDriverGetVersion) \
    X(cudaRuntimeGetVersion) X(cudaGetLastError) X(cudaPeekAtLastError) X(cudaGetErrorName) \
    X(cudaGetErrorString) X(cudaStreamIsCapturing) X(cudaGetDeviceProperties) \
    X(cudaStreamGetId) X(cudaDeviceCanAccessPeer) X(cudaMemPoolGetAccess) \
    X(cudaMemPoolExportPointer) X(cudaMemPoolImportPointer) X(cudaDeviceReset) \
    X(cudaStreamGetDevice) \
    SIM_GRAPH_APIS(X) SIM_PEER_APIS(X) SIM_TORCH_APIS(X)

/* The rest of what PyTorch imports: pinned/registered host memory and pointer attributes
 * (sim_host.c), sim_torch_exports.c's, and legacy IPC (sim_ipc_legacy.c). */
#define SIM_TORCH_APIS(X) \
    X(cudaHostRegister) X(cudaHostUnregister) X(cudaPointerGetAttributes) X(cudaMemset) \
    X(cudaMemcpy2DAsync) X(cudaStreamGetPriority) X(cudaDeviceGetStreamPriorityRange) \
    X(cudaEventRecordWithFlags) X(cudaStreamAddCallback) X(cudaDeviceGetPCIBusId) \
    X(cudaGetDriverEntryPointByVersion) X(cudaProfilerStart) X(cudaProfilerStop) \
    X(__cudaRegisterFatBinary) X(__cudaRegisterFatBinaryEnd) X(__cudaUnregisterFatBinary) \
    X(__cudaRegisterFunction) X(__cudaRegisterVar) X(__cudaPushCallConfiguration) \
    X(__cudaPopCallConfiguration) X(__cudaGetKernel) X(__cudaLaunchKernel) \
    X(cudaLaunchKernel) X(cudaLaunchCooperativeKernel) X(cudaLaunchKernelExC) \
    X(cudaFuncGetAttributes) X(cudaFuncSetAttribute) \
    X(cudaOccupancyMaxActiveBlocksPerMultiprocessor) \
    X(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cudaGetSymbolAddress) \
    X(cudaMemcpyToSymbol) X(cudaKernelSetAttributeForDevice) X(cudaLibraryLoadData) \
    X(cudaLibraryLoadFromFile) X(cudaLibraryUnload) X(cudaLibraryGetKernel) \
    X(cudaLibraryGetKernelCount) X(cudaLibraryGetGlobal) X(cudaLibraryGetManaged) \
    X(cudaLibraryGetUnifiedFunction) X(cudaGraphAddNode) X(cudaGraphConditionalHandleCreate) \
    X(cudaGraphGetNodes) X(cudaGraphNodeGetDependencies) X(cudaStreamBeginCaptureToGraph) \
    X(cudaStreamUpdateCaptureDependencies) X(cudaUserObjectCreate) X(cudaUserObjectRelease) \
    X(cudaGraphRetainUserObject) X(cudaIpcGetMemHandle) X(cudaIpcOpenMemHandle) \
    X(cudaIpcCloseMemHandle) X(cudaIpcGetEventHandle) X(cudaIpcOpenEventHandle)

/* Copies, peers and IPC (sim_copy.c, sim_pool.c). */
#define SIM_PEER_APIS(X) \
    X(cudaMemcpy) X(cudaMemcpyPeer) X(cudaMemcpyPeerAsync) X(cudaDeviceEnablePeerAccess) \
    X(cudaDeviceDisablePeerAccess)

/* Graph capture and graphs (sim_graph.c). */
#define SIM_GRAPH_APIS(X) \
    X(cudaStreamBeginCapture) X(cudaStreamEndCapture) X(cudaStreamGetCaptureInfo) \
    X(cudaThreadExchangeStreamCaptureMode) X(cudaGraphInstantiate) \
    X(cudaGraphInstantiateWithFlags) X(cudaGraphLaunch) X(cudaGraphExecDestroy) \
    X(cudaGraphDestroy) X(cudaDeviceGetGraphMemAttribute) X(cudaDeviceSetGraphMemAttribute) \
    X(cudaDeviceGraphMemTrim)

typedef enum {
#define SIM_API_ENUM(name) SIM_API_##name,
    SIM_APIS(SIM_API_ENUM)
#undef SIM_API_ENUM
    SIM_API_COUNT
} sim_api;

/* A vector clock entry: this stream's future work is ordered after `stream_id`'s op `seq`. */
typedef struct {
    uint64_t stream_id;
    uint64_t seq;
} sim_tick;

typedef struct {
    sim_tick *ticks;
    uint32_t len, cap;
} sim_clock;

typedef struct sim_stream sim_stream;
typedef struct sim_pool sim_pool;
typedef struct sim_chunk sim_chunk;

/* OP_UNMAP: releases a remapped range's old addresses in stream order (sim_pool_unmap). */
typedef enum { OP_HOST, OP_MEMSET, OP_MEMCPY, OP_RECORD, OP_WAIT, OP_FREE, OP_UNMAP } sim_op_kind;

typedef struct sim_op {
    struct sim_op *next;
    sim_op_kind kind;
    bool bad_address; /* memset/memcpy whose range was not live when enqueued */
    uint64_t seq;
    union {
        struct { cudaHostFn_t fn; void *arg; } host;
        struct { void *dst; int value; size_t count; } set;
        struct { void *dst; const void *src; size_t count; } copy;
        struct { struct CUevent_st *event; uint64_t gen; } record;
        struct { sim_stream *target; uint64_t seq; } wait;
        struct { int device; char *base; size_t size; int ipc_fd; } unmap; /* ipc_fd: -1, or
                                  * the IPC pool's file (a dup the op closes) */
    } u;
} sim_op;

struct sim_stream {
    uint64_t id;             /* never reused, unlike handle values */
    int device;
    unsigned flags;
    int priority;
    bool legacy, destroyed, has_worker;
    uint64_t submitted;      /* seq of the last op enqueued */
    _Atomic uint64_t completed; /* seq of the last op executed (its worker writes it) */
    atomic_uint done_waiters;   /* threads in done_cv: the worker locks dlock to wake them */
    uint64_t observed;       /* highest seq a host synchronize has seen complete */
    uint64_t retired_at;     /* 0, or the device's syncs_started + 1 when it left the device
                              * list: a device synchronize begun later has seen all its work */
    sim_clock clock;
    pthread_mutex_t slock;   /* submitted, clock, has_worker against other shared-lock calls */
    pthread_mutex_t qlock;   /* head, tail, and destroyed's transitions */
    sim_op *head, *tail;
    pthread_cond_t work_cv;  /* worker, with qlock: new work or destroy */
    pthread_mutex_t dlock;   /* with done_cv: waiters for `completed` */
    pthread_cond_t done_cv;  /* waiters, with dlock: `completed` moved */
    atomic_uint refs;
    sim_stream *next_in_device;
    struct sim_capturing *capture; /* sim_graph.c: set while the stream is in a capture */
};

struct CUstream_st { sim_stream s; };

struct CUevent_st {
    unsigned flags;
    int device;
    bool recorded;
    bool time_valid;
    bool destroyed;          /* handle gone; freed when its last pending record has run */
    unsigned pending;        /* record ops not yet executed */
    sim_stream *stream;      /* of the most recent record (a reference) */
    uint64_t seq, gen;
    sim_clock clock;         /* the recording stream's clock at record time, plus its own tick */
    struct timespec time;
    struct sim_event_capture *capture; /* sim_graph.c: last recorded inside a capture */
};

/* A memset/memcpy of [lo, hi) of an allocation, op `seq` of `stream`. */
typedef struct {
    sim_stream *stream;      /* a reference */
    uint64_t seq;
    const char *lo, *hi;
    bool write;
} sim_use;

/* A range inside a chunk: allocated, or free with the stream-ordered free that released it. */
typedef struct sim_seg {
    struct sim_seg *prev, *next;           /* address order within the chunk */
    struct sim_seg *free_prev, *free_next; /* the pool's list of free segments */
    sim_chunk *chunk;
    char *addr;              /* absolute, so a chunk can be split without touching its segs */
    size_t size;
    bool allocated;
    sim_stream *freed_on;    /* NULL: free and known complete to the host (reusable anywhere) */
    uint64_t freed_seq;
    /* Allocated: the point in stream order it was allocated at (a reference; NULL when that
     * point had already executed), and its uses, pruned of those found executed: a use
     * conflicting with one of them, or a free, not ordered after it while it is pending is a
     * device fault. */
    sim_stream *alloc_on;
    uint64_t alloc_seq;
    sim_use *uses;
    uint32_t n_uses, cap_uses;
    bool managed;            /* allocated by cudaMallocManaged (the sync pool's) */
    /* IPC (sim_pool.c): an exported block's slot in its pool's shared table, plus one (0: not
     * exported); an imported block's too, with the serial it was exported under. */
    uint32_t export_slot;
    uint64_t export_serial;
} sim_seg;

/* A contiguous range of the pool's address space, backed by whole 2 MiB pages. Remapping and
 * trimming cut pages out of chunks, splitting them. */
struct sim_chunk {
    sim_chunk *next;
    sim_pool *pool;
    char *base;
    size_t size;
    sim_seg *segs;           /* sorted by offset, covering the chunk */
};

/* Open addressing on the pointer: the handle registry, and each pool's live allocations. */
typedef struct {
    const void *key;
    void *value;
    int type;
} sim_map_slot;

typedef struct {
    sim_map_slot *slots;
    size_t cap, len;
} sim_map;

struct sim_pool {
    pthread_mutex_t lock;    /* everything below but the flags and attributes, under shared
                              * sim_g.lock (the exclusive lock excludes all its users) */
    sim_map allocs;          /* live allocations by start address (SIM_H_ALLOC) */
    int device;
    bool is_default, is_sync, destroyed;
    int reuse_follow, reuse_opportunistic, reuse_internal;
    uint64_t release_threshold;
    size_t max_size;         /* 0: no cap beyond the device */
    size_t reserved, reserved_high, used, used_high;
    size_t live_allocs;
    /* cudaMemAccessFlags of each device for this pool's memory (cudaMemPoolSetAccess); the
     * owning device's is always ProtReadWrite. Written and read under the exclusive lock. */
    unsigned char access[SIM_MAX_DEVICES];
    /* IPC (cudaMemHandleTypePosixFileDescriptor, sim_pool.c). A shareable pool's pages are
     * mapped from ipc_fd, a memfd, at the file offset of their arena offset (past the header);
     * an imported pool (no allocations of its own) maps the exporter's whole file at `window`. */
    bool shareable, imported;
    int ipc_fd;
    struct sim_ipc_header *ipc; /* the file's header and export table, mapped shared */
    char *window;
    size_t window_size;
    uint32_t *free_slots;    /* exporter: export slots free again (under the pool's lock) */
    uint32_t n_free_slots, cap_free_slots;
    sim_chunk *chunks;
    sim_seg *free_segs;
    sim_pool *next_in_device;
};

struct CUmemPoolHandle_st { sim_pool p; };

typedef struct {
    bool ready;
    size_t capacity;
    _Atomic size_t reserved; /* all chunks of all pools, the sync pool included, and graph
                              * memory: see sim_device_charge */
    char *arena;
    size_t arena_size;
    pthread_mutex_t arena_lock; /* chunk_map, page_pool and map_hint */
    sim_chunk **chunk_map;   /* one slot per SIM_CHUNK of the arena */
    /* The pool owning each slot, for finding a pointer's pool without a lock: a pool structure
     * outlives any shared holder of sim_g.lock (it is freed under the exclusive lock). */
    sim_pool *_Atomic *page_pool;
    size_t map_len, map_hint;
    sim_pool *pools;         /* every pool, default and sync pool included */
    sim_pool *default_pool, *current_pool, *sync_pool;
    sim_stream *streams;     /* every stream alive (legacy and per-thread included) */
    sim_stream *legacy;
    uint64_t syncs_started;  /* device-wide synchronizations begun */
    uint64_t device_syncs;   /* the latest start number among those that have completed */
    cudaError_t sticky;
} sim_device;

/* sim_g.lock (sim_core.c). glibc's writer-preferring rwlock hands the lock from one exclusive
 * holder straight to the next waiting one, which must first be scheduled: with the workers'
 * and callers' exclusive calls queuing on it, raw cudaMallocAsync served half as many requests
 * as under the plain mutex it replaced (issue 8). Here the exclusive side is a plain mutex,
 * which a running thread may take as soon as it is free, and the shared side counts itself in
 * while briefly holding that mutex. */
typedef struct {
    pthread_mutex_t excl;     /* an exclusive holder's, throughout; a shared one's, to enter */
    atomic_uint readers;      /* shared holders inside */
    atomic_bool draining;     /* the exclusive holder waits for `readers` to reach 0 */
    pthread_mutex_t drain_lock; /* with drain_cv: that wait */
    pthread_cond_t drain_cv;
} sim_rwlock;

typedef struct {
    sim_rwlock lock;
    bool started;
    int device_count;
    size_t env_capacity;
    uint64_t next_stream_id;
    uint64_t generation;     /* bumped by cudasimReset, invalidates per-thread streams */
    uint64_t device_resets[SIM_MAX_DEVICES]; /* bumped by cudaDeviceReset: the same, per device */
    pthread_mutex_t workers_lock; /* workers and workers_cv */
    unsigned workers;        /* live worker threads */
    pthread_cond_t workers_cv;
    sim_device devices[SIM_MAX_DEVICES];
    /* Peers (sim_copy.c): CUDASIM_PEER_ACCESS=1 read at start, and which device has enabled
     * access to which (cudaDeviceEnablePeerAccess: [current][peer]); exclusive lock. */
    bool peer_access;
    bool peer_enabled[SIM_MAX_DEVICES][SIM_MAX_DEVICES];
} sim_state;

extern sim_state sim_g;

/* ---- sim_core.c ---- */
/* Counts the call, applies injected faults; returns cudaSuccess or the error to return. Takes
 * no lock; callers call it first. */
cudaError_t sim_enter(sim_api api);
/* Records err as the thread's last error (if not success) and returns it. */
cudaError_t sim_ret(cudaError_t err);
void sim_lock(void);   /* exclusive */
void sim_unlock(void); /* either mode */
/* Takes sim_g.lock shared; false (and not held) if the emulator has not started yet, when the
 * caller must take the exclusive path. */
bool sim_lock_shared(void);
int sim_current_device(void); /* under the lock */
sim_device *sim_dev(int device); /* exclusive; initialises the device on first use */
sim_device *sim_dev_ready(int device); /* either mode: NULL unless initialised */
void sim_map_put(sim_map *m, const void *key, int type, void *value);
void *sim_map_get(const sim_map *m, const void *key, int type);
void sim_map_remove(sim_map *m, const void *key);
void sim_map_free(sim_map *m);
bool sim_handle_valid(const void *handle, int type);
void sim_handle_add(const void *handle, int type);
void sim_handle_remove(const void *handle);
void sim_handle_put(const void *key, int type, void *value);
void *sim_handle_get(const void *key, int type);
/* Copies every live handle of `type` into a malloc'ed array (caller frees). */
size_t sim_handles_of_type(int type, void ***out);
enum { SIM_H_STREAM = 1, SIM_H_EVENT, SIM_H_POOL, SIM_H_HOST, SIM_H_ALLOC };
size_t sim_parse_size(const char *s, bool *ok);
extern _Thread_local bool sim_in_host_fn;

/* ---- sim_stream.c ---- */
/* Resolves a cudaStream_t (0, legacy, per-thread or a live handle) under the exclusive lock. */
sim_stream *sim_stream_resolve(cudaStream_t handle, cudaError_t *err);
/* The same under the shared lock, for the streams a shared holder may use: NULL with *err
 * cudaSuccess when the call must take the exclusive path instead (the legacy stream, a stream
 * still to create, a device not initialised). */
sim_stream *sim_stream_lookup(cudaStream_t handle, cudaError_t *err);
/* sim_stream_resolve, failing with the device's sticky error if it has one. */
sim_stream *sim_stream_resolve_live(cudaStream_t handle, cudaError_t *err);
/* The bodies of cudaMemsetAsync and cudaLaunchHostFunc on a resolved stream, under the
 * exclusive lock, for the entry points built on them (errors returned, not recorded as the
 * last error). */
cudaError_t sim_memset_locked(sim_stream *s, void *devPtr, int value, size_t count);
cudaError_t sim_host_fn_locked(sim_stream *s, cudaHostFn_t fn, void *userData);
/* cudaEventRecord's body (takes the lock; the error is returned, not recorded). */
cudaError_t sim_event_record(cudaEvent_t event, cudaStream_t stream);
void sim_stream_ref(sim_stream *s);
void sim_stream_unref(sim_stream *s);
/* Applies the legacy stream's implicit synchronization before work is enqueued on s. */
void sim_stream_implicit_sync(sim_stream *s);
/* Appends op to s (assigns its seq) and wakes the worker; returns the seq. */
cudaError_t sim_stream_enqueue(sim_stream *s, sim_op *op);
sim_op *sim_op_new(sim_op_kind kind);
/* Makes s wait for target's op `seq`, as cudaStreamWaitEvent would; target_clock is target's
 * clock as of that op (NULL: only the direct dependency is known). */
cudaError_t sim_stream_wait_for(sim_stream *s, sim_stream *target, uint64_t seq,
                                const sim_clock *target_clock);
uint64_t sim_clock_get(const sim_clock *c, uint64_t stream_id);
bool sim_clock_set_max(sim_clock *c, uint64_t stream_id, uint64_t seq);
bool sim_clock_merge(sim_clock *into, const sim_clock *from, uint64_t self_id);
void sim_clock_free(sim_clock *c);
/* Blocks (releasing the lock) until s has executed op `seq`, then marks it observed. */
void sim_stream_sync_to(sim_stream *s, uint64_t seq);
void sim_device_sync(int device);
/* sim_stream_sync_to, and marks observed too the work of other streams that s's op `seq` was
 * ordered after (deps: s's clock as of that op), as a host synchronize proves it complete. */
void sim_stream_sync_observing(sim_stream *s, uint64_t seq, const sim_clock *deps);
/* Has a host synchronize seen stream s's op `seq` complete? */
bool sim_stream_observed(const sim_stream *s, uint64_t seq);
void sim_streams_reset(void);
/* cudaDeviceReset, exclusive lock: waits for the device's work, then destroys its events and
 * streams (the legacy and per-thread ones are made afresh on their next use). */
void sim_streams_device_reset(int device);
/* A stream with no handle (graph launches' concurrent branches), and its destruction. */
sim_stream *sim_stream_new_internal(int device);
void sim_stream_destroy_internal(sim_stream *s);

/* ---- sim_pool.c ---- */
/* Is [p, p+n) inside one live allocation of device `device`? */
bool sim_range_live(const void *p, size_t n);
/* Exclusive lock, for [p, p+n) (n > 0) that the next op on s reads or writes: is it inside one
 * live allocation, and is that op ordered (same stream, an event or legacy dependency, or
 * executed already) after the allocation and after every pending use of another stream that
 * writes bytes it touches or touches bytes it writes (rule 2)? *seg: the pool allocation, for
 * sim_range_note_use (NULL for graph memory, whose uses are not tracked). */
bool sim_range_use_ok(const void *p, size_t n, sim_stream *s, bool write, sim_seg **seg);
/* Exclusive lock: op `seq` of s (just enqueued) reads or writes [p, p+n) of seg (NULL: none). */
void sim_range_note_use(sim_seg *seg, const void *p, size_t n, sim_stream *s, uint64_t seq,
                        bool write);
bool sim_is_device_address(const void *p);
/* Exclusive lock: the device whose mapped memory (pool, cudaMalloc, managed, graph) holds p,
 * or -1; *managed: p is inside a live cudaMallocManaged allocation. */
int sim_device_of_address(const void *p, bool *managed);
cudaError_t sim_device_memory_init(sim_device *d, int device);
/* Releases memory above each pool's threshold after a host synchronize (rule 12). */
void sim_pools_release_after_sync(int device);
void sim_pools_reset(void);
/* cudaDeviceReset, exclusive lock, the device idle: frees its cudaMalloc memory and pinned
 * host memory; pools and stream-ordered allocations stay (the Runtime API's note). */
void sim_pools_device_reset(int device);
/* Runs an OP_UNMAP on a stream worker that holds no lock: wipes the retired range's pages and
 * returns its address range to the arena (takes sim_g.lock shared, then arena_lock). */
void sim_pool_unmap(const sim_op *op);

/* ---- sim_host.c: pinned and registered host memory (exclusive lock) ---- */
/* Records [p, p+size) as host memory the runtime knows, made with `device` current. */
bool sim_host_add(void *p, size_t size, int device, bool registered);
/* cudaFreeHost's part: forgets p if it starts a pinned (not registered) allocation. */
bool sim_host_remove_pinned(void *p);
/* The device's context goes: frees its pinned memory, forgets its registrations. */
void sim_host_device_reset(int device);

/* ---- sim_graph.c: stream capture, graphs, graph-owned memory ---- */
enum { SIM_H_GRAPH = 16, SIM_H_GRAPH_EXEC };
/* Lock-free: is a capture sequence in progress? The other files' fast paths skip every capture
 * check while it is false. */
bool sim_graph_capturing_any(void);
/* Lock-free: is p inside the address range reserved for graph allocations? */
bool sim_graph_owns(const void *p);
/* Under the lock, for p with sim_graph_owns(p): is [p, p+n) inside one live graph allocation? */
bool sim_graph_range_live(const void *p, size_t n);
/* Under the lock, for p with sim_graph_owns(p): the device of the graph allocation holding p,
 * or -1 (not live). */
int sim_graph_alloc_device(const void *p);
/* Under the lock, for a call about to enqueue `op` on s: false when the call goes on as usual;
 * true when capture handled it (op recorded into s's capture, or freed on error: *err). */
bool sim_graph_capture_op(sim_stream *s, sim_op *op, bool dst_dev, bool src_dev,
                          cudaError_t *err);
/* Under the lock: synchronizing or querying s while captures run (error, capture invalidated). */
cudaError_t sim_graph_stream_check(sim_stream *s);
/* Under the lock: a device synchronize while a stream of `device` captures. */
cudaError_t sim_graph_device_sync_check(int device);
/* Takes the lock: potentially unsafe calls (cudaMalloc, cudaFree) under the calling thread's
 * capture interaction mode; the captures that forbid the call are invalidated. */
cudaError_t sim_graph_unsafe_call(void);
/* The same under the lock, for calls that first check what necessarily conflicts with a
 * capture (a captured event, a capturing stream), whatever the thread's mode. */
cudaError_t sim_graph_unsafe_call_locked(void);
/* Entry-point interceptions (take the lock): true if capture or graph memory handled the call. */
bool sim_graph_malloc_async(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                            cudaError_t *err);
bool sim_graph_free_async(void *ptr, cudaStream_t stream, cudaError_t *err);
bool sim_graph_free_sync(void *ptr, cudaError_t *err);
/* Under the lock: events whose last record was inside a capture. */
cudaError_t sim_graph_event_usable(struct CUevent_st *e);
bool sim_graph_event_record(struct CUevent_st *e, sim_stream *s, cudaError_t *err);
bool sim_graph_event_wait(sim_stream *s, struct CUevent_st *e, unsigned flags, cudaError_t *err);
void sim_graph_event_forget(struct CUevent_st *e);
void sim_graph_stream_destroyed(sim_stream *s);
void sim_graphs_reset(void);
/* cudaDeviceReset, exclusive lock, the device idle: ends the device's captures, destroys its
 * executable graphs and returns its graph memory (graphs stay, to be instantiated afresh). */
void sim_graphs_device_reset(int device);

/* ---- sim_stream.c / sim_pool.c / sim_copy.c: copies, peers ---- */
/* Exclusive lock: enqueues a copy of count > 0 bytes on s as cudaMemcpyAsync does (capture,
 * the legacy stream's implicit sync, the range and stream-order checks; with check_access, the
 * access of s's device to pool memory: cudaMemcpyPeerAsync stages and needs none). */
cudaError_t sim_copy_enqueue(sim_stream *s, void *dst, const void *src, size_t count,
                             bool dst_dev, bool src_dev, bool check_access);
/* Blocks (releasing the exclusive lock) until s has executed op `seq`, without counting as a
 * host synchronize that observes frees (cudaMemcpy, cudaMemcpyPeer). */
void sim_stream_wait_done(sim_stream *s, uint64_t seq);
/* Either lock mode: the device whose memory holds p (its arena, or an imported pool's window),
 * or -1 for host memory and graph memory. */
int sim_device_of(const void *p);
/* Exclusive lock: may device `device` read (or, with write, write) [p, p+n)? Pool memory of
 * another device needs a grant (cudaMemPoolSetAccess); anything else is not checked here. */
bool sim_range_access_ok(const void *p, size_t n, int device, bool write);
/* sim_copy.c: CUDASIM_PEER_ACCESS=1 with two devices or more: every pair may be peers. */
bool sim_peers_possible(void);
/* sim_copy.c, exclusive lock: device `device` has left peer access to and from it (reset). */
void sim_peer_device_reset(int device);

/* ---- sim_core.c: device capacity (pools' pages and graph-owned memory) ---- */
/* Counts `bytes` more (or, with release, fewer) physical memory on `device` against its capacity;
 * fails if it does not fit. Atomic (compare-and-swap), so either lock mode may call it. */
bool sim_device_charge(int device, size_t bytes, bool release);

#endif
