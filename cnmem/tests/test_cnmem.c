/* libstreampool_cnmem against CNMeM's documented behaviour (include/cnmem.h): status codes and
 * their strings, initialization and its arguments, NULL and zero-size requests, CANNOT_GROW,
 * stream sizes, taking from the root, CANNOT_STEAL, free rules, cnmemMemGetInfo's exact figures,
 * the reference count, cnmemPrintMemoryState's text, and threads. Every test runs twice, with
 * CNMEM_FLAGS_DEFAULT and with CNMEM_FLAGS_MANAGED (as CNMeM's own suite does), and checks, as
 * that suite does, that finalizing gives the device back every byte it had. */
#include <stdio.h>
#include <stdlib.h>

#include "support/test_support.h"
#include "cnmem.h"

#define OK CNMEM_STATUS_SUCCESS
#define CN(call) assert_int_equal((int)(call), (int)OK)

static unsigned base; /* CNMEM_FLAGS_DEFAULT or CNMEM_FLAGS_MANAGED: each test runs with both */
static size_t free_at_start;

static size_t device_free(void)
{
    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    return free_b;
}

static size_t device_total(void)
{
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    return prop.totalGlobalMem;
}

static int record_free(void **state)
{
    base = *(unsigned *)*state;
    CK(cudaSetDevice(0));
    free_at_start = device_free();
    return 0;
}

/* Each test finalizes what it initialized: nothing may be left, and no byte may be kept. */
static int check_released(void **state)
{
    assert_int_equal(cnmemFinalize(), CNMEM_STATUS_NOT_INITIALIZED);
    CK(cudaSetDevice(0));
    assert_int_equal(device_free(), free_at_start);
    return reset_device(state);
}

static cnmemDevice_t one_device(size_t size)
{
    cnmemDevice_t d;
    memset(&d, 0, sizeof d);
    d.size = size;
    return d;
}

static void mem_info_is(cudaStream_t stream, size_t want_free, size_t want_total)
{
    size_t free_b = 1, total = 1;
    CN(cnmemMemGetInfo(&free_b, &total, stream));
    assert_int_equal(free_b, want_free);
    assert_int_equal(total, want_total);
}

static void error_strings(void **state)
{
    (void)state;
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_SUCCESS), "CNMEM_STATUS_SUCCESS");
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_CUDA_ERROR), "CNMEM_STATUS_CUDA_ERROR");
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_INVALID_ARGUMENT),
                        "CNMEM_STATUS_INVALID_ARGUMENT");
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_NOT_INITIALIZED),
                        "CNMEM_STATUS_NOT_INITIALIZED");
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_OUT_OF_MEMORY),
                        "CNMEM_STATUS_OUT_OF_MEMORY");
    assert_string_equal(cnmemGetErrorString(CNMEM_STATUS_UNKNOWN_ERROR),
                        "CNMEM_STATUS_UNKNOWN_ERROR");
    assert_string_equal(cnmemGetErrorString((cnmemStatus_t)99), "CNMEM_STATUS_UNKNOWN_ERROR");
    assert_string_equal(cnmemGetErrorString((cnmemStatus_t)-1), "CNMEM_STATUS_UNKNOWN_ERROR");
    /* the values programs compiled against CNMeM's header carry */
    assert_int_equal(CNMEM_STATUS_OUT_OF_MEMORY, 4);
    assert_int_equal(CNMEM_FLAGS_MANAGED, 4);
    assert_int_equal(CNMEM_VERSION, 100);
}

static void every_call_needs_init(void **state)
{
    (void)state;
    size_t f, t;
    void *p = (void *)0x1;
    assert_int_equal(cnmemFinalize(), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemRetain(), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemRelease(), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemRegisterStream((cudaStream_t)0x10), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemMalloc(NULL, 0, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemMalloc(&p, 512, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    assert_ptr_equal(p, (void *)0x1);
    assert_int_equal(cnmemFree(NULL, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemMemGetInfo(&f, &t, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemPrintMemoryState(stdout, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    cnmemDevice_t d = one_device(2048);
    CN(cnmemInit(1, &d, base));
    CN(cnmemFinalize());
    assert_int_equal(cnmemMalloc(&p, 512, NULL), CNMEM_STATUS_NOT_INITIALIZED);
}

/* Bad arguments leave the library uninitialized and holding nothing. */
static void init_arguments(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaStream_t twice[2] = {s, s}, null_stream[1] = {NULL};
    cnmemDevice_t d = one_device(2048), two[2];
    assert_int_equal(cnmemInit(0, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemInit(-1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemInit(1, NULL, base), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemInit(1, &d, base | 8), CNMEM_STATUS_INVALID_ARGUMENT);
    d.device = -1;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    d.device = 99;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_CUDA_ERROR);
    assert_int_equal(cudaGetLastError(), cudaSuccess); /* reported as a status, not left set */
    d = one_device(device_total());
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    d.size = 2 * device_total();
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    d = one_device(2048);
    d.numStreams = -1;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    d.numStreams = 1;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT); /* streams NULL */
    d.streams = null_stream;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    d.numStreams = 2;
    d.streams = twice;
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT);
    two[0] = two[1] = one_device(2048);
    assert_int_equal(cnmemInit(2, two, base), CNMEM_STATUS_INVALID_ARGUMENT);
    void *p;
    assert_int_equal(cnmemMalloc(&p, 512, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(device_free(), free_at_start);

    d = one_device(2048);
    CN(cnmemInit(1, &d, base));
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_INVALID_ARGUMENT); /* already */
    mem_info_is(NULL, 2048, 2048);
    CN(cnmemFinalize());
    CK(cudaStreamDestroy(s));
}

/* size 0 is half the device; 95% of it can be had; more than the device has free cannot. */
static void init_sizes(void **state)
{
    (void)state;
    size_t total = device_total();
    cnmemDevice_t d = one_device(0);
    CN(cnmemInit(1, &d, base));
    mem_info_is(NULL, (total / 2 + 511) / 512 * 512, (total / 2 + 511) / 512 * 512);
    CN(cnmemFinalize());
    d.size = (size_t)(0.95 * (double)total);
    CN(cnmemInit(1, &d, base));
    mem_info_is(NULL, (d.size + 511) / 512 * 512, (d.size + 511) / 512 * 512);
    CN(cnmemFinalize());
    d.size = 1000; /* rounded up to 512 */
    CN(cnmemInit(1, &d, base));
    mem_info_is(NULL, 1024, 1024);
    CN(cnmemFinalize());

    void *held;
    CK(cudaMalloc(&held, total / 2));
    d.size = total * 3 / 4; /* less than the device, more than it has free */
    assert_int_equal(cnmemInit(1, &d, base), CNMEM_STATUS_OUT_OF_MEMORY);
    assert_int_equal(cnmemMalloc(&held, 512, NULL), CNMEM_STATUS_NOT_INITIALIZED);
    CK(cudaFree(held));
}

static void null_and_zero_requests(void **state)
{
    (void)state;
    cnmemDevice_t d = one_device(2048);
    CN(cnmemInit(1, &d, base));
    void *p = (void *)0x1;
    CN(cnmemMalloc(NULL, 0, NULL));
    CN(cnmemMalloc(&p, 0, NULL));
    assert_null(p);
    assert_int_equal(cnmemMalloc(NULL, 512, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    CN(cnmemFree(NULL, NULL));
    size_t f;
    assert_int_equal(cnmemMemGetInfo(NULL, &f, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemMemGetInfo(&f, NULL, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemPrintMemoryState(NULL, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemRegisterStream(NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    p = (void *)0x1;
    assert_int_equal(cnmemMalloc(&p, SIZE_MAX, NULL), CNMEM_STATUS_OUT_OF_MEMORY);
    assert_ptr_equal(p, (void *)0x1);
    mem_info_is(NULL, 2048, 2048);
    CN(cnmemFinalize());
}

/* CNMeM's memoryUsage: exact figures, requests rounded up to 512 bytes. */
static void memory_usage(void **state)
{
    (void)state;
    cnmemDevice_t d = one_device(4096);
    CN(cnmemInit(1, &d, base));
    mem_info_is(NULL, 4096, 4096);
    void *p, *q;
    CN(cnmemMalloc(&p, 1024, NULL));
    mem_info_is(NULL, 3072, 4096);
    CN(cnmemMalloc(&q, 1, NULL));
    mem_info_is(NULL, 2560, 4096);
    assert_int_equal((uintptr_t)p % 256, 0);
    assert_int_equal((uintptr_t)q % 256, 0);
    assert_ptr_not_equal(p, q);
    CN(cnmemFree(p, NULL));
    CN(cnmemFree(q, NULL));
    mem_info_is(NULL, 4096, 4096);
    assert_int_equal(cnmemFree(p, NULL), CNMEM_STATUS_INVALID_ARGUMENT); /* twice */
    assert_int_equal(cnmemFree((char *)q + 512, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    CN(cnmemFinalize());
}

/* allocateTooMuchNoGrow and allocateTooMuchAndGrow. */
static void cannot_grow(void **state)
{
    (void)state;
    cnmemDevice_t d = one_device(2048);
    void *p[5];
    CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW));
    for (int i = 0; i < 4; i++)
        CN(cnmemMalloc(&p[i], 512, NULL));
    p[4] = (void *)0x1;
    assert_int_equal(cnmemMalloc(&p[4], 512, NULL), CNMEM_STATUS_OUT_OF_MEMORY);
    assert_ptr_equal(p[4], (void *)0x1);
    mem_info_is(NULL, 0, 2048);
    CN(cnmemFree(p[1], NULL));
    CN(cnmemMalloc(&p[4], 512, NULL)); /* a free makes room again */
    for (int i = 0; i < 5; i++)
        if (i != 1)
            CN(cnmemFree(p[i], NULL));
    CN(cnmemFinalize());

    CN(cnmemInit(1, &d, base));
    for (int i = 0; i < 5; i++)
        CN(cnmemMalloc(&p[i], 512, NULL));
    mem_info_is(NULL, 0, 2560); /* the root grew by the request */
    for (int i = 0; i < 5; i++)
        CN(cnmemFree(p[i], NULL));
    mem_info_is(NULL, 2560, 2560); /* and keeps what it grew by */
    CN(cnmemFinalize());
}

/* allocateAndReserveStream(DifferentSizes): a stream's size comes out of the root. */
static void stream_sizes(void **state)
{
    (void)state;
    cudaStream_t s[2];
    CK(cudaStreamCreate(&s[0]));
    CK(cudaStreamCreate(&s[1]));
    size_t sizes[2] = {2048, 4096};
    cnmemDevice_t d = one_device(8192);
    d.numStreams = 2;
    d.streams = s;
    d.streamSizes = sizes;
    CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW));
    mem_info_is(NULL, 2048, 8192);
    mem_info_is(s[0], 2048, 2048);
    mem_info_is(s[1], 4096, 4096);
    CN(cnmemFinalize());

    sizes[1] = 1000; /* rounded up to 512 */
    d.size = 4096;
    CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW));
    mem_info_is(NULL, 1024, 4096);
    mem_info_is(s[1], 1024, 1024);
    CN(cnmemFinalize());
    assert_int_equal(sizes[1], 1000); /* the caller's array is left alone */

    sizes[1] = 4096; /* 2048 + 4096 > 4096: the root cannot give them */
    assert_int_equal(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW), CNMEM_STATUS_OUT_OF_MEMORY);
    assert_int_equal(device_free(), free_at_start);
    /* growing, the root takes the whole second size on top of its 2048 free bytes */
    CN(cnmemInit(1, &d, base));
    mem_info_is(NULL, 2048, 8192);
    mem_info_is(s[1], 4096, 4096);
    CN(cnmemFinalize());
    CK(cudaStreamDestroy(s[0]));
    CK(cudaStreamDestroy(s[1]));
}

/* A stream's manager takes from the root, then steals a sibling's free bytes (allocateAndSteal);
 * the root steals too; CANNOT_STEAL refuses both with OUT_OF_MEMORY. */
static void take_and_steal(void **state)
{
    (void)state;
    cudaStream_t s[2];
    CK(cudaStreamCreate(&s[0]));
    CK(cudaStreamCreate(&s[1]));
    cnmemDevice_t d = one_device(3072);
    d.numStreams = 2;
    d.streams = s;
    for (int round = 0; round < 2; round++) {
        unsigned steal = round ? CNMEM_FLAGS_CANNOT_STEAL : 0;
        CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW | steal));
        void *a, *b, *c = (void *)0x1;
        CN(cnmemMalloc(&a, 1024, s[1]));
        CN(cnmemFree(a, s[1]));
        mem_info_is(s[1], 1024, 1024); /* a stream keeps what it took */
        mem_info_is(NULL, 2048, 3072);
        CN(cnmemMalloc(&a, 2048, s[0])); /* from the root */
        mem_info_is(NULL, 0, 3072);
        mem_info_is(s[0], 0, 2048);
        if (steal) {
            assert_int_equal(cnmemMalloc(&c, 1024, s[0]), CNMEM_STATUS_OUT_OF_MEMORY);
            assert_int_equal(cnmemMalloc(&c, 512, NULL), CNMEM_STATUS_OUT_OF_MEMORY);
            assert_ptr_equal(c, (void *)0x1);
            mem_info_is(s[1], 1024, 1024);
        } else {
            CN(cnmemMalloc(&b, 1024, s[0])); /* s[1]'s free bytes */
            mem_info_is(s[1], 0, 0);
            mem_info_is(s[0], 0, 3072);
            mem_info_is(NULL, 0, 3072);
            assert_int_equal(cnmemMalloc(&c, 512, NULL), CNMEM_STATUS_OUT_OF_MEMORY);
            CN(cnmemFree(b, s[0]));
        }
        CN(cnmemFree(a, s[0]));
        CN(cnmemFinalize());
    }

    /* the root takes a stream's reserved bytes when its own are gone */
    size_t sizes[2] = {1024, 0};
    d.size = 2048;
    d.streamSizes = sizes;
    CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW));
    void *a, *b;
    CN(cnmemMalloc(&a, 1024, NULL));
    CN(cnmemMalloc(&b, 1024, NULL));
    mem_info_is(s[0], 0, 0);
    mem_info_is(NULL, 0, 2048);
    CN(cnmemFree(a, NULL));
    CN(cnmemFree(b, NULL));
    mem_info_is(NULL, 2048, 2048);
    CN(cnmemFinalize());
    CK(cudaStreamDestroy(s[0]));
    CK(cudaStreamDestroy(s[1]));
}

/* freeWrongStream, freeNULLRatherThanNamed, addStream, and the rules around them. */
static void streams_and_frees(void **state)
{
    (void)state;
    cudaStream_t s[3];
    for (int i = 0; i < 3; i++)
        CK(cudaStreamCreate(&s[i]));
    cnmemDevice_t d = one_device(4096);
    d.numStreams = 2;
    d.streams = s;
    CN(cnmemInit(1, &d, base));
    void *a, *b, *c = (void *)0x1;
    CN(cnmemMalloc(&a, 1024, s[0]));
    assert_int_equal(cnmemFree(a, s[1]), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemFree(a, s[2]), CNMEM_STATUS_INVALID_ARGUMENT); /* not registered */
    CN(cnmemFree(a, s[0]));
    CN(cnmemMalloc(&a, 1024, NULL));
    assert_int_equal(cnmemFree(a, s[0]), CNMEM_STATUS_INVALID_ARGUMENT);
    CN(cnmemFree(a, NULL));
    /* a stream's block freed on the NULL stream: its bytes go back to the stream's manager */
    CN(cnmemMalloc(&a, 1024, s[0]));
    mem_info_is(s[0], 0, 1024);
    CN(cnmemFree(a, NULL));
    mem_info_is(s[0], 1024, 1024);
    /* an unregistered stream is refused until it is registered */
    assert_int_equal(cnmemMalloc(&c, 1024, s[2]), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_ptr_equal(c, (void *)0x1);
    assert_int_equal(cnmemMemGetInfo(&(size_t){0}, &(size_t){0}, s[2]),
                     CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemPrintMemoryState(stdout, s[2]), CNMEM_STATUS_INVALID_ARGUMENT);
    CN(cnmemRegisterStream(s[2]));
    CN(cnmemRegisterStream(s[2])); /* again: nothing changes */
    mem_info_is(s[2], 0, 0);
    CN(cnmemMalloc(&b, 1024, s[2]));
    mem_info_is(s[2], 0, 1024);
    CN(cnmemFree(b, s[2]));
    CN(cnmemFinalize());
    /* streams destroyed before cnmemFinalize, as CNMeM's own tests do */
    CN(cnmemInit(1, &d, base));
    CN(cnmemMalloc(&a, 1024, s[0]));
    CN(cnmemFree(a, s[0]));
    CN(cnmemMalloc(&a, 1024, s[1])); /* still allocated at cnmemFinalize */
    for (int i = 0; i < 3; i++)
        CK(cudaStreamDestroy(s[i]));
    CN(cnmemFinalize());
}

/* allocateNoFree and testSharedPtr: the last reference frees what is still allocated. */
static void references(void **state)
{
    (void)state;
    cnmemDevice_t d = one_device(2048);
    CN(cnmemInit(1, &d, base));
    void *p, *q;
    CN(cnmemMalloc(&p, 512, NULL));
    CN(cnmemFinalize()); /* with p allocated */
    assert_int_equal(device_free(), free_at_start);

    CN(cnmemInit(1, &d, base));
    CN(cnmemRetain());
    CN(cnmemRetain());
    CN(cnmemMalloc(&p, 1024, NULL));
    CN(cnmemMalloc(&q, 512, NULL));
    CN(cnmemFinalize()); /* two references left: still usable */
    CN(cnmemRelease());
    mem_info_is(NULL, 512, 2048);
    CN(cnmemFree(p, NULL));
    CN(cnmemRelease()); /* the last: q goes with the rest */
    assert_int_equal(cnmemRelease(), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemRetain(), CNMEM_STATUS_NOT_INITIALIZED);
    assert_int_equal(cnmemFree(q, NULL), CNMEM_STATUS_NOT_INITIALIZED);
}

/* The text CNMeM's layout gives for a known state, child then root. */
static void print_memory_state(void **state)
{
    (void)state;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    size_t sizes[1] = {1024};
    cnmemDevice_t d = one_device(4096);
    d.numStreams = 1;
    d.streams = &s;
    d.streamSizes = sizes;
    CN(cnmemInit(1, &d, base));
    void *p, *q;
    CN(cnmemMalloc(&p, 512, s));
    CN(cnmemMalloc(&q, 2048, NULL));
    FILE *f = tmpfile();
    assert_non_null(f);
    CN(cnmemPrintMemoryState(f, s));
    char want[2048];
    int n = snprintf(want, sizeof want,
                     ">> [child] device=0, stream=0x%016zx, used=512B, free=512B\n"
                     "| list=\"used\", size=512\n"
                     "| | data=0x%016zx, size=512\n"
                     "|\n| list=\"free\", size=512\n|\n\n"
                     ">> [root] device=0, stream=0x0000000000000000, used=3072B, free=1024B\n"
                     "| list=\"used\", size=3072\n"
                     "| | data=0x%016zx, size=2048\n"
                     "| | child stream=0x%016zx, size=1024\n"
                     "|\n| list=\"free\", size=1024\n|\n\n",
                     (size_t)(uintptr_t)s, (size_t)(uintptr_t)p, (size_t)(uintptr_t)q,
                     (size_t)(uintptr_t)s);
    assert_true(n > 0 && (size_t)n < sizeof want);
    char got[2048] = {0};
    rewind(f);
    size_t len = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    assert_int_equal(len, (size_t)n);
    assert_string_equal(got, want);
    CN(cnmemFree(p, s));
    CN(cnmemFree(q, NULL));
    CN(cnmemFinalize());
    CK(cudaStreamDestroy(s));
}

/* Two devices (CUDASIM_DEVICE_COUNT=2; skipped with one GPU): each root is its device's, the
 * current device decides, and cnmemInit leaves the current device as it found it. */
static void two_devices(void **state)
{
    (void)state;
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 2)
        skip();
    cnmemDevice_t d[2] = {one_device(4096), one_device(2048)};
    d[1].device = 1;
    CK(cudaSetDevice(1));
    CN(cnmemInit(2, d, base));
    int cur = -1;
    CK(cudaGetDevice(&cur));
    assert_int_equal(cur, 1);
    mem_info_is(NULL, 2048, 2048);
    CK(cudaSetDevice(0));
    mem_info_is(NULL, 4096, 4096);
    CN(cnmemFinalize());

    CN(cnmemInit(1, &d[1], base)); /* device 1 only */
    void *p = (void *)0x1;
    assert_int_equal(cnmemMalloc(&p, 512, NULL), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemRegisterStream((cudaStream_t)0x10), CNMEM_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cnmemMemGetInfo(&(size_t){0}, &(size_t){0}, NULL),
                     CNMEM_STATUS_INVALID_ARGUMENT);
    CK(cudaSetDevice(1));
    CN(cnmemMalloc(&p, 512, NULL));
    CK(cudaSetDevice(0));
    assert_int_equal(cnmemFree(p, NULL), CNMEM_STATUS_INVALID_ARGUMENT); /* not device 0's */
    CK(cudaSetDevice(1));
    CN(cnmemFree(p, NULL));
    CK(cudaSetDevice(0));
    CN(cnmemFinalize());
}

/* ---- threads ---- */

enum { STREAMS = 8, THREADS = 32, BLOCKS = 4 };

typedef struct {
    cudaStream_t stream;
    bool register_it;
    unsigned char byte;
    int failures;
} worker;

/* Four blocks at once, each filled with the thread's own byte on its stream and read back:
 * a block shared with another thread would show the other's byte. */
static void *work(void *arg)
{
    worker *w = arg;
    void *p[BLOCKS];
    unsigned char *host = NULL;
    if (cudaMallocHost((void **)&host, 1024) != cudaSuccess)
        w->failures++;
    if (w->register_it && cnmemRegisterStream(w->stream) != OK)
        w->failures++;
    for (int round = 0; host && round < 8 && !w->failures; round++) {
        int got = 0;
        while (got < BLOCKS && cnmemMalloc(&p[got], 1024, w->stream) == OK)
            got++;
        if (got < BLOCKS)
            w->failures++;
        for (int i = 0; i < got; i++)
            if (cudaMemsetAsync(p[i], w->byte, 1024, w->stream) != cudaSuccess)
                w->failures++;
        for (int i = 0; i < got; i++) {
            if (cudaMemcpyAsync(host, p[i], 1024, cudaMemcpyDeviceToHost, w->stream) !=
                    cudaSuccess ||
                cudaStreamSynchronize(w->stream) != cudaSuccess)
                w->failures++;
            for (int k = 0; k < 1024; k++)
                if (host[k] != w->byte) {
                    w->failures++;
                    break;
                }
        }
        for (int i = 0; i < got; i++)
            if (cnmemFree(p[i], w->stream) != OK)
                w->failures++;
    }
    cudaFreeHost(host);
    return NULL;
}

static void run_workers(cudaStream_t *streams, bool register_them)
{
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){streams[i % STREAMS], register_them, (unsigned char)(i + 1), 0};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
    }
}

/* allocateConcurrentMultiStreamsPerThreadNoGrow: 32 threads on 8 streams, exactly enough bytes;
 * then registerAndAllocateConcurrentMultiStreamsPerThread, growing from 1 KiB. */
static void threads(void **state)
{
    (void)state;
    cudaStream_t s[STREAMS];
    for (int i = 0; i < STREAMS; i++)
        CK(cudaStreamCreate(&s[i]));
    cnmemDevice_t d = one_device((size_t)THREADS * BLOCKS * 1024);
    d.numStreams = STREAMS;
    d.streams = s;
    CN(cnmemInit(1, &d, base | CNMEM_FLAGS_CANNOT_GROW));
    run_workers(s, false);
    /* the streams took from the root only what they needed at once, and never more than it
     * had: what the root has left and what its streams hold is exactly its size */
    size_t root_free = 0, root_total = 0, held = 0;
    CN(cnmemMemGetInfo(&root_free, &root_total, NULL));
    assert_int_equal(root_total, d.size);
    for (int i = 0; i < STREAMS; i++) {
        size_t f = 0, t = 0;
        CN(cnmemMemGetInfo(&f, &t, s[i]));
        assert_int_equal(f, t); /* all freed */
        assert_true(t >= BLOCKS * 1024);
        held += t;
    }
    assert_int_equal(root_free + held, d.size);
    CN(cnmemFinalize());

    d = one_device(1024);
    CN(cnmemInit(1, &d, base));
    run_workers(s, true);
    /* the first stream took the root's 1024 bytes, the root grew for the others: what it
     * holds is exactly what its streams hold */
    size_t f = 1, total = 0;
    CN(cnmemMemGetInfo(&f, &total, NULL));
    assert_int_equal(f, 0);
    held = 0;
    for (int i = 0; i < STREAMS; i++) {
        size_t sf = 0, st = 0;
        CN(cnmemMemGetInfo(&sf, &st, s[i]));
        assert_int_equal(sf, st);
        assert_true(st >= BLOCKS * 1024);
        held += st;
    }
    assert_int_equal(held, total);
    CN(cnmemFinalize());
    for (int i = 0; i < STREAMS; i++)
        CK(cudaStreamDestroy(s[i]));
}

static unsigned flags_default = CNMEM_FLAGS_DEFAULT, flags_managed = CNMEM_FLAGS_MANAGED;

int main(void)
{
#define T(fn)                                                                                  \
    {#fn, fn, record_free, check_released, &flags_default},                                    \
    {#fn "_managed", fn, record_free, check_released, &flags_managed}
    const struct CMUnitTest tests[] = {
        T(error_strings),
        T(every_call_needs_init),
        T(init_arguments),
        T(init_sizes),
        T(null_and_zero_requests),
        T(memory_usage),
        T(cannot_grow),
        T(stream_sizes),
        T(take_and_steal),
        T(streams_and_frees),
        T(references),
        T(print_memory_state),
        T(two_devices),
        T(threads),
    };
#undef T
    return cmocka_run_group_tests_name("cnmem", tests, NULL, NULL);
}
