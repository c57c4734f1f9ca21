/* libstreampool_torch as PyTorch uses it. The library is loaded the way ctypes.CDLL does
 * (dlopen, RTLD_NOW | RTLD_LOCAL), its entry points found by name with dlsym and called through
 * PyTorch's own function types (CUDAPluggableAllocator.h: alloc_fn void*(size_t, int,
 * cudaStream_t), free_fn void(void*, size_t, int, cudaStream_t), reset_fn void(),
 * memory_fraction_fn void(double, int), record_stream_fn void(void*, cudaStream_t)), with the
 * arguments PyTorch passes: the current device and stream at allocation, and at free the size,
 * device and stream it recorded for the pointer. Nothing here links libstreampool: the stats come
 * through the library's own calls, as a Python caller gets them.
 * Usage: test_torch_harness PATH/libstreampool_torch.so */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "streampool_torch.h"
#include "support/test_support.h"

typedef void *alloc_fn(size_t, int, cudaStream_t);
typedef void free_fn(void *, size_t, int, cudaStream_t);
typedef void reset_fn(void);
typedef void memory_fraction_fn(double, int);
typedef void record_stream_fn(void *, cudaStream_t);

/* The header declares exactly PyTorch's types (a GNU C check: gcc and clang). */
_Static_assert(__builtin_types_compatible_p(__typeof__(sp_torch_malloc), alloc_fn), "alloc_fn");
_Static_assert(__builtin_types_compatible_p(__typeof__(sp_torch_free), free_fn), "free_fn");
_Static_assert(__builtin_types_compatible_p(__typeof__(sp_torch_empty_cache), reset_fn),
               "reset_fn");
_Static_assert(__builtin_types_compatible_p(__typeof__(sp_torch_set_memory_fraction),
                                            memory_fraction_fn),
               "memory_fraction_fn");
_Static_assert(__builtin_types_compatible_p(__typeof__(sp_torch_record_stream),
                                            record_stream_fn),
               "record_stream_fn");

static const char *library_path;
static void *lib;
static struct {
    alloc_fn *malloc_;
    free_fn *free_;
    reset_fn *empty_cache;
    memory_fraction_fn *memory_fraction;
    record_stream_fn *record_stream;
    __typeof__(sp_torch_last_status) *last_status;
    __typeof__(sp_torch_pool_create) *pool_create;
    __typeof__(sp_torch_pool_destroy) *pool_destroy;
    __typeof__(sp_torch_set_pool) *set_pool;
    __typeof__(sp_torch_current_pool) *current_pool;
    __typeof__(sp_torch_pool_stats) *pool_stats;
    __typeof__(sp_torch_pool_stats_json) *pool_stats_json;
    __typeof__(sp_torch_shutdown) *shutdown;
    __typeof__(sp_torch_last_failure) *last_failure;
    __typeof__(sp_torch_failed_allocs) *failed_allocs;
} T;

#define SP(call) assert_int_equal((call), SP_OK)
#define MiB ((size_t)1 << 20)

/* dlsym gives a void *; POSIX guarantees it converts to a function pointer. */
static void *must_find(const char *name)
{
    void *f = dlsym(lib, name);
    if (!f)
        fail_msg("%s: %s", name, dlerror());
    return f;
}

static int load_library(void **state)
{
    (void)state;
    lib = dlopen(library_path, RTLD_NOW | RTLD_LOCAL); /* what ctypes.CDLL asks for */
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", library_path, dlerror());
        return -1;
    }
    *(void **)&T.malloc_ = must_find("sp_torch_malloc");
    *(void **)&T.free_ = must_find("sp_torch_free");
    *(void **)&T.empty_cache = must_find("sp_torch_empty_cache");
    *(void **)&T.memory_fraction = must_find("sp_torch_set_memory_fraction");
    *(void **)&T.record_stream = must_find("sp_torch_record_stream");
    *(void **)&T.last_status = must_find("sp_torch_last_status");
    *(void **)&T.pool_create = must_find("sp_torch_pool_create");
    *(void **)&T.pool_destroy = must_find("sp_torch_pool_destroy");
    *(void **)&T.set_pool = must_find("sp_torch_set_pool");
    *(void **)&T.current_pool = must_find("sp_torch_current_pool");
    *(void **)&T.pool_stats = must_find("sp_torch_pool_stats");
    *(void **)&T.pool_stats_json = must_find("sp_torch_pool_stats_json");
    *(void **)&T.shutdown = must_find("sp_torch_shutdown");
    *(void **)&T.last_failure = must_find("sp_torch_last_failure");
    *(void **)&T.failed_allocs = must_find("sp_torch_failed_allocs");
    return 0;
}

static int unload_library(void **state)
{
    (void)state;
    return dlclose(lib);
}

/* Each test starts with no runtime and the default pools chosen, and leaves none behind: a
 * shutdown that finds live allocations fails the test. */
static int fresh(void **state)
{
    (void)state;
    SP(T.set_pool(NULL));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < gate_pool_used; i++)
        gate_open(&gate_pool[i]);
    gate_pool_used = 0;
    (void)cudaDeviceSynchronize();
    return T.shutdown() == SP_OK ? 0 : -1;
}

static sp_stats stats(const char *pool, int device)
{
    sp_stats st = {.size = sizeof st};
    SP(T.pool_stats(pool, device, &st));
    return st;
}

static cudaStream_t new_stream(void)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

static void drop_stream(cudaStream_t s)
{
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

static int device_count(void)
{
    int n = 0;
    CK(cudaGetDeviceCount(&n));
#ifdef SP_CUDASIM
    assert_true(n >= 2); /* meson runs this with CUDASIM_DEVICE_COUNT=2 */
#endif
    return n;
}

/* Sizes PyTorch asks for: odd bytes, its 512-byte rounding, small and large tiers. */
static const size_t sizes[] = {1, 255, 512, 4096 + 1, MiB, MiB + 512, 3 * MiB, 20 * MiB + 7};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void default_pool_serves_every_size_in_stream_order(void **state)
{
    (void)state;
    cudaStream_t side = new_stream();
    /* PyTorch's current stream: the legacy default stream unless a side stream is current */
    cudaStream_t streams[2] = {NULL, side};
    void *p[NSIZES];
    uint64_t requested = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        p[i] = T.malloc_(sizes[i], 0, streams[i % 2]);
        assert_non_null(p[i]);
        SP(T.last_status());
        assert_int_equal((uintptr_t)p[i] % 256, 0);
        CK(cudaMemsetAsync(p[i], 0x5a, sizes[i], streams[i % 2]));
        requested += sizes[i];
    }
    sp_stats st = stats(NULL, 0);
    assert_int_equal(st.allocs, NSIZES);
    assert_int_equal(st.requested.current, requested);
    assert_true(device_bytes_are(p[3], sizes[3], 0x5a, streams[1]));
    for (size_t i = 0; i < NSIZES; i++) {
        T.free_(p[i], sizes[i], 0, streams[i % 2]);
        SP(T.last_status());
    }
    st = stats("", 0);
    assert_int_equal(st.frees, NSIZES);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.bad_frees, 0);
    /* size 0: NULL and no error, as cudaMalloc; its free (NULL) does nothing */
    assert_null(T.malloc_(0, 0, side));
    SP(T.last_status());
    T.free_(NULL, 0, 0, side);
    SP(T.last_status());
    drop_stream(side);
}

static void tenants_get_their_own_allocations_and_frees(void **state)
{
    (void)state;
    cudaStream_t s = new_stream();
    SP(T.pool_create("llama", 0, 64 * MiB));
    SP(T.pool_create("mistral", 0, 0));
    assert_int_equal(T.pool_create("llama", 0, 0), SP_ERR_EXISTS);
    SP(T.set_pool("llama"));
    assert_string_equal(T.current_pool(), "llama");
    void *a = T.malloc_(3 * MiB, 0, s);
    void *b = T.malloc_(1000, 0, s);
    SP(T.set_pool("mistral"));
    void *c = T.malloc_(5 * MiB, 0, s);
    SP(T.set_pool(NULL));
    assert_string_equal(T.current_pool(), "");
    void *d = T.malloc_(MiB, 0, s);
    assert_true(a && b && c && d);

    sp_stats llama = stats("llama", 0), mistral = stats("mistral", 0), dflt = stats(NULL, 0);
    assert_int_equal(llama.allocs, 2);
    assert_int_equal(llama.requested.current, 3 * MiB + 1000);
    assert_int_equal(mistral.allocs, 1);
    assert_int_equal(mistral.requested.current, 5 * MiB);
    assert_int_equal(dflt.allocs, 1);
    assert_int_equal(dflt.requested.current, MiB);

    /* Frees go to the pool that allocated, whatever this thread has chosen now. */
    SP(T.set_pool("mistral"));
    T.free_(a, 3 * MiB, 0, s);
    SP(T.last_status());
    T.free_(d, MiB, 0, s);
    SP(T.last_status());
    SP(T.set_pool("llama"));
    T.free_(c, 5 * MiB, 0, s);
    T.free_(b, 1000, 0, s);
    SP(T.last_status());
    llama = stats("llama", 0);
    mistral = stats("mistral", 0);
    dflt = stats(NULL, 0);
    assert_int_equal(llama.frees, 2);
    assert_int_equal(llama.requested.current, 0);
    assert_int_equal(mistral.frees, 1);
    assert_int_equal(mistral.requested.current, 0);
    assert_int_equal(dflt.frees, 1);
    assert_int_equal(dflt.bad_frees + llama.bad_frees + mistral.bad_frees, 0);

    /* The stats as a ctypes caller reads them. */
    char json[4096];
    size_t needed = 0;
    SP(T.pool_stats_json("llama", 0, json, sizeof json, &needed));
    assert_true(needed > 0 && needed < sizeof json);
    assert_non_null(strstr(json, "\"allocs\":2"));

    CK(cudaStreamSynchronize(s));
    SP(T.pool_destroy("mistral", 0));
    assert_int_equal(T.pool_destroy("mistral", 0), SP_ERR_NOT_FOUND);
    /* this thread had resolved "mistral" before: the destroyed pool is not used again */
    SP(T.set_pool("mistral"));
    assert_null(T.malloc_(MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_NOT_FOUND);
    drop_stream(s);
}

static void a_tenant_limit_and_a_missing_tenant_fail_with_null(void **state)
{
    (void)state;
    cudaStream_t s = new_stream();
    SP(T.pool_create("small", 0, 8 * MiB));
    SP(T.set_pool("small"));
    void *a = T.malloc_(6 * MiB, 0, s);
    assert_non_null(a);
    assert_null(T.malloc_(6 * MiB, 0, s)); /* PyTorch 2.15 does not check it: README */
    assert_int_equal(T.last_status(), SP_ERR_LIMIT);
    assert_int_equal(stats("small", 0).limit_rejections, 1);
    assert_int_equal(stats(NULL, 0).allocs, 0); /* never a fallback to another pool */

    SP(T.set_pool("nobody"));
    assert_null(T.malloc_(MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_NOT_FOUND);
    char long_name[SP_POOL_NAME_MAX + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(T.set_pool(long_name), SP_ERR_INVALID);
    assert_string_equal(T.current_pool(), "nobody");

    SP(T.set_pool(NULL));
    assert_null(T.malloc_(SP_MAX_ALLOC + 1, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_TOO_LARGE);
    assert_null(T.malloc_(MiB, SP_TORCH_MAX_DEVICES, s));
    assert_int_equal(T.last_status(), SP_ERR_NO_DEVICE);
    assert_null(T.malloc_(MiB, -1, s));
    assert_int_equal(T.last_status(), SP_ERR_NO_DEVICE);
    T.free_(a, 6 * MiB, 0, s);
    SP(T.last_status());
    drop_stream(s);
}

/* PyTorch 2.15 turns a NULL from alloc_fn into a tensor at address 0 without a word, so each
 * failure is said on stderr at once: one line naming the pool, the request and the reason, and
 * the same failure again (a retry loop) adds no line. The thread keeps its latest line and a
 * count of its failures. */
static void a_failure_is_reported_once_on_stderr(void **state)
{
    (void)state;
    cudaStream_t s = new_stream();
    SP(T.pool_create("tiny", 0, 4 * MiB));
    SP(T.set_pool("tiny"));
    uint64_t before = T.failed_allocs();
    FILE *cap = tmpfile();
    assert_non_null(cap);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fileno(cap), 2), 2);
    void *never = T.malloc_(5 * MiB + 3, 0, s);     /* over the limit itself */
    void *again = T.malloc_(5 * MiB + 3, 0, s);     /* the same failure: no line */
    void *other = T.malloc_(5 * MiB + 5, 0, s);     /* another size: a line */
    void *a = T.malloc_(3 * MiB, 0, s);
    void *no_room = T.malloc_(3 * MiB + 7, 0, s);   /* no room now */
    void *no_room2 = T.malloc_(3 * MiB + 7, 0, s);
    dup2(saved, 2);
    close(saved);
    assert_null(never);
    assert_null(again);
    assert_null(other);
    assert_non_null(a);
    assert_null(no_room);
    assert_null(no_room2);
    char text[4096] = {0};
    rewind(cap);
    size_t n = fread(text, 1, sizeof text - 1, cap);
    fclose(cap);
    char want[1024];
    int len = snprintf(want, sizeof want,
                       "streampool_torch: 5242883 bytes on device 0, stream %p, from pool \"tiny\" "
                       "failed: SP_ERR_NEVER_FITS (larger than the pool's limit can ever hold)\n"
                       "streampool_torch: 5242885 bytes on device 0, stream %p, from pool \"tiny\" "
                       "failed: SP_ERR_NEVER_FITS (larger than the pool's limit can ever hold)\n"
                       "streampool_torch: 3145735 bytes on device 0, stream %p, from pool \"tiny\" "
                       "failed: SP_ERR_LIMIT (the pool's limit would be exceeded now (retry after "
                       "frees))\n",
                       (void *)s, (void *)s, (void *)s);
    assert_int_equal(n, (size_t)len);
    assert_string_equal(text, want);
    char line[512];
    assert_int_equal(T.last_failure(line, sizeof line), SP_ERR_LIMIT);
    assert_memory_equal(line, want + len - strlen(line) - 1, strlen(line)); /* the last line */
    assert_int_equal(T.failed_allocs() - before, 5);
    T.free_(a, 3 * MiB, 0, s);
    SP(T.last_status());
    drop_stream(s);
}

static void bad_frees_are_refused_without_harm(void **state)
{
    (void)state;
    cudaStream_t s = new_stream();
    void *p = T.malloc_(2 * MiB, 0, s);
    assert_non_null(p);
    int on_stack = 0;
    T.free_(&on_stack, sizeof on_stack, 0, s);
    assert_int_equal(T.last_status(), SP_ERR_BAD_POINTER);
    T.free_((char *)p + 256, 2 * MiB - 256, 0, s); /* inside an allocation */
    assert_int_equal(T.last_status(), SP_ERR_BAD_POINTER);
    /* the wrong size: not the allocation the caller describes, so nothing is freed */
    T.free_(p, MiB, 0, s);
    assert_int_equal(T.last_status(), SP_ERR_INVALID);
    assert_int_equal(stats(NULL, 0).requested.current, 2 * MiB);
    T.free_(p, 2 * MiB, 7, s); /* a device that never allocated */
    assert_int_equal(T.last_status(), SP_ERR_BAD_POINTER);
    T.free_(p, 2 * MiB, -3, s);
    assert_int_equal(T.last_status(), SP_ERR_NO_DEVICE);
    T.free_(p, 2 * MiB, 0, s);
    SP(T.last_status());
    T.free_(p, 2 * MiB, 0, s);
    assert_int_equal(T.last_status(), SP_ERR_DOUBLE_FREE);
    sp_stats st = stats(NULL, 0);
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.bad_frees, 3); /* counted where operators look: stack, inside, double */
    T.record_stream(&on_stack, s);
    assert_int_equal(T.last_status(), SP_ERR_BAD_POINTER);
    drop_stream(s);
}

static void each_device_has_its_own_runtime_and_pools(void **state)
{
    (void)state;
    if (device_count() < 2)
        skip();
    cudaStream_t s0 = new_stream();
    CK(cudaSetDevice(1));
    cudaStream_t s1 = new_stream(); /* PyTorch's current stream on device 1 */
    CK(cudaSetDevice(0));
    void *a = T.malloc_(3 * MiB, 0, s0);
    void *b = T.malloc_(5 * MiB, 1, s1);
    assert_true(a && b);
    assert_int_equal(stats(NULL, 0).requested.current, 3 * MiB);
    assert_int_equal(stats(NULL, 1).requested.current, 5 * MiB);

    SP(T.pool_create("gpu1-only", 1, 0));
    SP(T.set_pool("gpu1-only"));
    void *c = T.malloc_(MiB, 1, s1);
    assert_non_null(c);
    assert_null(T.malloc_(MiB, 0, s0)); /* a tenant is per device */
    assert_int_equal(T.last_status(), SP_ERR_NOT_FOUND);
    SP(T.set_pool(NULL));

    T.free_(b, 5 * MiB, 0, s1); /* the wrong device: not its pointer */
    assert_int_equal(T.last_status(), SP_ERR_BAD_POINTER);
    assert_int_equal(stats(NULL, 1).requested.current, 5 * MiB);
    T.free_(b, 5 * MiB, 1, s1);
    SP(T.last_status());
    T.free_(c, MiB, 1, s1);
    SP(T.last_status());
    T.free_(a, 3 * MiB, 0, s0);
    SP(T.last_status());
    assert_int_equal(stats("gpu1-only", 1).frees, 1);
    assert_int_equal(stats(NULL, 1).requested.current, 0);
    drop_stream(s0);
    CK(cudaSetDevice(1));
    drop_stream(s1);
    CK(cudaSetDevice(0));
}

/* Tenants on threads of their own, each runtime created by whichever thread comes first. */
#define THREADS 4
#define ROUNDS 200

static const char *const tenant_names[THREADS] = {"t0", "t1", "t2", "t3"};

/* The rounds whose allocation or free failed. */
static void *tenant_thread(void *arg)
{
    intptr_t i = (intptr_t)arg;
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return (void *)-1;
    intptr_t failures = 0;
    if (T.set_pool(tenant_names[i]) != SP_OK)
        return (void *)-1;
    for (int r = 0; r < ROUNDS; r++) {
        size_t bytes = sizes[(size_t)(r + i) % NSIZES];
        void *p = T.malloc_(bytes, 0, s);
        if (p)
            T.free_(p, bytes, 0, s);
        failures += !p || T.last_status() != SP_OK;
    }
    if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess)
        return (void *)-1;
    return (void *)failures;
}

static intptr_t run_tenant_threads(void)
{
    pthread_t th[THREADS];
    intptr_t failures = 0;
    for (intptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tenant_thread, (void *)i), 0);
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_true((intptr_t)ret >= 0);
        failures += (intptr_t)ret;
    }
    return failures;
}

static void threads_allocate_in_their_tenants(void **state)
{
    (void)state;
    /* No runtime yet: the threads race to create it. Their tenants do not exist, so every
     * allocation fails and none falls back to the default pool. */
    assert_int_equal(run_tenant_threads(), THREADS * ROUNDS);
    assert_int_equal(stats(NULL, 0).allocs, 0);

    for (int i = 0; i < THREADS; i++)
        SP(T.pool_create(tenant_names[i], 0, 0));
    assert_int_equal(run_tenant_threads(), 0);
    for (int i = 0; i < THREADS; i++) {
        sp_stats st = stats(tenant_names[i], 0);
        assert_int_equal(st.allocs, ROUNDS);
        assert_int_equal(st.frees, ROUNDS);
        assert_int_equal(st.requested.current, 0);
    }
    assert_int_equal(stats(NULL, 0).allocs, 0);
}

/* Tensor.record_stream: memory used on another stream is reused on its allocation stream only
 * after that use. */
static void a_recorded_stream_orders_the_free(void **state)
{
    (void)state;
    cudaStream_t alloc_stream = new_stream(), user = new_stream();
    const size_t n = 2 * MiB;
    void *p = T.malloc_(n, 0, alloc_stream);
    assert_non_null(p);
    CK(cudaStreamSynchronize(alloc_stream)); /* the other stream may use p from here on */
    gate *g = gate_new();
    order_log log = {0};
    order_mark used = {&log, 1}, reused = {&log, 2};
    gate_hold(g, user);
    CK(cudaMemsetAsync(p, 1, n, user)); /* the other stream's use, held behind the gate */
    mark(user, &used);
    T.record_stream(p, user);
    SP(T.last_status());
    T.record_stream(p, alloc_stream); /* its own stream: nothing to record */
    SP(T.last_status());
    T.free_(p, n, 0, alloc_stream);
    SP(T.last_status());
    /* The same stream takes the block straight back; its write must come after the use. On
     * cudasim a write not ordered after the pending memset is a device fault. */
    void *q = T.malloc_(n, 0, alloc_stream);
    assert_ptr_equal(q, p);
    CK(cudaMemsetAsync(q, 2, n, alloc_stream));
    mark(alloc_stream, &reused);
    gate_open(g);
    CK(cudaStreamSynchronize(alloc_stream));
    CK(cudaStreamSynchronize(user));
    assert_int_equal(atomic_load(&log.len), 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    assert_true(device_bytes_are(q, n, 2, alloc_stream));
    T.free_(q, n, 0, alloc_stream);
    SP(T.last_status());
    drop_stream(alloc_stream);
    drop_stream(user);
}

static void empty_cache_gives_every_pool_back(void **state)
{
    (void)state;
    cudaStream_t s = new_stream();
    SP(T.pool_create("kv", 0, 0));
    SP(T.set_pool("kv"));
    void *a = T.malloc_(4 * MiB, 0, s), *b = T.malloc_(4096, 0, s);
    SP(T.set_pool(NULL));
    void *c = T.malloc_(6 * MiB, 0, s);
    assert_true(a && b && c);
    T.free_(a, 4 * MiB, 0, s);
    T.free_(b, 4096, 0, s);
    T.free_(c, 6 * MiB, 0, s);
    assert_true(stats("kv", 0).cached.current > 0);
    assert_true(stats(NULL, 0).cached.current > 0);
    T.empty_cache();
    SP(T.last_status());
    assert_int_equal(stats("kv", 0).held.current, 0);
    assert_int_equal(stats(NULL, 0).held.current, 0);
    drop_stream(s);
}

static void memory_fraction_limits_the_default_pool(void **state)
{
    (void)state;
    size_t free_bytes = 0, total = 0;
    CK(cudaMemGetInfo(&free_bytes, &total));
    const double fraction = 1.0 / 1024;
    const uint64_t limit = (uint64_t)(fraction * (double)total);
    T.memory_fraction(0.0, 0);
    assert_int_equal(T.last_status(), SP_ERR_INVALID);
    T.memory_fraction(1.5, 0);
    assert_int_equal(T.last_status(), SP_ERR_INVALID);
    T.memory_fraction(fraction, SP_TORCH_MAX_DEVICES);
    assert_int_equal(T.last_status(), SP_ERR_NO_DEVICE);
    T.memory_fraction(fraction, 0);
    SP(T.last_status());
    cudaStream_t s = new_stream();
    void *a = T.malloc_((size_t)limit - 4 * MiB, 0, s);
    assert_non_null(a);
    assert_null(T.malloc_(8 * MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_LIMIT);
    /* the default pool exists now: the fraction changes its limit at once (sp_pool_set_limit) */
    T.memory_fraction(0.5, 0);
    SP(T.last_status());
    void *b = T.malloc_(8 * MiB, 0, s);
    assert_non_null(b);
    T.free_(b, 8 * MiB, 0, s);
    SP(T.last_status());
    /* lowered again: the cache above the limit goes back, and 8 MiB more does not fit */
    T.memory_fraction(fraction, 0);
    SP(T.last_status());
    assert_null(T.malloc_(8 * MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_LIMIT);
    T.free_(a, (size_t)limit - 4 * MiB, 0, s);
    SP(T.last_status());
    drop_stream(s);
    /* gone with the process's other settings only: the next runtime keeps it */
    SP(T.shutdown());
    s = new_stream();
    assert_null(T.malloc_((size_t)limit + MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_NEVER_FITS); /* larger than the limit itself */
    drop_stream(s);
    SP(T.shutdown());
    T.memory_fraction(1.0, 0); /* the whole device again, for the tests after this one */
    SP(T.last_status());
}

static void sp_alloc_conf_configures_the_pools(void **state)
{
    (void)state;
    assert_int_equal(setenv("SP_ALLOC_CONF", "conf-tenant.limit:4M", 1), 0);
    cudaStream_t s = new_stream();
    SP(T.pool_create("conf-tenant", 0, 0)); /* no limit from the code: the operator's applies */
    SP(T.set_pool("conf-tenant"));
    assert_null(T.malloc_(6 * MiB, 0, s));
    assert_int_equal(T.last_status(), SP_ERR_NEVER_FITS);
    void *p = T.malloc_(2 * MiB, 0, s);
    assert_non_null(p);
    T.free_(p, 2 * MiB, 0, s);
    SP(T.last_status());
    drop_stream(s);
    SP(T.shutdown());
    assert_int_equal(unsetenv("SP_ALLOC_CONF"), 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libstreampool_torch.so\n", argv[0]);
        return 2;
    }
    library_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(default_pool_serves_every_size_in_stream_order, fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(tenants_get_their_own_allocations_and_frees, fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_tenant_limit_and_a_missing_tenant_fail_with_null, fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_failure_is_reported_once_on_stderr, fresh, teardown),
        cmocka_unit_test_setup_teardown(bad_frees_are_refused_without_harm, fresh, teardown),
        cmocka_unit_test_setup_teardown(each_device_has_its_own_runtime_and_pools, fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(threads_allocate_in_their_tenants, fresh, teardown),
        cmocka_unit_test_setup_teardown(a_recorded_stream_orders_the_free, fresh, teardown),
        cmocka_unit_test_setup_teardown(empty_cache_gives_every_pool_back, fresh, teardown),
        cmocka_unit_test_setup_teardown(memory_fraction_limits_the_default_pool, fresh, teardown),
        cmocka_unit_test_setup_teardown(sp_alloc_conf_configures_the_pools, fresh, teardown),
    };
    return cmocka_run_group_tests(tests, load_library, unload_library);
}
