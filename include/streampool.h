/* streampool: stream-ordered GPU memory for inference servers.
 *
 * A runtime per device holds named pools; each pool owns a cudaMemPool_t. Small requests are
 * kept per CUDA stream in free lists by size class, carved from 2 MiB slabs; large ones are
 * carved by best fit from segments, split and merged. An allocation on the stream that freed
 * memory is answered without a driver call; freed memory moves to another stream only behind an
 * event fence. Every call returns 0 (SP_OK) or a negative SP_ERR_* status.
 *
 *   sp_runtime *rt;  sp_runtime_create(0, NULL, &rt);
 *   sp_pool *pool;   sp_pool_create(rt, "llama", NULL, &pool);
 *   void *kv;        sp_alloc(pool, &kv, bytes, stream);
 *                    ... kernels on stream ...
 *                    sp_free(pool, kv, stream);
 *                    sp_stream_release(rt, stream);   before cudaStreamDestroy(stream)
 *
 * Thread safety: every call may be made from any thread, on any pool and stream, concurrently,
 * except that a pool or runtime must not be destroyed while other threads still use it.
 */
#ifndef STREAMPOOL_H
#define STREAMPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SP_API __attribute__((visibility("default")))
#else
#define SP_API
#endif

#define SP_VERSION_MAJOR 0
#define SP_VERSION_MINOR 1
#define SP_VERSION_PATCH 0
#define SP_VERSION_HEX ((SP_VERSION_MAJOR << 16) | (SP_VERSION_MINOR << 8) | SP_VERSION_PATCH)

/* The library's version as SP_VERSION_HEX, and as "major.minor.patch". */
SP_API unsigned sp_version(void);
SP_API const char *sp_version_string(void);

/* ---- status codes ---- */

#define SP_STATUS_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                         \
    X(INVALID, -1, "invalid argument")                                                          \
    X(TOO_LARGE, -2, "size too large to allocate")                                              \
    X(OUT_OF_MEMORY, -3, "out of device memory")                                                \
    X(LIMIT, -4, "the pool's limit would be exceeded now (retry after frees)")                  \
    X(BAD_POINTER, -5, "pointer was not allocated by streampool")                               \
    X(DOUBLE_FREE, -6, "pointer is already free")                                               \
    X(WRONG_POOL, -7, "pointer belongs to another pool")                                        \
    X(EXISTS, -8, "a pool with that name already exists")                                       \
    X(NOT_FOUND, -9, "no pool with that name")                                                  \
    X(BUSY, -10, "pool still has live allocations")                                             \
    X(NO_HOST_MEMORY, -11, "host memory exhausted")                                             \
    X(CUDA, -12, "CUDA runtime error (see sp_last_cuda_error)")                                 \
    X(NOT_SUPPORTED, -13, "not supported by this device or runtime")                            \
    X(CONFIG, -14, "invalid configuration")                                                    \
    X(NO_DEVICE, -15, "no CUDA device with that number")                                       \
    X(IO, -16, "a file could not be written")                                                 \
    X(REQUEST_ENDED, -17, "the request has already ended")                                    \
    X(NO_REQUEST, -18, "no such request")                                                       \
    X(NEVER_FITS, -19, "larger than the pool's limit can ever hold")                            \
    X(NO_ACCESS, -40, "the stream's device has no read-write access to the pool")              \
    X(IMPORT_RELEASED, -41, "the imported block was already released")                         \
    X(FOREIGN_HANDLE, -42, "the handle was exported by another pool or to another importer")   \
    X(STALE_HANDLE, -43, "the exported block was freed before it was imported")                \
    X(UNORDERED_FREE, -30, "free on another stream not ordered after the allocating stream")

enum {
#define SP_STATUS_ENUM(name, value, text) SP_ERR_##name = (value),
    SP_STATUS_MAP(SP_STATUS_ENUM)
#undef SP_STATUS_ENUM
};
#define SP_OK SP_ERR_OK

/* A sentence for a status, and its name ("SP_ERR_LIMIT"); "unknown status" otherwise. */
SP_API const char *sp_strerror(int status);
SP_API const char *sp_status_name(int status);

/* The cudaError_t of the last CUDA call that failed in this thread inside streampool during
 * this thread's latest streampool call (0 if none): what an SP_ERR_CUDA, SP_ERR_OUT_OF_MEMORY,
 * SP_ERR_NOT_SUPPORTED or SP_ERR_NO_DEVICE came from. Every call that can reach CUDA clears it
 * on entry, so it never describes an older one (calls that only read or format what streampool
 * holds, such as sp_pool_name or sp_stats_json, leave it as it was); a call that succeeded
 * after recovering from a CUDA error (the driver's out-of-memory answered by giving cached
 * memory back) still shows that error. */
SP_API int sp_last_cuda_error(void);

/* sp_last_cuda_error() in words, for a message to people: its name, number and description
 * ("cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime
 * version"), and, for the errors that mean there is no usable driver or GPU on this machine, how
 * to run on cudasim instead. "" if there is no CUDA error. Valid until this thread's next call. */
SP_API const char *sp_last_cuda_error_string(void);

/* ---- versioned structs ----
 *
 * Eight public structs are versioned: sp_runtime_config, sp_pool_config, sp_request_config
 * (read by the library), sp_stats, sp_stream_usage, sp_ptr_info, sp_oom_report and
 * sp_request_stats (written by it). One rule holds for all of them, so that the library can grow
 * them without breaking programs built against an older header:
 *  - Each begins with `uint32_t size`, which the caller sets to sizeof the struct: start from its
 *    _INIT macro (SP_RUNTIME_CONFIG_INIT, SP_POOL_CONFIG_INIT, SP_REQUEST_CONFIG_INIT,
 *    SP_STATS_INIT, SP_STREAM_USAGE_INIT, SP_PTR_INFO_INIT, SP_OOM_REPORT_INIT,
 *    SP_REQUEST_STATS_INIT) or write `sp_stats st = {.size = sizeof st}`.
 *  - Fields are only ever added at the end; none is removed, moved or retyped.
 *  - Every call accepts an older, shorter struct, down to the struct's first fields: a struct the
 *    library reads gets the defaults for the fields it lacks; into a struct the library writes,
 *    it writes nothing past the caller's size, and sets size to the bytes it filled.
 *  - A size of 0, what `sp_stats st = {0}` gives, or one shorter than the first fields, is
 *    refused with SP_ERR_INVALID, and sp_config_error() names the call and the missing .size:
 *    read as "the current size", it would let the library write past the end of an older
 *    program's shorter struct.
 * ABI: older headers declared the three configs and sp_request_stats with a `size_t size` (the
 * other four had uint32_t, the type kept because changing it would move their fields). On the
 * 64-bit little-endian machines CUDA runs on, a size_t holding a struct's size is that uint32_t
 * followed by four zero bytes, and the four bytes after `size` are padding the library never reads
 * (sp_runtime_config names them reserved_), so no field moved and a program built against an older
 * header keeps working unrebuilt (tests/test_versioned.c checks both). Source: `.size = sizeof x`
 * and the _INIT macros compile as before; a positional initializer of sp_runtime_config written
 * out by hand (not SP_RUNTIME_CONFIG_INIT) needs a 0 for reserved_ after the size. */

/* The _INIT of a struct the library writes: every field 0 but size (in C++, where designated
 * initializers came only with C++20, the same by a value-initialized copy). */
#ifdef __cplusplus
#define SP_SIZED_INIT(type) ([] { type sized_ = {}; sized_.size = sizeof sized_; return sized_; }())
#else
#define SP_SIZED_INIT(type) {.size = sizeof(type)}
#endif

/* ---- runtime ---- */

typedef struct sp_runtime sp_runtime;
typedef struct sp_pool sp_pool;

/* When an allocation finds no block on its own stream but one freed on another stream:
 *  BALANCED  take a block whose fence has completed (no wait); else allocate new memory; only if
 *            the device is out of memory, make the allocating stream wait on a fence.
 *  WAIT      take a block behind a fence, making the allocating stream wait if the fence is
 *            still pending, before allocating new memory (least memory, least concurrency).
 *  NO_WAIT   never make a stream wait: completed fences only, else new memory. */
typedef enum {
    SP_CROSS_STREAM_BALANCED = 0,
    SP_CROSS_STREAM_WAIT = 1,
    SP_CROSS_STREAM_NO_WAIT = 2,
} sp_cross_stream_policy;

/* Graph capture (rule 24 of docs/cuda-semantics.md): a capturing stream must bypass the caches.
 *  DECLARED  the application calls sp_stream_capture_begin/end around captures; the hot path
 *            then costs no CUDA call while no capture is declared.
 *  ALWAYS    sp_alloc and sp_free ask cudaStreamIsCapturing on every call (a stream declared
 *            with sp_stream_capture_begin counts as capturing until its end, without asking). */
typedef enum {
    SP_CAPTURE_DECLARED = 0,
    SP_CAPTURE_ALWAYS = 1,
} sp_capture_check;

typedef struct sp_runtime_config {
    uint32_t size;                     /* sizeof(sp_runtime_config): lets the struct grow */
    uint32_t reserved_;                /* 0; where a size_t size's high half stood */
    sp_capture_check capture_check;
    /* Each stream's cache keeps its byte counts to itself until they have moved by more than
     * this, so that threads on different streams share no counter on the hot path. Current
     * figures are exact at every stats read; peaks are exact when this is 0 and otherwise may
     * miss by up to this much per stream. Default 1 MiB. */
    size_t stats_flush_bytes;
    /* Pool settings in SP_ALLOC_CONF's syntax (below), applied to every pool before the
     * environment's; NULL: none. */
    const char *alloc_conf;
} sp_runtime_config;

#define SP_RUNTIME_CONFIG_INIT                                                                 \
    {sizeof(sp_runtime_config), 0, SP_CAPTURE_DECLARED, (size_t)1 << 20, NULL}

/* Creates a runtime for `device` with its default pool (named "default"). cfg NULL: defaults.
 * Reports (sp_runtime_stats and its pool count, summaries, Prometheus metrics, the OOM report)
 * show the default pool only once it has been used (held memory or counted a call), so that
 * they show the pools the program made.
 * On a machine without a CUDA driver or device this fails cleanly, never crashes: SP_ERR_CUDA,
 * *out untouched, and sp_last_cuda_error() gives the runtime's error (cudaErrorInsufficientDriver
 * or cudaErrorNoDevice), which cudaGetErrorName names.
 * SP_ERR_NO_DEVICE if there is no such device (sp_last_cuda_error: cudaErrorInvalidDevice). */
SP_API int sp_runtime_create(int device, const sp_runtime_config *cfg, sp_runtime **out);

/* Destroys every pool and the runtime. SP_ERR_BUSY (and nothing destroyed) if any pool has live
 * allocations, or while a capture is declared (sp_stream_capture_begin without its end: the
 * device synchronize that may be needed to settle the pools' memory would break it);
 * sp_config_error() then says which (pool 'chat' still has 2 live allocations (4096 bytes
 * requested)), as it does for sp_pool_destroy's SP_ERR_BUSY.
 * Where the driver refuses to take a pool's memory or its cudaMemPool back (as sp_pool_destroy
 * below), the error is returned and the runtime stays, with its default pool and the pools that
 * could not be destroyed (their cache given back; the other pools are gone): call
 * sp_runtime_destroy again. Only SP_OK destroys the runtime. */
SP_API int sp_runtime_destroy(sp_runtime *rt);

/* Calls cb for every pool of the runtime, oldest first (the default pool first), with no
 * streampool lock held: cb may call anything but destroy the runtime. Return non-zero from cb
 * to stop. Returns how many pools cb was called for, or a negative status. */
typedef int (*sp_pool_callback)(sp_pool *pool, void *user);
SP_API int sp_runtime_pools(sp_runtime *rt, sp_pool_callback cb, void *user);

/* sp_pool_trim(pool, 0) for every pool of the runtime (PyTorch's torch.cuda.empty_cache): the
 * cached memory of each goes back to the device, never its reservation nor a block in use.
 * Returns the first error (every pool is trimmed all the same). */
SP_API int sp_runtime_trim(sp_runtime *rt);

/* The runtime's default pool. */
SP_API int sp_runtime_default_pool(sp_runtime *rt, sp_pool **out);

/* Forgets `stream`: call before cudaStreamDestroy. Its cached blocks and free ranges in every
 * pool stay behind a final fence recorded now, so that a later stream with the same handle value
 * never picks them up unfenced. Allocations still live on the stream stay valid. */
SP_API int sp_stream_release(sp_runtime *rt, cudaStream_t stream);

/* Declares that `stream` is about to be / is no longer captured into a CUDA graph. Between the
 * two, allocations and frees on it go straight to the driver (graph nodes), never to a cache.
 * A block allocated before the capture and freed on the stream during it is kept aside (rule 24:
 * no cudaFreeAsync inside the capture) and returns to its slab or segment, as freed on the
 * stream, at capture end (for a capture SP_CAPTURE_ALWAYS found undeclared: at the stream's next
 * sp_alloc/sp_free after it). streampool never queries, fences or synchronizes a capturing
 * stream, nor the legacy stream while a capture is declared, and makes event queries and
 * synchronizes in relaxed capture mode while a capture may be under way (rule 25); other
 * streams go on as usual, their hot path without a lock. */
SP_API int sp_stream_capture_begin(sp_runtime *rt, cudaStream_t stream);
SP_API int sp_stream_capture_end(sp_runtime *rt, cudaStream_t stream);

/* ---- requests ----
 * A request scope gathers the allocations a server makes for one request on (pool, stream):
 *
 *     sp_request req;
 *     sp_request_begin(pool, stream, "chat-42", &req);
 *     sp_request_alloc(pool, req, &kv, bytes);        ...kernels on stream...
 *     sp_free(pool, kv, stream);                       (optional: the end frees what is left)
 *     cudaStreamSynchronize(stream);                   (optional: then say so at the end)
 *     sp_request_end(pool, req, SP_REQUEST_SYNCHRONIZED, &figures);
 *
 * At its end, every allocation of the request still live is freed on the request's stream (a
 * cancelled or failed request leaks nothing), and the request's frees are settled for other
 * streams at a constant cost: one fence recorded behind all of them (none if one already covers
 * them), or, with SP_REQUEST_SYNCHRONIZED, no CUDA call at all. A request is an id, never
 * reused: ending it twice or allocating into it after its end gives SP_ERR_REQUEST_ENDED, a
 * request of another pool SP_ERR_WRONG_POOL, an id no pool gave SP_ERR_NO_REQUEST; each leaves
 * everything as it was. An allocation of a request may be freed with sp_free (on any stream, in
 * that stream's order, like any allocation) before the end; it then leaves the request. Do not
 * free a request's allocation on one thread while another thread ends the request. */
typedef uint64_t sp_request;              /* 0 is never a request */

/* The end's promise: the host synchronized the request's stream after the last work that used
 * the request's memory, and every free made on that stream up to sp_request_end (by any thread)
 * is complete on the device. The end then settles all of the stream's frees with no CUDA call;
 * a promise that does not hold lets another stream reuse memory still in use. A free another
 * thread made on the request's stream is covered too: a server that frees across threads must
 * synchronize the stream after such a free before it ends a request there with the hint. Under
 * check_free_order:1 (sp_free) an end with the hint that finds a free on the stream still
 * pending returns SP_ERR_UNORDERED_FREE (sp_config_error names the stream) after ending the
 * request as without the hint (its frees fenced). */
#define SP_REQUEST_SYNCHRONIZED 1u

/* A request's figures, returned by its end. */
typedef struct sp_request_stats {
    uint32_t size;                        /* set by the caller: sizeof(sp_request_stats) */
    sp_request id;
    uint64_t allocs;                      /* successful sp_request_alloc calls (size > 0) */
    uint64_t misses;                      /* of them, not served by the stream's own cache */
    uint64_t frees;                       /* its allocations freed before the end */
    uint64_t freed_at_end;                /* its allocations still live at the end, freed there */
    uint64_t freed_at_end_bytes;          /* requested bytes of those */
    uint64_t requested_total;             /* bytes asked for by its allocations */
    uint64_t requested_peak;              /* most bytes of its allocations live at once */
    uint64_t fences_recorded;             /* by the end: 0 or 1 */
} sp_request_stats;

#define SP_REQUEST_STATS_INIT SP_SIZED_INIT(sp_request_stats)

/* Opens a request on (pool, stream); label (NULL: none) is copied, at most SP_POOL_NAME_MAX
 * bytes, for the trace. */
SP_API int sp_request_begin(sp_pool *pool, cudaStream_t stream, const char *label,
                            sp_request *out);
/* Admission before work: a request that states its expected footprint when it begins.
 * sp_request_begin_with claims that headroom under the pool's limit at once, counted as the
 * limit counts what a fresh allocation of expected_bytes would take from the driver (a 2 MiB
 * slab for a request of at most 1 MiB, whole 2 MiB driver pages above; never more than the
 * limit), or refuses at once, before the request makes any CUDA call (when only the pool's own
 * cached memory stands in the way, that memory goes back to the device first, as a trim would;
 * a refusal is decided from the pool's figures alone, with no CUDA call):
 *   SP_ERR_NEVER_FITS  expected_bytes is larger than the limit itself: reject the request;
 *   SP_ERR_LIMIT       the limit has no room now: queue it and retry after frees.
 * The request's allocations draw on the claim first whenever they need memory from the
 * driver, so that an admitted request never fails on its pool's limit while its driver
 * allocations fit the claim: one allocation of up to expected_bytes, or several whose fresh
 * allocations (each as rounded above) add up to at most the claim; memory its allocations find
 * in the pool's caches leaves the claim untouched. Its end gives what is left of the claim back
 * to the pool. A pool without a limit admits every request (its claim is still counted).
 * Counted in the stats: admissions, admitted_bytes, admission_refusals. */
typedef struct sp_request_config {
    uint32_t size;                        /* sizeof(sp_request_config) */
    const char *label;                    /* as sp_request_begin's label; NULL: none */
    uint64_t expected_bytes;              /* the footprint to admit; 0: no admission */
} sp_request_config;

#define SP_REQUEST_CONFIG_INIT {sizeof(sp_request_config), NULL, 0}

SP_API int sp_request_begin_with(sp_pool *pool, cudaStream_t stream,
                                 const sp_request_config *cfg, sp_request *out);
/* The footprint to declare (issue 27, item 5): into *out, what allocations of sizes[0..count)
 * may take from the pool's limit, each as a fresh allocation takes it from the driver (a 2 MiB
 * slab for a request of at most 1 MiB, its size in whole 2 MiB pages above; 0 for a size 0),
 * summed: with expected_bytes from here, a request admitted by sp_request_begin_with never
 * fails on its pool's limit for those allocations, whatever other streams do meanwhile (what is
 * left of a fresh slab may serve them, so the figure is a sum, not a packing). It counts
 * allocations, not bytes live at once: a request that frees and allocates again may declare
 * less, as its frees come back from its stream's cache. SP_ERR_NEVER_FITS if one size is larger
 * than the pool's limit in force, SP_ERR_TOO_LARGE if one is over SP_MAX_ALLOC. No CUDA call.
 *   size_t sizes[] = {4096, 3 << 20, 700 << 10};
 *   sp_request_config rq = SP_REQUEST_CONFIG_INIT;
 *   sp_pool_footprint(pool, sizes, 3, &rq.expected_bytes);   // 2 + 4 + 2 MiB: 8 MiB */
SP_API int sp_pool_footprint(const sp_pool *pool, const size_t *sizes, size_t count,
                             uint64_t *out);
/* sp_alloc on the request's pool and stream, the allocation counted in the request.
 * Any thread may allocate into a request while another ends it: each such allocation either
 * joins the request (SP_OK; the end frees it, counted in freed_at_end, so its pointer is valid
 * only until the end returns) or, when the end took the request's allocations first, gets
 * SP_ERR_REQUEST_ENDED with *ptr unchanged and nothing held. Never both, never a block left in
 * an ended request. */
SP_API int sp_request_alloc(sp_pool *pool, sp_request req, void **ptr, size_t bytes);
/* Ends the request: frees what it left live, settles its frees (flags: 0 or
 * SP_REQUEST_SYNCHRONIZED) and fills *out if not NULL (out->size must be set). */
SP_API int sp_request_end(sp_pool *pool, sp_request req, unsigned flags, sp_request_stats *out);

/* ---- pools ---- */

#define SP_POOL_NAME_MAX 63

typedef struct sp_pool_config {
    uint32_t size;                     /* sizeof(sp_pool_config) */
    uint64_t release_threshold;        /* bytes the cudaMemPool keeps at a synchronize;
                                          default UINT64_MAX (keep), unlike CUDA's 0 */
    sp_cross_stream_policy cross_stream;
    uint64_t limit;                    /* hard cap on the bytes the pool holds from the device
                                          (live + cached); 0: none. Device memory, counted in
                                          the driver's 2 MiB pages: the cap in force is this
                                          rounded down to whole pages (3 MiB holds 2 MiB), and
                                          its cudaMemPool never reserves more; a limit below
                                          one page is refused at creation (SP_ERR_CONFIG) */
    uint64_t reserve;                  /* bytes obtained at creation and kept for this pool
                                          alone; 0: none */
    uint64_t cache_limit;              /* most freed bytes its caches keep; UINT64_MAX: no cap.
                                          A free that leaves more goes back to the driver at
                                          once, on the freeing stream (cudaFreeAsync, in its
                                          order), even with that stream's work still queued */
    int priority;                      /* on another pool's out-of-memory, lower priorities give
                                          their cached memory back first */
    /* many devices and processes (below: "pools across devices and processes") */
    uint64_t peers_read_write;         /* bit d: device d may read and write the pool's memory
                                          (granted at creation: sp_pool_set_access) */
    uint64_t peers_read;               /* bit d: device d may read it (read-write wins) */
    int share;                         /* an sp_share_handle: SP_SHARE_POSIX_FD makes the pool
                                          exportable to other processes (sp_pool_export) */
} sp_pool_config;

#define SP_POOL_CONFIG_INIT                                                                    \
    {sizeof(sp_pool_config), UINT64_MAX, SP_CROSS_STREAM_BALANCED, 0, 0, UINT64_MAX, 0, 0, 0, 0}

/* Creates a pool named `name` (1..SP_POOL_NAME_MAX bytes, unique in the runtime) with its own
 * cudaMemPool_t. cfg NULL: defaults. The name must be well-formed UTF-8 without control
 * characters (C0, DEL, C1), so that it shows as it is in every report; SP_ERR_INVALID
 * otherwise. */
SP_API int sp_pool_create(sp_runtime *rt, const char *name, const sp_pool_config *cfg, sp_pool **out);

/* Wraps an existing cudaMemPool_t (of the runtime's device) as a named pool. Its attributes are
 * left as they are unless cfg is given (or SP_ALLOC_CONF sets its limit or reserve);
 * destroying the sp_pool does not destroy it. */
SP_API int sp_pool_adopt(sp_runtime *rt, const char *name, cudaMemPool_t mem_pool,
                  const sp_pool_config *cfg, sp_pool **out);

SP_API int sp_pool_find(sp_runtime *rt, const char *name, sp_pool **out);
SP_API const char *sp_pool_name(const sp_pool *pool);
SP_API cudaMemPool_t sp_pool_cuda_pool(const sp_pool *pool);

/* Returns the pool's cached memory to the device and destroys it. SP_ERR_BUSY (pool unchanged)
 * while it has live allocations or a capture is declared in its runtime. The default pool is
 * destroyed only with its runtime (SP_ERR_INVALID here).
 * The pool is gone only on SP_OK. Should the driver refuse a cudaFreeAsync of its memory or its
 * cudaMemPoolDestroy, the CUDA error is returned (sp_last_cuda_error) and the pool stays, found
 * by name and usable, holding only what the driver refused (its cache went back first, its
 * cudaMemPool trimmed to its reservation): call sp_pool_destroy again, and no byte is lost.
 * A context lost to a device fault (cudaErrorIllegalAddress and the other errors after which
 * "any further CUDA work will return the same error", or the runtime unloading at exit) took
 * the memory with it: the destroys then free what they hold and return SP_OK, and
 * sp_last_cuda_error() gives the error. */
SP_API int sp_pool_destroy(sp_pool *pool);

/* Changes the release threshold of the pool's cudaMemPool at run time. It is kept within
 * [reserve, limit]: the pool never releases its reservation, and never keeps more than its
 * limit past a synchronize. */
SP_API int sp_pool_set_release_threshold(sp_pool *pool, uint64_t bytes);

/* Changes the pool's limit at run time (bytes, rounded down to whole 2 MiB driver pages as at
 * creation; 0: no limit), safe while other threads allocate. Lowering it gives the pool's
 * cache above the new limit back to the device at once; live allocations stay valid, and new
 * ones that need memory from the driver get SP_ERR_LIMIT until the pool holds less than the
 * limit. A limit below one page or below the pool's reservation is refused (SP_ERR_CONFIG, with
 * a message: sp_config_error) and changes nothing. Raising it lets the pool grow past the
 * limit it was created with: the cudaMemPool of a pool made with a limit is capped (maxSize) at
 * it, and a cap is fixed at creation, so a limit raised past it moves the pool to a new
 * cudaMemPool capped at the new limit (0: uncapped), its reservation taken there first; the old
 * one keeps only the pool's segments still from it, and goes at the pool's destroy. A pool
 * adopted with sp_pool_adopt keeps its owner's cudaMemPool and cap. Held bytes never pass the
 * highest limit in force while they were claimed. */
SP_API int sp_pool_set_limit(sp_pool *pool, uint64_t bytes);

/* Changes how many freed bytes the pool keeps (held - active; UINT64_MAX: no cap); over it,
 * the pool gives wholly free, settled slabs and segments back to the driver, largest first. */
SP_API int sp_pool_set_cache_limit(sp_pool *pool, uint64_t bytes);

/* The configuration in force for the pool (code, then SP_ALLOC_CONF applied). */
SP_API int sp_pool_get_config(const sp_pool *pool, sp_pool_config *out);

/* Returns wholly free slabs and segments to the device, largest first, until the pool holds at
 * most keep_bytes from it, synchronizing the streams of their frees so that the memory really
 * goes (rule 13 of docs/cuda-semantics.md), then trims the cudaMemPool to keep_bytes (never
 * below what the pool still holds or its reservation). Blocks in use are never touched.
 * Returns the first CUDA error (the memory it could not give back stays the pool's). */
SP_API int sp_pool_trim(sp_pool *pool, size_t keep_bytes);

/* ---- configuration strings: SP_ALLOC_CONF ----
 *
 * "key:value,key:value", like PYTORCH_CUDA_ALLOC_CONF and MALLOC_CONF. Keys:
 *   release_threshold  size or "max"      cache_limit  size or "max"
 *   limit              size (0: none)     reserve      size
 *   priority           integer            cross_stream balanced | wait | no_wait
 *   trace              FILE: the runtime's allocation trace (below); not per pool
 *   check_free_order   0 | 1: the runtime checks cross-stream frees (sp_free); not per pool
 * Sizes are bytes with an optional K, M, G or T suffix (powers of 1024; "KiB", "KB" too; any
 * case, blanks allowed before the suffix; a fraction with a suffix, "0.5G", rounded down to
 * bytes), or a share of the device's total memory ("80%", "12.5%", up to 1000%, as PyTorch's
 * set_per_process_memory_fraction states it: of the runtime's device, or of the current device
 * in sp_config_apply); "max" (any case) where the key allows it. A pool's limit above its
 * device's memory, however written (bytes, suffix, share, or cfg.limit in code), is clamped to
 * the device at sp_pool_create with a "streampool: warning:" line on stderr (unless
 * SP_ALLOC_CONF_QUIET), and every report shows the limit in force: whole driver pages. A key
 * prefixed with a pool name and a dot ("llama-70b.limit:40G") applies to that pool only and
 * wins over the unprefixed key; an unprefixed key applies to every pool, except `reserve`,
 * which applies to the default pool only (memory set aside for every tenant is never meant;
 * write pool.reserve). The prefix must be a valid pool name (UTF-8 without control characters,
 * no trailing dot: "chat..limit" is refused); pool names are case-sensitive, and a prefix that
 * matches no pool but one in another case gets a hint in sp_runtime_destroy's warning. A key set
 * twice in one string (for the same pool) is refused, naming it. sp_runtime_create reads
 * SP_ALLOC_CONF from the environment and fails with SP_ERR_CONFIG if it does not parse; the
 * settings then apply on top of the configuration each sp_pool_create is given, so an operator
 * can change a deployed server's pools without rebuilding it. */

/* Applies `conf` to *cfg for a pool named pool_name (NULL: only unprefixed keys). On a bad key
 * or value returns SP_ERR_CONFIG, leaves *cfg unchanged and writes a message naming it into
 * err (if errlen > 0). */
SP_API int sp_config_apply(sp_pool_config *cfg, const char *pool_name, const char *conf, char *err,
                           size_t errlen);

/* The message of the last SP_ERR_CONFIG this thread got from streampool ("" if none); also of
 * the last error that needs words: a struct's .size not set (SP_ERR_INVALID), a busy runtime
 * or pool (SP_ERR_BUSY), a pool's reserve the device could not give (SP_ERR_OUT_OF_MEMORY).
 * Only such errors set it: read it right after the call that failed. */
SP_API const char *sp_config_error(void);

/* Pool names that SP_ALLOC_CONF or sp_runtime_config.alloc_conf prefix a key with but that no
 * pool of the runtime has had so far: most often a typo, which would otherwise be silently
 * ignored. Writes them, each once, separated by ',' into buf (snprintf-style, NUL-terminated
 * when len > 0) and returns how many there are (0: every name matched), or a negative status.
 * Call it once the server has created its pools. sp_runtime_destroy also prints one warning line
 * per such name on stderr ("streampool: warning: ..."), unless SP_ALLOC_CONF_QUIET is set to
 * anything but "" or "0". A name whose sp_pool_create failed (out of memory, say) is not counted
 * here, and its warning says that the creation failed. */
SP_API int sp_runtime_check_config(sp_runtime *rt, char *buf, size_t len);

/* ---- out of memory ---- */

/* Called when an allocation fails after streampool has given back the pool's own cached memory
 * and reclaimed other pools' (no streampool lock is held: it may free memory with sp_free).
 * Return non-zero to have the allocation retried once, 0 to fail it. Not called again while it
 * runs on this thread. Before the retry, every pool's cached memory (what the callback freed
 * into any pool) goes back to the device.
 * Also called when the pool's own limit refuses a request (SP_ERR_LIMIT), after the pool's own
 * cache went back: then no other pool is reclaimed, before or after, and only memory the
 * callback frees in this pool can make the retry succeed. A request larger than the limit on
 * its own (SP_ERR_NEVER_FITS), or than the device, fails without the callback. */
typedef int (*sp_oom_callback)(sp_pool *pool, size_t bytes, cudaStream_t stream, void *user);

SP_API int sp_runtime_set_oom_callback(sp_runtime *rt, sp_oom_callback cb, void *user);

#define SP_OOM_REPORT_POOLS 32

typedef struct {
    char name[SP_POOL_NAME_MAX + 1];
    uint64_t requested, active, cached;   /* streampool's figures */
    uint64_t reserved;                    /* the cudaMemPool's ReservedMemCurrent */
    uint64_t limit, reservation;
    int priority;
} sp_oom_pool;

/* What the runtime looked like when an allocation last failed with SP_ERR_OUT_OF_MEMORY,
 * SP_ERR_LIMIT (over the limit now: retry after frees) or SP_ERR_NEVER_FITS (larger than the
 * limit can ever hold): `status` tells which, and the JSON's "reason" says it in words;
 * `failures` counts all three. */
typedef struct sp_oom_report {
    uint32_t size;                        /* set by the caller: sizeof(sp_oom_report) */
    uint32_t failures;                    /* out-of-memory failures so far; 0: no report */
    char pool[SP_POOL_NAME_MAX + 1];      /* the pool that failed */
    uint64_t bytes;                       /* the request */
    cudaStream_t stream;
    uint64_t device_free, device_total;   /* cudaMemGetInfo at the failure */
    uint32_t npools, pools_omitted;
    sp_oom_pool pools[SP_OOM_REPORT_POOLS];
    int32_t status;                       /* SP_ERR_OUT_OF_MEMORY, SP_ERR_LIMIT or
                                             SP_ERR_NEVER_FITS */
    uint32_t reserved_;                   /* 0 */
    uint64_t rounded;                     /* the request as the pool would hold it (its size
                                           * class, or rounded to 512 bytes) */
    char stream_name[64];                 /* the stream's label (sp_stream_set_name), or "" */
} sp_oom_report;

#define SP_OOM_REPORT_INIT SP_SIZED_INIT(sp_oom_report)

SP_API int sp_runtime_last_oom(sp_runtime *rt, sp_oom_report *out);
/* The report as one JSON object, snprintf-style (the buffer form of sp_oom_report_print's
 * SP_TEXT_JSON). */
SP_API size_t sp_oom_report_json(const sp_oom_report *r, char *buf, size_t len);

/* ---- allocation ---- */

/* The largest request streampool accepts (SP_ERR_TOO_LARGE above it). */
#define SP_MAX_ALLOC ((size_t)1 << 46)

/* Allocates `bytes` usable on `stream` in stream order. bytes == 0 gives *ptr = NULL and SP_OK,
 * as cudaMalloc does; on error *ptr is left unchanged. Every pointer returned is aligned to at
 * least 256 bytes, as cudaMalloc's are, whatever the size class and wherever the block came from
 * (a stream's cache, another stream, the driver). */
SP_API int sp_alloc(sp_pool *pool, void **ptr, size_t bytes, cudaStream_t stream);

/* Frees ptr in stream order on `stream`: work enqueued on `stream` before this call may still use
 * it; it must not be used by work enqueued after. The block is reused by `stream` at once, and by
 * other streams only behind a fence. ptr NULL: no-op.
 *
 * Freed on another stream than the one it was allocated on (s0 allocated, s1 frees), the free
 * must be ordered after all of s0's work that uses the block, exactly as CUDA requires of a
 * cudaFreeAsync on s1: record an event on s0 after the last use there, make s1 wait for it
 * (cudaStreamWaitEvent), then sp_free(pool, ptr, s1); or synchronize s0 first. streampool
 * cannot do it for you: it hands the block to s1's next allocation at once, and may give it
 * back to the driver with cudaFreeAsync on s1, which without that order may run before s0's
 * pending allocation or use of it: a device fault (cudaErrorIllegalAddress, sticky for the
 * whole context) or another allocation's data overwritten.
 * The key check_free_order:1 (SP_ALLOC_CONF, or sp_runtime_config.alloc_conf; for the runtime)
 * turns on a debug check of this order: every allocation records an event on its stream, and a
 * free on another stream that finds that event pending while the freeing stream has no work
 * queued (nothing there can be waiting for s0) fails with SP_ERR_UNORDERED_FREE, the block still
 * live, sp_config_error() naming both streams. It cannot tell a freeing stream that waits for s0
 * from one that is busy with other work (those frees pass), nor see a later use on s0 the free
 * is not ordered after; it skips the legacy stream (its implicit order with blocking streams)
 * and declared captures. Off (the default), sp_alloc and sp_free make no CUDA call for it. */
SP_API int sp_free(sp_pool *pool, void *ptr, cudaStream_t stream);

/* The size class a request of `bytes` is rounded to (0 for 0 or too large). Requests up to
 * 1 MiB are held at that size; larger ones only at the request rounded to 512 bytes. */
SP_API size_t sp_size_class(size_t bytes);

/* ---- stats ---- */

#define SP_STATS_VERSION 5

typedef struct {
    uint64_t current, peak, total;
} sp_stat_bytes;

/* Counters, each once: name and the event that moves it (README's "What moves each counter"
 * says which call or event that is). Rendered by sp_stats_json, the summaries and the
 * Prometheus text. SP_STATS_COUNTERS lists all of them: those of stats version 1
 * (SP_STATS_COUNTERS_1, in the struct after the gauges) and those added since
 * (SP_STATS_COUNTERS_4, at the struct's end, so that older, shorter structs keep working). */
#define SP_STATS_COUNTERS(X) SP_STATS_COUNTERS_1(X) SP_STATS_COUNTERS_4(X)

#define SP_STATS_COUNTERS_1(X)                                                                  \
    X(allocs, "successful sp_alloc calls (size > 0)")                                          \
    X(frees, "successful sp_free calls (ptr != NULL)")                                         \
    X(same_stream_hits, "allocations served from the stream's own cache")                      \
    X(cross_stream_reuses, "blocks taken from another stream behind a completed fence")        \
    X(cross_stream_waits, "blocks taken from another stream by waiting on a pending fence")    \
    X(fences_recorded, "fence events recorded")                                                \
    X(driver_allocs, "cudaMallocFromPoolAsync calls that succeeded")                           \
    X(driver_frees, "cudaFreeAsync calls for cached or bypassed blocks")                       \
    X(bad_frees, "frees rejected: unknown pointer, double free or wrong pool")                 \
    X(capture_bypasses, "allocations passed straight to the driver during graph capture")      \
    X(oom_retries, "driver allocations retried after the driver ran out of memory")             \
    X(ooms, "allocations that failed with SP_ERR_OUT_OF_MEMORY")                               \
    X(limit_rejections, "allocations that failed with SP_ERR_LIMIT or SP_ERR_NEVER_FITS")       \
    X(reclaims, "times this pool gave cached memory back for another pool's out-of-memory")     \
    X(reclaimed_bytes, "bytes this pool gave back for another pool's out-of-memory")            \
    X(trims, "sp_pool_trim calls (sp_runtime_trim: one per pool)")                              \
    X(skipped_steps, "best-effort steps skipped after a CUDA error (probe, fence, give-back)") \
    X(give_back_failures, "segments the driver refused to take back (kept, counted as held)")

/* Counters of stats version 4. */
#define SP_STATS_COUNTERS_4(X)                                                                 \
    X(limit_retries, "driver allocations retried after the pool's limit refused them")          \
    X(trimmed_bytes, "bytes sp_pool_trim gave back to the device")                              \
    X(cache_limit_releases, "times freed memory over the cache limit went back to the driver") \
    X(cache_released_bytes, "bytes given back over the cache limit")                            \
    X(admissions, "requests admitted with an expected footprint (sp_request_begin_with)")       \
    X(admitted_bytes, "bytes claimed under the limit by admitted requests")                     \
    X(admission_refusals, "requests refused at their begin: SP_ERR_LIMIT or SP_ERR_NEVER_FITS")

/* Byte figures, each {current, peak, total}: name, what current counts, what total counts.
 * Rendered by sp_stats_json, sp_runtime_metrics_prometheus and sp_pool_summary. */
#define SP_STATS_BYTES(X)                                                                      \
    X(requested, "bytes asked for by live allocations",                                        \
      "bytes ever asked for by successful allocations")                                        \
    X(active, "bytes of live allocations, rounded (small: size class; large: 512 bytes)",      \
      "bytes ever handed out, rounded")                                                        \
    X(cached, "bytes held but not live: stream bins and free ranges of slabs and segments",    \
      "bytes ever freed into the caches")                                                      \
    X(held, "bytes taken from the driver and not given back: active + cached",                 \
      "bytes ever taken from the driver")

/* Point-in-time figures from the driver and the count of pools: name, unit ("bytes" or ""),
 * meaning. */
#define SP_STATS_GAUGES(X)                                                                     \
    X(pool_reserved, "bytes", "the cudaMemPools' ReservedMemCurrent")                          \
    X(pool_used, "bytes", "the cudaMemPools' UsedMemCurrent")                                  \
    X(pools, "", "pools counted")

/* Memory layout (stats version 2), point-in-time: small blocks are carved from slabs, large
 * ranges from segments; both are driver allocations that `held` counts. Same form as
 * SP_STATS_GAUGES; a unit of "" means the name already says it. */
#define SP_STATS_LAYOUT(X)                                                                     \
    X(inactive_split, "bytes",                                                                 \
      "free bytes inside slabs and segments that hold a live or cached block")                 \
    X(largest_free, "bytes", "the largest free range in any segment or slab")                  \
    X(segments, "", "segments held (large-tier driver allocations)")                           \
    X(segment_bytes, "", "bytes of the segments held")                                         \
    X(slabs, "", "slabs held (small-tier driver allocations)")                                 \
    X(slab_bytes, "", "bytes of the slabs held")

/* Streams (stats version 3): G(name, unit, text) for a point-in-time figure, C(...) for a count
 * that only grows. */
#define SP_STATS_STREAMS(G, C)                                                                 \
    G(streams, "", "stream caches in use (a stream per pool it was used with)")                \
    C(released_streams, "", "stream caches released (sp_stream_release, thread exits)")

/* Reservations (stats version 4), point-in-time, in SP_STATS_GAUGES' form. A pool's reserve
 * is device memory kept for it alone whether it holds any or not; `held` counts only what it
 * took from the driver. So that the figures add up, the part of the reservation no block holds
 * is its own figure, per pool: reserve_idle = max(reserve - held, 0) (the runtime's is the sum
 * of its pools'). A pool's device use, pool_reserved, is then held + reserve_idle + what its
 * cudaMemPool keeps beyond both (pages under the release threshold): after sp_pool_trim of a
 * pool with a 256 MiB reserve, held 0, reserve_idle 256 MiB, pool_reserved 256 MiB. */
#define SP_STATS_RESERVE(X)                                                                     \
    X(reserve, "bytes", "the pools' reservations: device memory kept for them alone")           \
    X(reserve_idle, "bytes", "reserved but not held: max(reserve - held, 0) per pool")

/* Peers and processes (stats version 5), in SP_STATS_STREAMS' form: G(...) point-in-time,
 * C(...) a count that only grows. A grant is one (pool, peer device) pair; an importer is one
 * sp_pool_export to a process that has not closed or died. */
#define SP_STATS_MULTI(G, C)                                                                    \
    G(peers_read_write, "", "peer devices granted read-write access (a grant per pool)")      \
    G(peers_read, "", "peer devices granted read-only access (a grant per pool)")             \
    G(importers, "", "processes the pools are exported to, alive as last seen")               \
    G(imported_blocks, "", "exported blocks an importer holds now")                           \
    G(importer_held, "", "blocks the exporter freed, kept until their importer releases them") \
    G(importer_held_bytes, "", "bytes of those blocks")                                       \
    C(importer_reclaims, "", "held blocks given back because their importer died or closed")

typedef struct sp_stats {
    uint32_t size;      /* set by the caller: sizeof(sp_stats) */
    uint32_t version;   /* set by the library: SP_STATS_VERSION */
#define SP_STATS_BYTES_FIELD(name, current_text, total_text) sp_stat_bytes name;
    SP_STATS_BYTES(SP_STATS_BYTES_FIELD)   /* requested, active, cached, held */
#undef SP_STATS_BYTES_FIELD
#define SP_STATS_GAUGE_FIELD(name, unit, text) uint64_t name;
    SP_STATS_GAUGES(SP_STATS_GAUGE_FIELD)  /* pool_reserved, pool_used, pools */
#undef SP_STATS_GAUGE_FIELD
#define SP_STATS_FIELD(name, text) uint64_t name;
    SP_STATS_COUNTERS_1(SP_STATS_FIELD)
#undef SP_STATS_FIELD
    /* version 2: memory layout (SP_STATS_LAYOUT). */
#define SP_STATS_GAUGE_FIELD(name, unit, text) uint64_t name;
    SP_STATS_LAYOUT(SP_STATS_GAUGE_FIELD)
#undef SP_STATS_GAUGE_FIELD
    /* version 3: streams (SP_STATS_STREAMS). A read costs O(streams); a released stream leaves
     * only a tombstone of a few hundred bytes (its frees' tags may still be in use) that reads
     * never visit. */
#define SP_STATS_GAUGE_FIELD(name, unit, text) uint64_t name;
    SP_STATS_STREAMS(SP_STATS_GAUGE_FIELD, SP_STATS_GAUGE_FIELD)
#undef SP_STATS_GAUGE_FIELD
    /* version 4: reservations (SP_STATS_RESERVE) and the counters of SP_STATS_COUNTERS_4 */
#define SP_STATS_GAUGE_FIELD(name, unit, text) uint64_t name;
    SP_STATS_RESERVE(SP_STATS_GAUGE_FIELD)
#undef SP_STATS_GAUGE_FIELD
#define SP_STATS_FIELD(name, text) uint64_t name;
    SP_STATS_COUNTERS_4(SP_STATS_FIELD)
#undef SP_STATS_FIELD
    /* version 5: peers and processes (SP_STATS_MULTI) */
#define SP_STATS_GAUGE_FIELD(name, unit, text) uint64_t name;
    SP_STATS_MULTI(SP_STATS_GAUGE_FIELD, SP_STATS_GAUGE_FIELD)
#undef SP_STATS_GAUGE_FIELD
} sp_stats;

#define SP_STATS_INIT SP_SIZED_INIT(sp_stats)

/* Fills *out (out->size must be set) for one pool, or for all pools of a runtime. */
SP_API int sp_pool_stats(sp_pool *pool, sp_stats *out);
SP_API int sp_runtime_stats(sp_runtime *rt, sp_stats *out);

/* Writes stats as one JSON object into buf (always NUL-terminated when len > 0); returns the
 * length the full text needs, excluding the NUL, like snprintf. The buffer form of
 * sp_stats_print's SP_TEXT_JSON (text output, below). */
SP_API size_t sp_stats_json(const sp_stats *st, char *buf, size_t len);

/* ---- text output: one shape for every report ----
 *
 * Every report comes as text the same way, as jemalloc's malloc_stats_print and mimalloc's
 * mi_stats_print_out give theirs: sp_<subject>_print(subject, format, write, user) hands the
 * whole text to the caller's writer, in one or more pieces in order (not NUL-terminated; len
 * bytes each). The reports, by subject and format:
 *   sp_stats_print       SP_TEXT_JSON (as sp_stats_json), SP_TEXT_SUMMARY (sp_stats_summary)
 *   sp_oom_report_print  SP_TEXT_JSON (sp_oom_report_json)
 *   sp_pool_print        SP_TEXT_SUMMARY (sp_pool_summary)
 *   sp_runtime_print     SP_TEXT_SUMMARY (sp_runtime_summary), SP_TEXT_PROMETHEUS
 *                        (sp_runtime_metrics_prometheus)
 * Returns SP_OK, or a stats read's error with the text written all the same; SP_ERR_IO if write
 * returned non-zero (it is not called again); SP_ERR_INVALID (a NULL argument, a format the
 * subject has not) or SP_ERR_NO_HOST_MEMORY with nothing written.
 *   static int to_file(const char *text, size_t len, void *f)
 *   { return fwrite(text, 1, len, f) == len ? 0 : -1; }
 *   sp_runtime_print(rt, SP_TEXT_SUMMARY, to_file, stderr);
 *
 * Kept so that code written for 0.1 compiles and links unchanged, each documented below where it
 * was: the buffer forms (snprintf-style into the caller's buffer: sp_stats_json,
 * sp_stats_summary, sp_oom_report_json, sp_pool_summary, sp_runtime_summary,
 * sp_runtime_metrics_prometheus), which render each report's text, and the one-call forms below,
 * thin wrappers of sp_*_print that collect the text into a string. */
typedef enum {
    SP_TEXT_JSON = 1,
    SP_TEXT_SUMMARY = 2,    /* for people, as PyTorch's memory_summary */
    SP_TEXT_PROMETHEUS = 3, /* the text exposition format, for a /metrics endpoint */
} sp_text_format;

/* Receives len bytes of the text; returns 0 to go on, non-zero to stop (the call: SP_ERR_IO). */
typedef int (*sp_text_writer)(const char *text, size_t len, void *user);

SP_API int sp_stats_print(const sp_stats *st, sp_text_format format, sp_text_writer write,
                          void *user);
SP_API int sp_oom_report_print(const sp_oom_report *r, sp_text_format format,
                               sp_text_writer write, void *user);
SP_API int sp_pool_print(sp_pool *pool, sp_text_format format, sp_text_writer write, void *user);
SP_API int sp_runtime_print(sp_runtime *rt, sp_text_format format, sp_text_writer write,
                            void *user);

/* The one-call forms (compatibility wrappers): sp_*_print's text as a NUL-terminated string in
 * *out that the caller frees with sp_text_free (NULL on failure); statuses as sp_*_print's.
 *   sp_stats_json_alloc(st, &s)          is  sp_stats_print(st, SP_TEXT_JSON, ...)
 *   sp_stats_summary_alloc(st, &s)       is  sp_stats_print(st, SP_TEXT_SUMMARY, ...)
 *   sp_oom_report_json_alloc(r, &s)      is  sp_oom_report_print(r, SP_TEXT_JSON, ...)
 *   sp_pool_summary_alloc(pool, &s)      is  sp_pool_print(pool, SP_TEXT_SUMMARY, ...)
 *   sp_runtime_summary_alloc(rt, &s)     is  sp_runtime_print(rt, SP_TEXT_SUMMARY, ...)
 *   sp_runtime_metrics_prometheus_alloc  is  sp_runtime_print(rt, SP_TEXT_PROMETHEUS, ...) */
SP_API int sp_stats_json_alloc(const sp_stats *st, char **out);
SP_API int sp_stats_summary_alloc(const sp_stats *st, char **out);
SP_API int sp_oom_report_json_alloc(const sp_oom_report *r, char **out);
SP_API int sp_pool_summary_alloc(sp_pool *pool, char **out);
SP_API int sp_runtime_summary_alloc(sp_runtime *rt, char **out);
SP_API int sp_runtime_metrics_prometheus_alloc(sp_runtime *rt, char **out);
SP_API void sp_text_free(char *text);

/* ---- Prometheus metrics ----
 *
 * Every pool's figures in the Prometheus text exposition format (version 0.0.4), for a server's
 * /metrics endpoint, labelled {device="0",pool="llama"} (label values escaped):
 *   streampool_<bytes>_bytes              gauge    current, e.g. streampool_held_bytes
 *   streampool_<bytes>_peak_bytes         gauge    peak
 *   streampool_<bytes>_added_bytes_total  counter  total
 *   streampool_pool_reserved_bytes, streampool_pool_used_bytes   gauges from the driver
 *   streampool_<counter>_total            counter  every SP_STATS_COUNTERS entry
 *   streampool_pools                      gauge    pools of the runtime (no pool label)
 *   streampool_limit_bytes                gauge    the limit in force, whole driver pages; only
 *                                                  pools with a limit (alert on held / limit)
 * with # HELP and # TYPE lines from the X-macro lists above. Writes into buf (NUL-terminated
 * when len > 0) and sets *needed to the length the whole text needs, excluding the NUL: a
 * buffer of at least *needed + 1 bytes holds all of it. Returns SP_OK or the first error a
 * pool's stats read met (the text is complete either way). The buffer form of
 * sp_runtime_print's SP_TEXT_PROMETHEUS. */
SP_API int sp_runtime_metrics_prometheus(sp_runtime *rt, char *buf, size_t len, size_t *needed);

/* ---- allocation trace ----
 *
 * Off by default. On, every sp_alloc and sp_free of the runtime is recorded with its time,
 * thread, pool, stream, pointer, requested size, class size and outcome (hit: the stream's own
 * cache; steal: another stream's block behind a completed fence; wait: behind a pending fence;
 * fresh: from the driver; fail), in a buffer per thread (at most SP_TRACE_THREAD_EVENTS events
 * each; later ones are dropped and counted). When the trace stops, two files are written:
 *   PATH       RMM's CSV (logging_resource_adaptor): Thread,Time,Action,Pointer,Size,Stream,
 *              then Pool,ClassSize,Outcome,StreamName (the stream's label, if any);
 *              successful calls only, so that RMM's tools and `sp-bench replay PATH` replay it;
 *   PATH.json  Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or chrome://tracing: a
 *              counter track per pool (requested, held, reserved bytes), an instant event per
 *              call on its thread's track, and process-wide instants for oom, limit, reclaim
 *              (an allocation that needed other memory given back) and trim.
 * One time base: the CSV's Time (seconds) and the JSON's ts (microseconds) count from the start.
 * The start records each pool's held and reserved bytes, the JSON's first counters (ts 0), so a
 * trace started mid-run shows what was already held; `requested` counts calls in the trace. A
 * stream's label is the one it had when the call was recorded (released streams keep theirs).
 * Start it with sp_runtime_trace_start or with the key trace:PATH in SP_ALLOC_CONF (the
 * runtime's first trace, written when it is destroyed; PATH-2, PATH-3... for further runtimes of
 * the process). Off, sp_alloc and sp_free pay one predictable branch. A stop while other threads
 * still allocate drops their events in flight, nothing else. */
#define SP_TRACE_THREAD_EVENTS ((size_t)1 << 20)

SP_API int sp_runtime_trace_start(sp_runtime *rt, const char *path);
/* Stops the trace and writes both files: SP_ERR_IO if one cannot be written, SP_ERR_INVALID if
 * no trace is on. */
SP_API int sp_runtime_trace_stop(sp_runtime *rt);

/* ---- summaries for people (like PyTorch's memory_summary) ----
 *
 * Multi-line text, sizes in B/KiB/MiB/GiB/TiB with one decimal:
 *   sp_stats_summary     a byte table (current, peak, total), the driver's figures, the hit
 *                        rate and every counter, from a stats struct;
 *   sp_pool_summary      a title line naming the pool, then its sp_stats_summary;
 *   sp_runtime_summary   a title line, the runtime's sp_stats_summary, then one table row per
 *                        pool (oldest first): requested, active, cached, held, reserved, limit.
 * Each writes into buf (NUL-terminated when len > 0); sp_stats_summary returns the length the
 * whole text needs (like snprintf), the others set *needed to it and return SP_OK or the first
 * error a stats read met. The buffer forms of sp_stats_print, sp_pool_print and sp_runtime_print
 * with SP_TEXT_SUMMARY. */
SP_API size_t sp_stats_summary(const sp_stats *st, char *buf, size_t len);
SP_API int sp_pool_summary(sp_pool *pool, char *buf, size_t len, size_t *needed);
SP_API int sp_runtime_summary(sp_runtime *rt, char *buf, size_t len, size_t *needed);

/* ---- per-stream figures, peaks, pointers, labels, live allocations ---- */

/* Labels a stream for people: shown in the OOM report (stream_name), the trace (the CSV's
 * StreamName column, the JSON's stream_name argument: labels as they are when the trace is
 * written), sp_pool_summary's stream table, sp_stream_stats and sp_pool_dump_live. Checked like
 * pool names (1..SP_STREAM_NAME_MAX bytes of UTF-8 without control characters, else
 * SP_ERR_INVALID); NULL removes the label. sp_stream_release forgets it. A label set for
 * cudaStreamPerThread names the calling thread's per-thread stream only. */
#define SP_STREAM_NAME_MAX 63
SP_API int sp_stream_set_name(sp_runtime *rt, cudaStream_t stream, const char *name);
/* The label into buf (NUL-terminated when len > 0; "" if none); returns its length. */
SP_API size_t sp_stream_name(sp_runtime *rt, cudaStream_t stream, char *buf, size_t len);

#define SP_STREAM_STATS_VERSION 1

/* One stream's share of a pool. requested and active count live allocations made on the stream
 * (wherever they are freed later); cached counts what was freed on it and is not yet usable
 * by other streams without a fence: its bins, and free ranges of slabs and segments still
 * tagged with it. allocs = hits (its own cache, no other stream involved) + the rest;
 * steals_taken: its allocations served from memory another stream freed; steals_given: its
 * freed memory that another stream took. Peaks are kept like the pool's (exact with
 * stats_flush_bytes 0, else they may miss by up to that much) and move back to the current
 * figure at sp_pool_reset_peaks. */
typedef struct sp_stream_usage {
    uint32_t size;                        /* set by the caller: sizeof(sp_stream_usage) */
    uint32_t version;                     /* set by the library: SP_STREAM_STATS_VERSION */
    uint64_t requested, requested_peak, active, active_peak, cached;
    uint64_t allocs, hits, frees, steals_taken, steals_given;
    char name[SP_STREAM_NAME_MAX + 1];    /* its label, or "" */
} sp_stream_usage;

#define SP_STREAM_USAGE_INIT SP_SIZED_INIT(sp_stream_usage)

/* SP_ERR_NOT_FOUND if the pool has not seen the stream (or it was released). */
SP_API int sp_stream_stats(sp_pool *pool, cudaStream_t stream, sp_stream_usage *out);

/* Like PyTorch's reset_peak_memory_stats: every peak (requested, active, cached, held, and each
 * stream's) becomes its current value, so that the next peak is the high-water mark of what
 * follows. Totals and counters are left alone. sp_runtime_reset_peaks resets the runtime's
 * figures and every pool's. */
SP_API int sp_pool_reset_peaks(sp_pool *pool);
SP_API int sp_runtime_reset_peaks(sp_runtime *rt);

typedef enum {
    SP_POINTER_UNKNOWN = 0,               /* not a pointer streampool handed out (or inside one) */
    SP_POINTER_LIVE = 1,                  /* allocated and not freed */
    SP_POINTER_CACHED = 2,                /* freed: held in a cache or a free range */
} sp_pointer_state;

typedef struct sp_ptr_info {
    uint32_t size;                        /* set by the caller: sizeof(sp_ptr_info) */
    sp_pointer_state state;
    sp_pool *pool;                        /* LIVE and CACHED */
    size_t requested, usable;             /* LIVE only: asked for, and what the block holds */
    cudaStream_t stream;                  /* LIVE only: the stream it was allocated on */
} sp_ptr_info;

#define SP_PTR_INFO_INIT SP_SIZED_INIT(sp_ptr_info)

/* What ptr (the exact pointer sp_alloc returned) is; SP_OK with state UNKNOWN for a pointer
 * streampool does not know. A snapshot: another thread may free it right after. */
SP_API int sp_pointer_info(sp_runtime *rt, const void *ptr, sp_ptr_info *out);

/* Frees ptr on the stream it was allocated on, for a caller that has no stream (ONNX Runtime's
 * IAllocator::Free): stream order stays correct as long as every use of ptr was enqueued on
 * that stream or ordered before its end (rule 3 of docs/cuda-semantics.md). Errors as
 * sp_free's; SP_ERR_NOT_SUPPORTED if it was allocated on another thread's
 * cudaStreamPerThread, which this thread cannot name. */
SP_API int sp_free_any(sp_pool *pool, void *ptr);

/* One outstanding allocation, for leak hunting. age_allocs: allocations its stream made since
 * (0: the newest; a figure that keeps growing while the server runs is a leak); no clock is read
 * on the hot path, so there is no age in seconds (the trace has times). */
typedef struct sp_live_alloc {
    const void *ptr;
    size_t requested, usable;
    cudaStream_t stream;
    const char *stream_name;              /* its label, or "" */
    uint64_t age_allocs;
} sp_live_alloc;

/* Return non-zero to stop the dump. Called with no streampool lock held. */
typedef int (*sp_live_callback)(const sp_live_alloc *a, void *user);

/* Calls cb for every live allocation of the pool, oldest first (largest age_allocs; then by
 * pointer). Returns how many it reported, or a negative status. */
SP_API int sp_pool_dump_live(sp_pool *pool, sp_live_callback cb, void *user);

/* ---- pools across devices and processes ----
 *
 * PEERS. A pool's memory lives on its runtime's device; sp_pool_set_access lets a peer device
 * read it (SP_ACCESS_READ) or read and write it (SP_ACCESS_READ_WRITE), as cudaMemPoolSetAccess
 * does, for every block of the pool, live or cached, at once. sp_pool_config.peers_read_write
 * and .peers_read grant the same at creation. Blocks go only to streams whose device may write
 * them: sp_alloc (and sp_request_alloc) on a stream of another device needs a read-write grant,
 * and answers SP_ERR_NO_ACCESS without one, whatever the stream's own cache holds; a revoked or
 * lowered grant applies to the next allocation at once. A stream's device is asked of CUDA once
 * per (pool, stream) (cudaStreamGetDevice; for the NULL, legacy and per-thread handles, the
 * device current at that first allocation), and never on a machine with one device. A peer stream's frees are fenced with events of the
 * pool's device, which CUDA cannot record on another device's stream: other streams reuse its
 * freed memory only after a synchronize (a trim, a stream release); its own allocations reuse
 * it at once. The grants show in sp_pool_get_config, the stats (peers_read_write, peers_read),
 * the JSON and the Prometheus text.
 *
 * PROCESSES. A pool created with .share = SP_SHARE_POSIX_FD (its cudaMemPool then has a POSIX
 * file descriptor handle) can be exported, once per importing process, over a connected
 * AF_UNIX socket; the importer names it in its runtime and imports blocks the exporter exports
 * to it as sp_block_handle values (any byte channel carries them). The exporter allocates and
 * frees; its tenant's limit counts every byte, imported or not. The importer reads and writes
 * the blocks and releases them (never frees them).
 *
 * The lifetime guard (README: "Two processes on one pool"): each export shares a small table with
 * its importer (a memfd both map): a slot per exported block with a count of the importer's live
 * imports, and a socket pair whose importer end only the importer holds. An sp_free by the
 * exporter of a block whose importer still holds an import does not free it: the block stays
 * live, counted (importer_held), until the importer releases it, or closes its import, or dies
 * (the kernel closes its end of the pair; the exporter sees the hang-up): sp_pool_share_poll,
 * which the exporter calls from its loop, then frees it on the stream of that sp_free. */

typedef enum {
    SP_ACCESS_NONE = 0,
    SP_ACCESS_READ = 1,
    SP_ACCESS_READ_WRITE = 3,
} sp_access;

/* Grants `device` access to the pool's memory (SP_ACCESS_NONE revokes). The pool's own device
 * always reads and writes: anything else for it is SP_ERR_INVALID. SP_ERR_NO_DEVICE for a device
 * that does not exist; SP_ERR_NOT_SUPPORTED where it cannot reach the pool's device
 * (cudaDeviceCanAccessPeer says 0) or is numbered 64 or above. Revoke only once the peer's work
 * no longer uses the pool's memory (as with cudaMemPoolSetAccess). */
SP_API int sp_pool_set_access(sp_pool *pool, int device, sp_access access);
/* The access in force for `device`, as the pool granted it. */
SP_API int sp_pool_get_access(sp_pool *pool, int device, sp_access *out);

typedef enum {
    SP_SHARE_NONE = 0,
    SP_SHARE_POSIX_FD = 1,                /* cudaMemHandleTypePosixFileDescriptor */
} sp_share_handle;

/* An exported block: what the importer needs to map it and to find its slot. streampool carves
 * blocks from larger driver allocations, and CUDA exports whole allocations: `cuda` is the
 * export of the block's slab or segment, which the importer maps once however many of its
 * blocks it imports, and `offset` the block's place in it. */
typedef struct sp_block_handle {
    uint64_t token;                       /* the export's: a handle of another export is refused */
    uint32_t slot, gen;
    uint64_t bytes;                       /* as the exporter asked for them */
    uint64_t offset;                      /* of the block in its driver allocation */
    unsigned char cuda[64];               /* cudaMemPoolPtrExportData of that allocation */
} sp_block_handle;

typedef struct sp_export sp_export;       /* one importing process of one pool (exporter side) */
typedef struct sp_import sp_import;       /* an imported pool (importer side) */

/* Exports a shareable pool to the process at the other end of `sock`, a connected AF_UNIX
 * stream socket: sends it the pool's handle and the guard's table and socket (one message with
 * SCM_RIGHTS). SP_ERR_NOT_SUPPORTED if the pool was not created shareable; SP_ERR_IO if the
 * message could not be sent. *out lives as long as the pool. */
SP_API int sp_pool_export(sp_pool *pool, int sock, sp_export **out);
/* Exports the live block ptr of the export's pool to its importer. Exporting it again gives the
 * same slot. SP_ERR_BAD_POINTER / SP_ERR_WRONG_POOL for a pointer that is not a live block of
 * the pool; SP_ERR_LIMIT if 4096 blocks are exported and not freed already;
 * SP_ERR_NOT_SUPPORTED for an allocation of an open request (its end frees it, held or not:
 * allocate what another process will use with sp_alloc). Do not free ptr on another thread
 * while this call runs. */
SP_API int sp_export_block(sp_export *exp, void *ptr, sp_block_handle *out);
/* Frees, each on the stream of its sp_free, the blocks the guard held whose importer has
 * released them, closed or died since; *freed (if not NULL) gets how many. */
SP_API int sp_pool_share_poll(sp_pool *pool, size_t *freed);

/* Importer side. Receives an export from `sock` and names it `name` in rt (unique among rt's
 * imports; the device is rt's: SP_ERR_NO_DEVICE for a pool of another device). SP_ERR_IO if no
 * export arrives (the exporter closed). Close every import (sp_import_close) before
 * sp_runtime_destroy(rt). */
SP_API int sp_pool_import(sp_runtime *rt, int sock, const char *name, sp_import **out);
SP_API int sp_import_find(sp_runtime *rt, const char *name, sp_import **out);
/* Maps an exported block: *ptr gets its address in this process, readable and writable by rt's
 * device. SP_ERR_FOREIGN_HANDLE for a handle exported by another pool or to another importer,
 * SP_ERR_STALE_HANDLE if the exporter freed the block before this import. Importing the same
 * block twice counts two imports, each released on its own. */
SP_API int sp_import_block(sp_import *imp, const sp_block_handle *h, void **ptr);
/* Releases an import: frees it in stream order on `stream` (cudaFreeAsync) and synchronizes
 * `stream`, so that the exporter reuses the block only after this process's work on it, then
 * tells the exporter. SP_ERR_IMPORT_RELEASED for a block released already (as often as it was
 * imported), SP_ERR_BAD_POINTER for a pointer this import never mapped. */
SP_API int sp_import_release(sp_import *imp, void *ptr, cudaStream_t stream);
/* Releases every import still live (on the legacy stream) and closes the import: the exporter
 * gets back every block it held for it. */
SP_API int sp_import_close(sp_import *imp);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_H */
