/* Failed allocations made visible. PyTorch 2.15 does not check what a pluggable allocator
 * returns: a NULL becomes a tensor whose data_ptr() is 0, with no exception (README, "PyTorch").
 * So the library says it at the moment it happens: one line on stderr naming the pool, the
 * request (bytes, device, stream) and the reason, once per distinct failure (the same pool,
 * device, size, stream and status again is the same failure: a retry loop prints one line, not
 * thousands). The calling thread keeps its latest failure's line and a count of its failures,
 * for callers (the Python helper) that turn them into torch.OutOfMemoryError. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "streampool_torch.h"
#include "torch_internal.h"

typedef struct {
    char pool[SP_POOL_NAME_MAX + 1];
    int device;
    size_t size;
    cudaStream_t stream;
    int status;
} failure_key;

/* Distinct failures already reported. A bounded table: past it, one line says that further
 * failures go unreported on stderr (each thread's own record still has them). */
#define SEEN_MAX 256
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static failure_key seen[SEEN_MAX];
static size_t nseen;
static bool seen_full_reported;

static _Thread_local char last_line[384 + SP_POOL_NAME_MAX];
static _Thread_local int last_failure_status;
static _Thread_local uint64_t failed_allocs;

/* True the first time this failure is seen (and then remembered); false for a repeat, or when
 * the table is full (*full then says whether this call is the one to say so). */
static bool first_time(const failure_key *k, bool *full)
{
    bool fresh = true;
    *full = false;
    pthread_mutex_lock(&seen_lock);
    for (size_t i = 0; i < nseen && fresh; i++)
        fresh = !(seen[i].device == k->device && seen[i].size == k->size &&
                  seen[i].stream == k->stream && seen[i].status == k->status &&
                  strcmp(seen[i].pool, k->pool) == 0);
    if (fresh && nseen < SEEN_MAX) {
        seen[nseen++] = *k;
    } else if (fresh) {
        fresh = false;
        *full = !seen_full_reported;
        seen_full_reported = true;
    }
    pthread_mutex_unlock(&seen_lock);
    return fresh;
}

void sp__torch_failure(const char *pool, int device, size_t size, cudaStream_t stream,
                       int status)
{
    failure_key k = {.device = device, .size = size, .stream = stream, .status = status};
    snprintf(k.pool, sizeof k.pool, "%s", pool && pool[0] ? pool : "");
    /* sp_last_cuda_error_string is "" unless a CUDA call failed inside this allocation */
    const char *cuda = status == SP_ERR_CUDA || status == SP_ERR_OUT_OF_MEMORY
                           ? sp_last_cuda_error_string() : "";
    snprintf(last_line, sizeof last_line,
             "streampool_torch: %zu bytes on device %d, stream %p, from pool \"%s\" failed: "
             "%s (%s)%s%s",
             size, device, (void *)stream, k.pool[0] ? k.pool : "default", sp_status_name(status),
             sp_strerror(status), cuda[0] ? "; " : "", cuda);
    last_failure_status = status;
    failed_allocs++;
    bool full;
    if (first_time(&k, &full))
        fprintf(stderr, "%s\n", last_line);
    else if (full)
        fprintf(stderr, "streampool_torch: more than %d distinct allocation failures; further "
                "ones are not reported here (sp_torch_last_failure still has each)\n", SEEN_MAX);
}

int sp_torch_last_failure(char *buf, size_t len)
{
    if (buf && len)
        snprintf(buf, len, "%s", last_failure_status ? last_line : "");
    return last_failure_status;
}

uint64_t sp_torch_failed_allocs(void)
{
    return failed_allocs;
}
