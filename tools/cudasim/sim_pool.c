/* cudasim device memory: each device reserves host address space once (an arena, untouched
 * pages cost no RAM) and maps it to pools in 2 MiB pages up to its capacity. A pool's chunks are
 * contiguous ranges of pages, sub-allocated in 512-byte units. A freed range remembers the
 * stream-ordered free that released it and is handed to another stream only under CUDA's reuse
 * rules (CUDA-SEMANTICS B.9-11); like the driver, a pool remaps free pages a stream may reuse
 * into a new contiguous range before it grows (B.13a), and trims page by page (B.13). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim_internal.h"

static size_t round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* ---- IPC: shareable pools' files ----
 *
 * A pool created with cudaMemHandleTypePosixFileDescriptor keeps its pages in a memfd: the file
 * starts with a header (identity, device, the exporter's arena size) and a table of exported
 * blocks, then holds each page at the offset its address has in the device's arena, mapped
 * MAP_SHARED there. Another process (or this one) imports the pool by mapping the whole file at
 * a window of its own, so a block's bytes lie at window + its arena offset: what one side
 * writes, the other reads. The exporter alone writes the table, each slot seqlock-style
 * (serial, then fields, then live), so an importer can check that a block it is given, or
 * uses, is still the one exported and not freed since. Released pages are punched out of the
 * file (their memory goes back even while importers map it) and the arena range gets private
 * anonymous memory again. */

static void seg_forget_uses(sim_seg *s);

#define SIM_IPC_MAGIC 0x43504953414455c3ull
#define SIM_IPC_SLOTS 65536u
#define SIM_MAX_IMPORTS 64

typedef struct {
    _Atomic uint64_t serial; /* of the export now in the slot (0: never used) */
    _Atomic uint64_t offset; /* arena offset of the block */
    _Atomic uint64_t size;
    _Atomic uint64_t live;   /* 1 while the exporter has not freed it */
} sim_ipc_slot;

struct sim_ipc_header {
    uint64_t magic;
    uint64_t pool_id;        /* random: tells one shareable pool's blocks from another's */
    int64_t device;
    uint64_t arena_size;
    uint64_t next_serial;    /* the exporter's alone */
    uint64_t slots_used;     /* the exporter's alone: slots ever handed out */
    sim_ipc_slot slots[SIM_IPC_SLOTS];
};

/* cudaMemPoolPtrExportData as cudasim fills it (64 bytes, the rest zero). */
typedef struct {
    uint64_t magic, pool_id, serial, offset, size;
    uint32_t slot, zero32;
    unsigned char zero[16];
} sim_export_data;
_Static_assert(sizeof(sim_export_data) == sizeof(struct cudaMemPoolPtrExportData),
               "export data is 64 bytes");

static size_t ipc_header_size(void)
{
    return (sizeof(struct sim_ipc_header) + SIM_CHUNK - 1) / SIM_CHUNK * SIM_CHUNK;
}

/* Imported pools, for finding a pointer's pool by its window. Written under the exclusive
 * lock only, read in either mode. */
static sim_pool *imported_pools[SIM_MAX_IMPORTS];
static int n_imported;

static sim_pool *window_pool(const void *p)
{
    const char *c = p;
    for (int i = 0; i < n_imported; i++) {
        sim_pool *q = imported_pools[i];
        if (c >= q->window && c < q->window + q->window_size)
            return q;
    }
    return NULL;
}

/* Reads slot `slot` consistently (the exporter may rewrite it meanwhile): is it live, exported
 * under `serial`? */
static bool ipc_slot_live(const struct sim_ipc_header *h, uint32_t slot, uint64_t serial,
                          uint64_t *offset, uint64_t *size)
{
    if (slot >= SIM_IPC_SLOTS)
        return false;
    const sim_ipc_slot *x = &h->slots[slot];
    uint64_t s1 = atomic_load(&x->serial);
    uint64_t live = atomic_load(&x->live);
    uint64_t off = atomic_load(&x->offset), sz = atomic_load(&x->size);
    uint64_t s2 = atomic_load(&x->serial);
    if (s1 != serial || s2 != serial || !live)
        return false;
    if (offset)
        *offset = off;
    if (size)
        *size = sz;
    return true;
}

/* Maps [base, base+size) of device d's arena from the pool's file. */
static bool ipc_back(const sim_pool *pool, const sim_device *d, char *base, size_t size)
{
    off_t off = (off_t)(ipc_header_size() + (size_t)(base - d->arena));
    return mmap(base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, pool->ipc_fd, off) !=
           MAP_FAILED;
}

/* Gives released pages of a shareable pool back: punched out of the file (importers then read
 * zeros), the arena range private and anonymous again for whichever pool takes it next. */
static void ipc_unback(int fd, const sim_device *d, char *base, size_t size)
{
    off_t off = (off_t)(ipc_header_size() + (size_t)(base - d->arena));
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)size);
    if (mmap(base, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
        abort(); /* the arena would have a hole: the emulator cannot go on */
}

/* Makes a new pool shareable: its file and header. */
static bool ipc_init(sim_pool *p)
{
    const sim_device *d = &sim_g.devices[p->device];
    int fd = memfd_create("cudasim-pool", MFD_CLOEXEC);
    if (fd < 0)
        return false;
    size_t hdr = ipc_header_size();
    struct sim_ipc_header *h = MAP_FAILED;
    if (ftruncate(fd, (off_t)(hdr + d->arena_size)) == 0)
        h = mmap(NULL, hdr, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        return false;
    }
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)p;
    h->magic = SIM_IPC_MAGIC;
    h->pool_id = id;
    h->device = p->device;
    h->arena_size = d->arena_size;
    p->shareable = true;
    p->ipc_fd = fd;
    p->ipc = h;
    return true;
}

/* The exporter frees an exported block (any lock mode, the pool's lock held when shared): the
 * slot is marked dead first, so no importer takes or uses the block from here on. */
static void ipc_slot_retire(sim_pool *pool, sim_seg *s)
{
    uint32_t slot = s->export_slot - 1;
    atomic_store(&pool->ipc->slots[slot].live, 0);
    s->export_slot = 0;
    if (pool->n_free_slots == pool->cap_free_slots) {
        uint32_t cap = pool->cap_free_slots ? pool->cap_free_slots * 2 : 64;
        uint32_t *v = realloc(pool->free_slots, cap * sizeof *v);
        if (!v)
            abort(); /* out of host memory in the emulator itself */
        pool->free_slots = v;
        pool->cap_free_slots = cap;
    }
    pool->free_slots[pool->n_free_slots++] = slot;
}

/* Exclusive lock: an imported pool's live block holding [p, p+n), one the exporter has not
 * freed since it was exported. */
static sim_seg *import_seg(sim_pool *pool, const void *p, size_t n)
{
    const char *q = p;
    sim_seg *seg = sim_map_get(&pool->allocs, p, SIM_H_ALLOC);
    for (size_t i = 0; !seg && i < pool->allocs.cap; i++) {
        sim_seg *x = pool->allocs.slots[i].key ? pool->allocs.slots[i].value : NULL;
        if (x && q >= x->addr && q < x->addr + x->size)
            seg = x;
    }
    if (!seg || n > (size_t)(seg->addr + seg->size - q) ||
        !ipc_slot_live(pool->ipc, seg->export_slot - 1, seg->export_serial, NULL, NULL))
        return NULL;
    return seg;
}

/* An imported block freed (cudaFree, cudaFreeAsync): gone from this process only. */
static void import_release(sim_pool *pool, sim_seg *s)
{
    sim_map_remove(&pool->allocs, s->addr);
    seg_forget_uses(s);
    pool->live_allocs--;
    free(s);
}

/* ---- device arena ---- */

static sim_pool *pool_new(int device, bool is_default, bool is_sync);

cudaError_t sim_device_memory_init(sim_device *d, int device)
{
    memset(d, 0, sizeof *d);
    d->capacity = sim_g.env_capacity;
    size_t want = d->capacity > SIM_MIN_ARENA / 2 ? d->capacity * 2 : SIM_MIN_ARENA;
    d->arena_size = round_up(want, SIM_CHUNK);
    void *arena = mmap(NULL, d->arena_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED)
        return cudaErrorInitializationError;
    d->arena = arena;
    d->map_len = d->arena_size / SIM_CHUNK;
    d->chunk_map = calloc(d->map_len, sizeof *d->chunk_map);
    d->page_pool = calloc(d->map_len, sizeof *d->page_pool);
    pthread_mutex_init(&d->arena_lock, NULL);
    d->default_pool = pool_new(device, true, false);
    d->sync_pool = pool_new(device, false, true);
    if (!d->chunk_map || !d->page_pool || !d->default_pool || !d->sync_pool)
        abort();
    d->current_pool = d->default_pool;
    d->ready = true;
    return cudaSuccess;
}

/* Points `slots` page slots from `first` at chunk c (NULL: unmapped). Under arena_lock. */
static void map_set(sim_device *d, size_t first, size_t slots, sim_chunk *c)
{
    for (size_t i = first; i < first + slots; i++) {
        d->chunk_map[i] = c;
        atomic_store_explicit(&d->page_pool[i], c ? c->pool : NULL, memory_order_release);
    }
}

/* The chunk_map entry of a retired range: pages remapped into a new range while a free of
 * theirs had not executed yet. Their old addresses stay reserved and their contents untouched,
 * as work enqueued before that free may still read or write them; an OP_UNMAP on the stream
 * that remapped them releases them in stream order (sim_pool_unmap). No pool owns them
 * (page_pool NULL), and the device counts their physical pages once, in the new range. */
static sim_chunk retired_range;

/* Next-fit search for `slots` free consecutive chunk slots, mapped to c. */
static char *arena_take(sim_device *d, size_t slots, sim_chunk *c)
{
    pthread_mutex_lock(&d->arena_lock);
    char *base = NULL;
    for (size_t tries = 0, i = d->map_hint; tries < d->map_len; tries++, i++) {
        if (i + slots > d->map_len) {
            i = (size_t)-1; /* wrap */
            continue;
        }
        size_t k = 0;
        while (k < slots && !d->chunk_map[i + k])
            k++;
        if (k == slots) {
            map_set(d, i, slots, c);
            d->map_hint = i + slots;
            base = d->arena + i * SIM_CHUNK;
            break;
        }
        i += k;
        tries += k;
    }
    pthread_mutex_unlock(&d->arena_lock);
    return base;
}

/* Under the exclusive lock (chunks come and go under pool locks otherwise). */
static sim_chunk *chunk_at(const void *p, sim_device **dev_out)
{
    for (int dev = 0; dev < sim_g.device_count; dev++) {
        sim_device *d = &sim_g.devices[dev];
        const char *c = p;
        if (d->ready && c >= d->arena && c < d->arena + d->arena_size) {
            if (dev_out)
                *dev_out = d;
            return d->chunk_map[(size_t)(c - d->arena) / SIM_CHUNK];
        }
    }
    return NULL;
}

static sim_seg *live_seg(const void *p, size_t n);

int sim_device_of_address(const void *p, bool *managed)
{
    *managed = false;
    if (sim_graph_owns(p))
        return sim_graph_alloc_device(p);
    sim_device *d = NULL;
    sim_chunk *c = chunk_at(p, &d);
    if (!c || c == &retired_range)
        return -1; /* not mapped (any more): no device's memory */
    sim_seg *seg = live_seg(p, 0);
    *managed = seg && seg->managed;
    return (int)(d - sim_g.devices);
}

bool sim_is_device_address(const void *p)
{
    if (sim_graph_owns(p) || (n_imported && window_pool(p)))
        return true;
    sim_device *d = NULL;
    (void)chunk_at(p, &d);
    return d != NULL;
}

/* In either lock mode: the pool whose pages hold p, or NULL. The pool may change as pages are
 * remapped, but a pointer inside a live allocation stays with its pool. */
static sim_pool *pool_of(const void *p)
{
    for (int dev = 0; dev < sim_g.device_count; dev++) {
        sim_device *d = &sim_g.devices[dev];
        const char *c = p;
        if (d->ready && c >= d->arena && c < d->arena + d->arena_size)
            return atomic_load_explicit(&d->page_pool[(size_t)(c - d->arena) / SIM_CHUNK],
                                        memory_order_acquire);
    }
    return n_imported ? window_pool(p) : NULL;
}

int sim_device_of(const void *p)
{
    for (int dev = 0; dev < sim_g.device_count; dev++) {
        sim_device *d = &sim_g.devices[dev];
        const char *c = p;
        if (d->ready && c >= d->arena && c < d->arena + d->arena_size)
            return dev;
    }
    sim_pool *ip = n_imported ? window_pool(p) : NULL;
    return ip ? ip->device : -1;
}

/* Pool allocations are mapped only for the devices the pool grants access to (the Programming
 * Guide: pool accessibility does not follow cudaDeviceEnablePeerAccess). cudaMalloc memory is
 * not checked: copies between devices stage it as CUDA does. */
bool sim_range_access_ok(const void *p, size_t n, int device, bool write)
{
    (void)n; /* a live range lies in one allocation, so in one pool */
    sim_pool *pool = pool_of(p);
    if (!pool || pool->is_sync || pool->device == device)
        return true;
    unsigned char f = pool->access[device];
    return write ? f == cudaMemAccessFlagsProtReadWrite : f != cudaMemAccessFlagsProtNone;
}

/* Under the exclusive lock: the pool allocation holding [p, p+n) (n 0: p), or NULL. */
static sim_seg *live_seg(const void *p, size_t n)
{
    sim_pool *ip = n_imported ? window_pool(p) : NULL;
    if (ip)
        return import_seg(ip, p, n);
    sim_chunk *c = chunk_at(p, NULL);
    if (!c || c == &retired_range)
        return NULL; /* no allocation lives in a retired range any more */
    const char *q = p;
    /* the common case: the allocation's start */
    sim_seg *seg = sim_map_get(&c->pool->allocs, p, SIM_H_ALLOC);
    for (sim_seg *s = c->segs; !seg && s; s = s->next)
        if (q >= s->addr && q < s->addr + s->size)
            seg = s;
    return seg && seg->allocated && n <= (size_t)(seg->addr + seg->size - q) ? seg : NULL;
}

bool sim_range_live(const void *p, size_t n)
{
    if (sim_graph_owns(p))
        return sim_graph_range_live(p, n);
    if (n == 0 && n_imported && window_pool(p))
        return true;
    if (n == 0) {
        sim_chunk *c = chunk_at(p, NULL);
        return c && c != &retired_range;
    }
    return live_seg(p, n) != NULL;
}

/* Is op `seq` of stream a (NULL: none) ordered before the next op on b, or executed already?
 * Either lock mode: b's clock is stable under the caller's lock, `completed` is atomic. */
static bool ordered_or_done(sim_stream *a, uint64_t seq, sim_stream *b)
{
    return !a || a == b || sim_clock_get(&b->clock, a->id) >= seq || a->completed >= seq;
}

bool sim_range_use_ok(const void *p, size_t n, sim_stream *s, bool write, sim_seg **segp)
{
    *segp = NULL;
    if (sim_graph_owns(p))
        return sim_graph_range_live(p, n);
    sim_seg *seg = live_seg(p, n);
    if (!seg)
        return false;
    *segp = seg;
    if (!ordered_or_done(seg->alloc_on, seg->alloc_seq, s))
        return false;
    const char *lo = p, *hi = lo + n;
    for (uint32_t i = 0; i < seg->n_uses; i++) {
        const sim_use *u = &seg->uses[i];
        if ((write || u->write) && lo < u->hi && u->lo < hi &&
            !ordered_or_done(u->stream, u->seq, s))
            return false; /* a race: reads alone never conflict */
    }
    return true;
}

void sim_range_note_use(sim_seg *seg, const void *p, size_t n, sim_stream *s, uint64_t seq,
                        bool write)
{
    if (!seg)
        return;
    const char *lo = p, *hi = lo + n;
    uint32_t keep = 0;
    bool noted = false;
    for (uint32_t i = 0; i < seg->n_uses; i++) {
        sim_use u = seg->uses[i];
        if (u.stream == s && u.lo == lo && u.hi == hi) {
            u.seq = seq; /* s's later use of the same bytes stands for both */
            u.write = u.write || write;
            noted = true;
        } else if (u.stream->completed >= u.seq) {
            sim_stream_unref(u.stream); /* executed: nothing can race with it any more */
            continue;
        }
        seg->uses[keep++] = u;
    }
    seg->n_uses = keep;
    if (noted)
        return;
    if (seg->n_uses == seg->cap_uses) {
        uint32_t cap = seg->cap_uses ? seg->cap_uses * 2 : 2;
        sim_use *v = realloc(seg->uses, cap * sizeof *v);
        if (!v)
            abort(); /* out of host memory in the emulator itself */
        seg->uses = v;
        seg->cap_uses = cap;
    }
    sim_stream_ref(s);
    seg->uses[seg->n_uses++] = (sim_use){s, seq, lo, hi, write};
}

/* A free of allocation s as the next op on stream b (NULL: cudaFree, in no stream's order): is
 * it ordered after the allocation and every use, or have they executed (rules 2, 3, 13b)? */
static bool free_ordered(const sim_seg *s, sim_stream *b)
{
    if (b && !ordered_or_done(s->alloc_on, s->alloc_seq, b))
        return false;
    for (uint32_t i = 0; i < s->n_uses; i++) {
        sim_use u = s->uses[i];
        if (b ? !ordered_or_done(u.stream, u.seq, b) : u.stream->completed < u.seq)
            return false;
    }
    return true;
}

/* Drops the allocation's stream-order bookkeeping (it is freed, or the pool goes). */
static void seg_forget_uses(sim_seg *s)
{
    if (s->alloc_on)
        sim_stream_unref(s->alloc_on);
    s->alloc_on = NULL;
    s->alloc_seq = 0;
    for (uint32_t i = 0; i < s->n_uses; i++)
        sim_stream_unref(s->uses[i].stream);
    free(s->uses);
    s->uses = NULL;
    s->n_uses = s->cap_uses = 0;
}

/* ---- segments and free lists ---- */

static char *seg_end(const sim_seg *s)
{
    return s->addr + s->size;
}

static char *chunk_end(const sim_chunk *c)
{
    return c->base + c->size;
}

/* Page boundaries: pages are SIM_CHUNK-sized slots of the device arena. */
static char *page_up(const sim_device *d, char *p)
{
    return d->arena + round_up((size_t)(p - d->arena), SIM_CHUNK);
}

static char *page_down(const sim_device *d, char *p)
{
    return d->arena + (size_t)(p - d->arena) / SIM_CHUNK * SIM_CHUNK;
}

static void free_list_push(sim_pool *pool, sim_seg *s)
{
    s->free_prev = NULL;
    s->free_next = pool->free_segs;
    if (pool->free_segs)
        pool->free_segs->free_prev = s;
    pool->free_segs = s;
}

static void free_list_remove(sim_pool *pool, sim_seg *s)
{
    if (s->free_prev)
        s->free_prev->free_next = s->free_next;
    else
        pool->free_segs = s->free_next;
    if (s->free_next)
        s->free_next->free_prev = s->free_prev;
    s->free_prev = s->free_next = NULL;
}

static void tag_set(sim_seg *s, sim_stream *stream, uint64_t seq)
{
    if (stream)
        sim_stream_ref(stream);
    if (s->freed_on)
        sim_stream_unref(s->freed_on);
    s->freed_on = stream;
    s->freed_seq = seq;
}

/* Rule 11(c): once a host synchronize has seen the free complete (the freeing stream's own
 * synchronize, an event or stream synchronize of work ordered after it, or a device
 * synchronize), any stream may reuse it whatever the pool's reuse attributes. */
static void tag_settle(sim_seg *s)
{
    if (s->freed_on && sim_stream_observed(s->freed_on, s->freed_seq))
        tag_set(s, NULL, 0);
}

static bool seg_reusable(const sim_pool *pool, sim_seg *s, sim_stream *b)
{
    tag_settle(s);
    sim_stream *a = s->freed_on;
    if (!a || a == b)
        return true; /* never used, observed complete, or the same stream (rule 9) */
    if (!b)
        return false;
    if (pool->reuse_follow && sim_clock_get(&b->clock, a->id) >= s->freed_seq)
        return true; /* 11(a) */
    if (pool->reuse_opportunistic && a->completed >= s->freed_seq)
        return true; /* 11(b) */
    return false;
}

/* Two neighbouring free ranges merge only when their reuse state matches: both settled, or
 * both pending on the same stream (the merged range then waits for the later free, which is
 * stricter, never looser). A pending free never merges into a settled range, so it cannot
 * taint it, and frees of two streams never merge until the host has observed both. */
static bool merge_tags(sim_seg *a, sim_seg *b, sim_stream **stream, uint64_t *seq)
{
    tag_settle(a);
    tag_settle(b);
    if (a->freed_on != b->freed_on)
        return false;
    *stream = a->freed_on;
    *seq = a->freed_seq > b->freed_seq ? a->freed_seq : b->freed_seq;
    return true;
}

/* Merges s with its successor when both are free and compatible; says whether it did. */
static bool try_merge_next(sim_pool *pool, sim_seg *s)
{
    sim_seg *n = s->next;
    sim_stream *stream;
    uint64_t seq;
    if (!n || n->allocated || s->allocated || !merge_tags(s, n, &stream, &seq))
        return false;
    tag_set(s, stream, seq);
    s->size += n->size;
    s->next = n->next;
    if (n->next)
        n->next->prev = s;
    free_list_remove(pool, n);
    tag_set(n, NULL, 0);
    free(n);
    return true;
}

/* Splits free segment s at `at` (inside it); returns the upper part, free with s's tag. */
static sim_seg *seg_split(sim_pool *pool, sim_seg *s, char *at)
{
    sim_seg *rest = calloc(1, sizeof *rest);
    if (!rest)
        abort(); /* out of host memory in the emulator itself */
    rest->chunk = s->chunk;
    rest->addr = at;
    rest->size = (size_t)(seg_end(s) - at);
    tag_set(rest, s->freed_on, s->freed_seq);
    rest->prev = s;
    rest->next = s->next;
    if (s->next)
        s->next->prev = rest;
    s->next = rest;
    s->size = (size_t)(at - s->addr);
    free_list_push(pool, rest);
    return rest;
}

/* Allocates `need` bytes at the start of free segment s, as the next point of stream b's order
 * (b NULL: cudaMalloc, at once). */
static void seg_take(sim_pool *pool, sim_seg *s, size_t need, sim_stream *b)
{
    if (s->size > need)
        (void)seg_split(pool, s, s->addr + need);
    free_list_remove(pool, s);
    tag_set(s, NULL, 0);
    if (b && b->completed < b->submitted) { /* rule 2: other streams must wait for this point */
        sim_stream_ref(b);
        s->alloc_on = b;
        s->alloc_seq = b->submitted;
    }
    s->allocated = true;
    pool->used += need;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    pool->live_allocs++;
    sim_map_put(&pool->allocs, s->addr, SIM_H_ALLOC, s);
}

/* Settles every free range the host has since observed and merges the neighbours that may
 * merge: after a synchronize, ranges of different streams become one range again. */
static void pool_coalesce(sim_pool *pool)
{
    for (sim_chunk *c = pool->chunks; c; c = c->next)
        for (sim_seg *x = c->segs; x; x = x->next)
            while (try_merge_next(pool, x))
                ;
}

/* ---- chunks and pages ---- */

/* Maps `size` bytes (whole pages) as a new chunk, one free segment tagged (stream, seq). The
 * caller has checked the pool's maxSize and charged the device (sim_device_charge). */
static sim_chunk *chunk_new(sim_pool *pool, size_t size, sim_stream *stream, uint64_t seq)
{
    sim_device *d = &sim_g.devices[pool->device];
    sim_chunk *c = calloc(1, sizeof *c);
    sim_seg *s = calloc(1, sizeof *s);
    if (c)
        c->pool = pool; /* before arena_take publishes it in page_pool */
    if (!c || !s || !(c->base = arena_take(d, size / SIM_CHUNK, c))) {
        free(c);
        free(s);
        return NULL;
    }
    if (pool->shareable && !ipc_back(pool, d, c->base, size)) {
        pthread_mutex_lock(&d->arena_lock);
        map_set(d, (size_t)(c->base - d->arena) / SIM_CHUNK, size / SIM_CHUNK, NULL);
        pthread_mutex_unlock(&d->arena_lock);
        free(c);
        free(s);
        return NULL;
    }
    c->size = size;
    s->chunk = c;
    s->addr = c->base;
    s->size = size;
    tag_set(s, stream, seq);
    c->segs = s;
    free_list_push(pool, s);
    c->next = pool->chunks;
    pool->chunks = c;
    pool->reserved += size;
    if (pool->reserved > pool->reserved_high)
        pool->reserved_high = pool->reserved;
    return c;
}

/* Splits chunk c at page boundary `at`, which is also a segment boundary; returns the upper
 * chunk. */
static sim_chunk *chunk_split(sim_pool *pool, sim_chunk *c, char *at)
{
    sim_device *d = &sim_g.devices[pool->device];
    sim_chunk *upper = calloc(1, sizeof *upper);
    if (!upper)
        abort(); /* out of host memory in the emulator itself */
    sim_seg *s = c->segs;
    while (s->addr < at)
        s = s->next;
    s->prev->next = NULL;
    s->prev = NULL;
    upper->segs = s;
    for (; s; s = s->next)
        s->chunk = upper;
    upper->pool = pool;
    upper->base = at;
    upper->size = (size_t)(chunk_end(c) - at);
    c->size = (size_t)(at - c->base);
    pthread_mutex_lock(&d->arena_lock);
    map_set(d, (size_t)(at - d->arena) / SIM_CHUNK, upper->size / SIM_CHUNK, upper);
    pthread_mutex_unlock(&d->arena_lock);
    upper->next = c->next;
    c->next = upper;
    return upper;
}

/* Unmaps chunk c, which is one free segment; with `uncharge`, the device counts it no more (else
 * the caller has counted the device's net change itself). With `defer_on` (its free has not
 * executed yet: only a remap for that stream, or one ordered after the free, gets here), the
 * pages leave the pool at once but keep their address range and contents until an op on
 * defer_on, after the free and all earlier work, wipes and unmaps them. */
static void chunk_release(sim_pool *pool, sim_chunk *c, bool uncharge, sim_stream *defer_on)
{
    sim_device *d = &sim_g.devices[pool->device];
    for (sim_chunk **p = &pool->chunks; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    free_list_remove(pool, c->segs);
    tag_set(c->segs, NULL, 0);
    free(c->segs);
    sim_op *op = NULL;
    if (defer_on) {
        if (!(op = sim_op_new(OP_UNMAP)))
            abort(); /* out of host memory in the emulator itself */
        op->u.unmap.device = pool->device;
        op->u.unmap.base = c->base;
        op->u.unmap.size = c->size;
        /* the pool may be gone when the op runs: the op keeps the file open itself */
        op->u.unmap.ipc_fd = pool->shareable ? fcntl(pool->ipc_fd, F_DUPFD_CLOEXEC, 0) : -1;
    }
    size_t first = (size_t)(c->base - d->arena) / SIM_CHUNK;
    if (op) {
        pthread_mutex_lock(&d->arena_lock);
        map_set(d, first, c->size / SIM_CHUNK, &retired_range);
        pthread_mutex_unlock(&d->arena_lock);
        /* The enqueue fails only when no worker thread can be created: then the stream had
         * none, so nothing of it is pending, and the pages go at once below. */
        int fd = op->u.unmap.ipc_fd;
        if (sim_stream_enqueue(defer_on, op) != cudaSuccess) {
            op = NULL; /* freed by the enqueue */
            if (fd >= 0)
                close(fd);
        }
    }
    if (!op) {
        if (pool->shareable)
            ipc_unback(pool->ipc_fd, d, c->base, c->size);
        else
            madvise(c->base, c->size, MADV_DONTNEED); /* give the pages back to the host */
        pthread_mutex_lock(&d->arena_lock);
        map_set(d, first, c->size / SIM_CHUNK, NULL);
        pthread_mutex_unlock(&d->arena_lock);
    }
    pool->reserved -= c->size;
    if (uncharge)
        (void)sim_device_charge(pool->device, c->size, true);
    free(c);
}

/* Unmaps the whole pages [lo, hi) of free segment s, splitting s and its chunk around them. */
static void release_pages(sim_pool *pool, sim_seg *s, char *lo, char *hi, bool uncharge,
                          sim_stream *defer_on)
{
    if (lo > s->addr)
        s = seg_split(pool, s, lo);
    if (hi < seg_end(s))
        (void)seg_split(pool, s, hi);
    sim_chunk *c = s->chunk;
    if (lo > c->base)
        c = chunk_split(pool, c, lo);
    if (hi < chunk_end(c))
        (void)chunk_split(pool, c, hi);
    chunk_release(pool, c, uncharge, defer_on);
}

typedef struct {
    sim_seg *seg;
    char *lo, *hi;
} page_run;

/* Whole pages inside free ranges that stream b may reuse (b NULL: only ranges the host has
 * observed free). Fills a malloc'ed array of runs; returns the bytes they hold. */
static size_t free_page_runs(sim_pool *pool, sim_stream *b, page_run **out, size_t *n_out)
{
    const sim_device *d = &sim_g.devices[pool->device];
    size_t n = 0, cap = 0, total = 0;
    page_run *runs = NULL;
    for (sim_seg *s = pool->free_segs; s; s = s->free_next) {
        char *lo = page_up(d, s->addr), *hi = page_down(d, seg_end(s));
        if (hi <= lo || !seg_reusable(pool, s, b))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            page_run *r = realloc(runs, cap * sizeof *r);
            if (!r)
                abort(); /* out of host memory in the emulator itself */
            runs = r;
        }
        runs[n++] = (page_run){s, lo, hi};
        total += (size_t)(hi - lo);
    }
    *out = runs;
    *n_out = n;
    return total;
}

/* Unmaps up to `bytes` (whole pages) of the runs; returns the bytes unmapped. A run whose free
 * has not executed yet (only stream b may take it, b non-NULL) goes in b's stream order; once
 * the free has run, no earlier work can touch the pages, and they go at once, adding no op to
 * b (an idle b stays idle). */
static size_t release_runs(sim_pool *pool, page_run *runs, size_t n, size_t bytes,
                           bool uncharge, sim_stream *b)
{
    size_t done = 0;
    for (size_t i = 0; i < n && done < bytes; i++) {
        size_t len = (size_t)(runs[i].hi - runs[i].lo);
        if (len > bytes - done)
            len = bytes - done;
        const sim_seg *seg = runs[i].seg;
        bool pending = seg->freed_on && seg->freed_on->completed < seg->freed_seq;
        release_pages(pool, runs[i].seg, runs[i].lo, runs[i].lo + len, uncharge,
                      pending ? b : NULL);
        done += len;
    }
    return done;
}

/* Rule 13: releases free pages the host has observed free while the pool holds more than
 * `keep`, page by page, never going below `keep`; unobserved frees stay outstanding. */
static void pool_release_to(sim_pool *pool, uint64_t keep)
{
    if (pool->reserved <= keep)
        return;
    pool_coalesce(pool);
    size_t excess = (size_t)(pool->reserved - keep) / SIM_CHUNK * SIM_CHUNK;
    if (!excess)
        return;
    page_run *runs;
    size_t n;
    if (free_page_runs(pool, NULL, &runs, &n))
        (void)release_runs(pool, runs, n, excess, true, NULL);
    free(runs);
}

/* The pool's address space grows by a chunk of round_up(need) bytes; like the driver (NVIDIA,
 * "Using the CUDA Stream-Ordered Memory Allocator, Part 1"), free pages of the pool that b may
 * reuse are remapped into it first, so the pool's reserved bytes grow only by the shortfall.
 * The new chunk's remainder is as reusable as the least settled page it took. */
static sim_seg *pool_map(sim_pool *pool, sim_stream *b, size_t need)
{
    size_t size = round_up(need, SIM_CHUNK);
    if (size < need)
        return NULL;
    page_run *runs;
    size_t n;
    size_t reusable = free_page_runs(pool, b, &runs, &n);
    size_t take = reusable < size ? reusable : size;
    sim_seg *s = NULL;
    /* The device is charged the net growth at once (compare-and-swap against its capacity, as
     * other pools may grow concurrently); the remapped pages move without being counted. */
    if ((!pool->max_size || pool->reserved - take + size <= pool->max_size) &&
        sim_device_charge(pool->device, size - take, false)) {
        bool settled = true;
        /* the rest's tag: b's work so far, before the unmaps that release_runs enqueues */
        uint64_t seq = b ? b->submitted : 0;
        size_t counted = 0;
        for (size_t i = 0; i < n && counted < take; i++) {
            counted += (size_t)(runs[i].hi - runs[i].lo);
            if (runs[i].seg->freed_on)
                settled = false;
        }
        (void)release_runs(pool, runs, n, take, false, b);
        sim_chunk *c = settled ? chunk_new(pool, size, NULL, 0) : chunk_new(pool, size, b, seq);
        s = c ? c->segs : NULL;
        if (!c) /* no address space left: the remapped pages are gone too */
            (void)sim_device_charge(pool->device, size, true);
    }
    free(runs);
    return s;
}

/* ---- pools ---- */

static sim_pool *pool_new(int device, bool is_default, bool is_sync)
{
    struct CUmemPoolHandle_st *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    sim_pool *p = &h->p;
    pthread_mutex_init(&p->lock, NULL);
    p->device = device;
    p->is_default = is_default;
    p->is_sync = is_sync;
    p->reuse_follow = p->reuse_opportunistic = p->reuse_internal = 1;
    p->release_threshold = 0; /* CUDA's default: release at every synchronize */
    p->access[device] = cudaMemAccessFlagsProtReadWrite; /* by default, its own device only */
    p->ipc_fd = -1;
    sim_device *d = &sim_g.devices[device];
    p->next_in_device = d->pools;
    d->pools = p;
    if (!is_sync)
        sim_handle_add(h, SIM_H_POOL);
    return p;
}

static void pool_free(sim_pool *p)
{
    sim_device *d = &sim_g.devices[p->device];
    for (sim_pool **pp = &d->pools; *pp; pp = &(*pp)->next_in_device) {
        if (*pp == p) {
            *pp = p->next_in_device;
            break;
        }
    }
    sim_handle_remove(p);
    if (p->imported) { /* blocks still imported (at a reset): they go with the pool */
        for (size_t i = 0; i < p->allocs.cap; i++) {
            sim_seg *x = p->allocs.slots[i].key ? p->allocs.slots[i].value : NULL;
            if (x) {
                seg_forget_uses(x);
                free(x);
            }
        }
        for (int i = 0; i < n_imported; i++) {
            if (imported_pools[i] == p) {
                imported_pools[i] = imported_pools[--n_imported];
                break;
            }
        }
        munmap(p->window, p->window_size);
    }
    if (p->ipc)
        munmap(p->ipc, ipc_header_size());
    if (p->ipc_fd >= 0)
        close(p->ipc_fd);
    free(p->free_slots);
    sim_map_free(&p->allocs);
    pthread_mutex_destroy(&p->lock);
    free((struct CUmemPoolHandle_st *)p);
}

/* A destroyed pool goes once nothing is outstanding and its memory has been released. Under the
 * exclusive lock (pool structures are freed under it only). */
static void pool_reap(sim_pool *p)
{
    if (!p->destroyed || p->live_allocs)
        return;
    pool_release_to(p, 0);
    if (!p->chunks)
        pool_free(p);
}

/* Under the exclusive lock: reaps the device's destroyed pools (pool_reap: nothing happens to a
 * pool with allocations outstanding). */
static void pools_reap_destroyed(int device)
{
    for (sim_pool *p = sim_g.devices[device].pools, *next; p; p = next) {
        next = p->next_in_device;
        if (p->destroyed)
            pool_reap(p);
    }
}

void sim_pools_release_after_sync(int device)
{
    sim_device *d = &sim_g.devices[device];
    sim_pool *p = d->pools;
    while (p) {
        sim_pool *next = p->next_in_device;
        if (p->destroyed)
            pool_reap(p);
        else if (p->reserved > p->release_threshold)
            pool_release_to(p, p->release_threshold);
        p = next;
    }
}

void sim_pool_unmap(const sim_op *op)
{
    sim_device *d = &sim_g.devices[op->u.unmap.device];
    /* nothing else touches a retired range: it is wiped without a lock */
    if (op->u.unmap.ipc_fd >= 0) {
        ipc_unback(op->u.unmap.ipc_fd, d, op->u.unmap.base, op->u.unmap.size);
        close(op->u.unmap.ipc_fd);
    } else {
        madvise(op->u.unmap.base, op->u.unmap.size, MADV_DONTNEED);
    }
    /* chunk_map is written by shared holders under arena_lock and read by exclusive holders */
    bool shared = sim_lock_shared();
    if (!shared)
        sim_lock();
    pthread_mutex_lock(&d->arena_lock);
    map_set(d, (size_t)(op->u.unmap.base - d->arena) / SIM_CHUNK, op->u.unmap.size / SIM_CHUNK,
            NULL);
    pthread_mutex_unlock(&d->arena_lock);
    sim_unlock();
}

void sim_pools_reset(void)
{
    for (int dev = 0; dev < SIM_MAX_DEVICES; dev++)
        sim_host_device_reset(dev);
    for (int dev = 0; dev < SIM_MAX_DEVICES; dev++) {
        sim_device *d = &sim_g.devices[dev];
        if (!d->ready)
            continue;
        while (d->pools) {
            sim_pool *p = d->pools;
            while (p->chunks) {
                sim_chunk *c = p->chunks;
                for (sim_seg *s = c->segs, *n; s; s = n) {
                    n = s->next;
                    tag_set(s, NULL, 0);
                    seg_forget_uses(s);
                    free(s);
                }
                c->segs = NULL;
                p->chunks = c->next;
                d->reserved -= c->size;
                free(c);
            }
            pool_free(p);
        }
        munmap(d->arena, d->arena_size);
        free(d->chunk_map);
        free(d->page_pool);
        pthread_mutex_destroy(&d->arena_lock);
        memset(d, 0, sizeof *d);
    }
}
/* Best fit among the free ranges b may reuse. */
static sim_seg *find_fit(sim_pool *pool, sim_stream *b, size_t need)
{
    sim_seg *best = NULL;
    for (sim_seg *s = pool->free_segs; s; s = s->free_next) {
        if (s->size < need || (best && s->size >= best->size) || !seg_reusable(pool, s, b))
            continue;
        best = s;
        if (s->size == need)
            break;
    }
    return best;
}

/* Allocates from `pool` in the order CUDA gives: reuse (rules 9-11c) before new memory
 * (rule 10), remapping reusable free pages before growing (rule 13a), and a reuse that
 * inserts a wait (11d) only when no memory can be had. */
static cudaError_t pool_alloc(sim_pool *pool, sim_stream *b, size_t size, void **out)
{
    sim_device *d = &sim_g.devices[pool->device];
    if (size > d->capacity)
        return cudaErrorMemoryAllocation;
    size_t need = round_up(size ? size : 1, SIM_ALLOC_ALIGN);
    if (b)
        sim_stream_implicit_sync(b);
    sim_seg *found = find_fit(pool, b, need);
    if (!found) {
        pool_coalesce(pool); /* frees observed since they were made may merge now */
        found = find_fit(pool, b, need);
    }
    if (!found)
        found = pool_map(pool, b, need);
    if (!found && pool->reuse_internal && b) {
        for (sim_seg *s = pool->free_segs; s && !found; s = s->free_next) {
            if (s->size >= need && s->freed_on &&
                sim_stream_wait_for(b, s->freed_on, s->freed_seq, NULL) == cudaSuccess)
                found = s; /* 11(d): b now waits for the free */
        }
    }
    if (!found)
        return cudaErrorMemoryAllocation;
    seg_take(pool, found, need, b);
    *out = found->addr;
    return cudaSuccess;
}

/* Finds the live allocation starting at p in `pool` (under its lock in shared mode). */
static sim_seg *pool_alloc_lookup(sim_pool *pool, const void *p)
{
    sim_seg *s = pool && p ? sim_map_get(&pool->allocs, p, SIM_H_ALLOC) : NULL;
    return s && s->allocated ? s : NULL;
}

/* Under the exclusive lock: the live allocation starting at p, in any pool. */
static sim_seg *alloc_lookup(const void *p)
{
    return pool_alloc_lookup(pool_of(p), p);
}

/* Frees s; with a stream, reuse elsewhere waits for the free to be reached in stream order. */
static void pool_release_alloc(sim_seg *s, sim_stream *stream, uint64_t seq)
{
    sim_chunk *c = s->chunk;
    sim_pool *pool = c->pool;
    sim_map_remove(&pool->allocs, s->addr);
    seg_forget_uses(s);
    if (s->export_slot)
        ipc_slot_retire(pool, s);
    s->allocated = false;
    pool->used -= s->size;
    pool->live_allocs--;
    tag_set(s, stream, seq);
    free_list_push(pool, s);
    (void)try_merge_next(pool, s);
    if (s->prev)
        (void)try_merge_next(pool, s->prev);
}

void sim_pools_device_reset(int device)
{
    sim_pool *pool = sim_g.devices[device].sync_pool;
    size_t n = 0;
    sim_seg **live = calloc(pool->allocs.len + 1, sizeof *live);
    if (!live)
        abort(); /* the reset cannot be half done */
    for (size_t i = 0; i < pool->allocs.cap; i++)
        if (pool->allocs.slots[i].key)
            live[n++] = pool->allocs.slots[i].value;
    for (size_t i = 0; i < n; i++)
        pool_release_alloc(live[i], NULL, 0);
    free(live);
    pool_release_to(pool, 0);
    sim_host_device_reset(device); /* pinned and registered host memory are the context's */
}

/* Under the lock (shared: with s's slock, and this takes the pool's lock). A destroyed pool
 * whose last allocation this frees is reaped here under the exclusive lock; under the shared
 * one *reap says that the caller must reap the device's pools once it holds the exclusive. */
static cudaError_t free_on_stream(void *ptr, sim_stream *s, bool shared, bool *reap)
{
    sim_pool *pool = pool_of(ptr);
    if (!pool)
        return cudaErrorInvalidValue;
    if (shared)
        pthread_mutex_lock(&pool->lock);
    cudaError_t err = cudaSuccess;
    sim_seg *seg = pool_alloc_lookup(pool, ptr);
    sim_op *op = NULL;
    if (!seg)
        err = cudaErrorInvalidValue; /* cudaMalloc memory is accepted too (rule 13b) */
    else if (!(op = sim_op_new(OP_FREE)))
        err = cudaErrorMemoryAllocation;
    if (!err) {
        sim_stream_implicit_sync(s);
        /* Rule 3: unordered with a pending use, the block could be reused under it: on a GPU a
         * silent race, here a device fault when the free runs. */
        op->bad_address = !free_ordered(seg, s);
        err = sim_stream_enqueue(s, op);
    }
    if (!err && pool->imported) {
        import_release(pool, seg); /* the exporter's memory: nothing returns to this pool */
        if (!shared)
            pool_reap(pool);
        else
            *reap = pool->destroyed && !pool->live_allocs;
    } else if (!err) {
        pool_release_alloc(seg, s, s->submitted);
        if (!shared)
            pool_reap(pool);
        else
            *reap = pool->destroyed && !pool->live_allocs;
    }
    if (shared)
        pthread_mutex_unlock(&pool->lock);
    return err;
}

/* Takes sim_g.lock for a stream-ordered allocator call: shared when the stream allows it
 * (sim_stream_lookup), exclusive otherwise. Returns the stream (NULL: *err) and the mode; a
 * shared holder also holds the stream's slock. */
static sim_stream *lock_for_stream(cudaStream_t stream, cudaError_t *err, bool *shared)
{
    *shared = sim_lock_shared();
    if (*shared) {
        sim_stream *s = sim_stream_lookup(stream, err);
        if (s)
            pthread_mutex_lock(&s->slock);
        if (s || *err)
            return s;
        sim_unlock(); /* the legacy stream, or one still to create */
        *shared = false;
    }
    sim_lock();
    return sim_stream_resolve(stream, err);
}

static void unlock_for_stream(sim_stream *s, bool shared)
{
    if (shared && s)
        pthread_mutex_unlock(&s->slock);
    sim_unlock();
}

/* ---- API: stream-ordered allocation ---- */

/* Resolves a pool handle under the lock. */
static sim_pool *pool_resolve(cudaMemPool_t h)
{
    return sim_handle_valid(h, SIM_H_POOL) && !h->p.destroyed ? &h->p : NULL;
}

/* handle NULL: the stream's device's current pool (cudaMallocAsync). */
static cudaError_t malloc_async(sim_api api, void **ptr, size_t size, cudaMemPool_t handle,
                                cudaStream_t stream)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    if (!ptr)
        return sim_ret(cudaErrorInvalidValue);
    if (sim_graph_capturing_any() && sim_graph_malloc_async(ptr, size, handle, stream, &err))
        return sim_ret(err); /* a graph allocation node, or what the capture forbids */
    bool shared;
    sim_stream *s = lock_for_stream(stream, &err, &shared);
    sim_pool *pool = NULL;
    if (s && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    else if (s && !handle)
        pool = sim_g.devices[s->device].current_pool;
    else if (s && (!(pool = pool_resolve(handle)) || pool->imported))
        err = cudaErrorInvalidValue; /* imported pools make no allocations of their own */
    if (!err && size == 0) {
        *ptr = NULL; /* as cudaMalloc: no memory, nothing to free */
    } else if (!err) {
        void *p = NULL;
        if (shared)
            pthread_mutex_lock(&pool->lock);
        err = pool_alloc(pool, s, size, &p);
        if (shared)
            pthread_mutex_unlock(&pool->lock);
        if (!err)
            *ptr = p;
    }
    unlock_for_stream(s, shared);
    return sim_ret(err);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(SIM_API_cudaMallocAsync, devPtr, size, NULL, hStream);
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream)
{
    if (!memPool) {
        (void)sim_enter(SIM_API_cudaMallocFromPoolAsync);
        return sim_ret(cudaErrorInvalidValue);
    }
    return malloc_async(SIM_API_cudaMallocFromPoolAsync, ptr, size, memPool, stream);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    cudaError_t err = sim_enter(SIM_API_cudaFreeAsync);
    if (err)
        return sim_ret(err);
    if ((sim_graph_capturing_any() || sim_graph_owns(devPtr)) &&
        sim_graph_free_async(devPtr, hStream, &err))
        return sim_ret(err); /* a graph free node, or graph-owned memory */
    bool shared, reap = false;
    sim_stream *s = lock_for_stream(hStream, &err, &shared);
    if (s && sim_g.devices[s->device].sticky)
        err = sim_g.devices[s->device].sticky;
    else if (s && devPtr)
        err = free_on_stream(devPtr, s, shared, &reap);
    int dev = s ? s->device : 0;
    unlock_for_stream(s, shared);
    if (reap) { /* a destroyed pool's last allocation: its structure goes exclusively */
        sim_lock();
        pools_reap_destroyed(dev);
        sim_unlock();
    }
    return sim_ret(err);
}

/* ---- API: synchronous allocation (rule 22: synchronizes the device) ---- */

/* cudaMalloc and cudaMallocManaged: whole pages of the device's synchronous pool. */
static cudaError_t malloc_sync(void **devPtr, size_t size, bool managed)
{
    sim_lock();
    int dev = sim_current_device();
    sim_device *d = sim_dev(dev);
    cudaError_t err = cudaSuccess;
    if (!d) {
        err = cudaErrorInvalidDevice;
    } else if (d->sticky) {
        err = d->sticky;
    } else if (size == 0) {
        *devPtr = NULL; /* rule 4 */
    } else {
        sim_device_sync(dev);
        void *p = NULL;
        err = pool_alloc(d->sync_pool, NULL, size, &p);
        if (!err) {
            alloc_lookup(p)->managed = managed; /* for cudaPointerGetAttributes */
            *devPtr = p;
        }
    }
    sim_unlock();
    return err;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    cudaError_t err = sim_enter(SIM_API_cudaMalloc);
    if (err || (err = sim_graph_unsafe_call()))
        return sim_ret(err);
    if (!devPtr)
        return sim_ret(cudaErrorInvalidValue);
    return sim_ret(malloc_sync(devPtr, size, false));
}

/* Managed memory as on a device without concurrent managed access
 * (cudaDevAttrConcurrentManagedAccess 0, which cudasim reports): the physical storage is the
 * current device's, taken when the call returns, so cudaMemGetInfo counts it at once; the host
 * reaches it directly (the emulated device memory is host memory). Released with cudaFree.
 * Unlike cudaMalloc, a size of 0 and any flags but exactly cudaMemAttachGlobal or
 * cudaMemAttachHost are cudaErrorInvalidValue (the Runtime API's documented contract). */
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaMallocManaged);
    if (err || (err = sim_graph_unsafe_call()))
        return sim_ret(err);
    if (!devPtr || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return sim_ret(cudaErrorInvalidValue);
    return sim_ret(malloc_sync(devPtr, size, true));
}

cudaError_t cudaFree(void *devPtr)
{
    cudaError_t err = sim_enter(SIM_API_cudaFree);
    if (err || (err = sim_graph_unsafe_call()))
        return sim_ret(err);
    if (sim_graph_free_sync(devPtr, &err))
        return sim_ret(err);
    if (!devPtr)
        return cudaSuccess; /* rule 4 */
    sim_lock();
    sim_seg *seg = alloc_lookup(devPtr);
    sim_pool *owner = seg ? pool_of(devPtr) : NULL;
    if (!seg) {
        err = cudaErrorInvalidValue;
    } else if (owner->imported) {
        /* unordered, as for any stream-ordered pointer (rules 4, 13b) */
        sim_device *d = &sim_g.devices[owner->device];
        err = d->sticky;
        if (!free_ordered(seg, NULL) && !d->sticky)
            d->sticky = cudaErrorIllegalAddress;
        import_release(owner, seg);
        pool_reap(owner);
    } else if (!seg->chunk->pool->is_sync) {
        /* rules 4 and 13b: a stream-ordered pointer is freed at once, without synchronizing
         * and without stream ordering: the caller has made every access complete */
        sim_pool *pool = seg->chunk->pool;
        sim_device *d = &sim_g.devices[pool->device];
        err = d->sticky; /* an earlier fault is reported; the memory goes all the same */
        if (!free_ordered(seg, NULL) && !d->sticky)
            d->sticky = cudaErrorIllegalAddress; /* a pending use runs on freed memory */
        pool_release_alloc(seg, NULL, 0);
        pool_reap(pool);
    } else {
        sim_pool *pool = seg->chunk->pool;
        sim_device_sync(pool->device);
        pool_release_alloc(seg, NULL, 0);
        pool_release_to(pool, 0);
        err = sim_g.devices[pool->device].sticky;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemGetInfo);
    if (err)
        return sim_ret(err);
    if (!free_bytes || !total)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_device *d = sim_dev(sim_current_device());
    if (!d) {
        err = cudaErrorInvalidDevice;
    } else if (d->sticky) {
        err = d->sticky;
    } else {
        *free_bytes = d->capacity - d->reserved;
        *total = d->capacity;
    }
    sim_unlock();
    return sim_ret(err);
}

/* ---- API: pinned host memory (plain host memory here) ---- */

static cudaError_t host_alloc(sim_api api, void **ptr, size_t size, unsigned flags)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    if (!ptr || flags > (cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    int dev = sim_current_device();
    sim_device *d = sim_dev(dev);
    err = !d ? cudaErrorInvalidDevice : d->sticky;
    sim_unlock();
    if (err)
        return sim_ret(err); /* pinned memory is the context's */
    void *p = NULL;
    if (size && posix_memalign(&p, 4096, size) != 0)
        return sim_ret(cudaErrorMemoryAllocation);
    if (p) {
        sim_lock();
        bool ok = sim_host_add(p, size, dev, false); /* whose cudaDeviceReset takes it */
        sim_unlock();
        if (!ok) {
            free(p);
            return sim_ret(cudaErrorMemoryAllocation);
        }
    }
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return host_alloc(SIM_API_cudaMallocHost, ptr, size, 0);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    return host_alloc(SIM_API_cudaHostAlloc, pHost, size, flags);
}

cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t err = sim_enter(SIM_API_cudaFreeHost);
    if (err || (err = sim_graph_unsafe_call())) /* a free that synchronizes, on a GPU */
        return sim_ret(err);
    if (!ptr)
        return cudaSuccess;
    sim_lock();
    bool ok = sim_host_remove_pinned(ptr);
    sim_device *d = sim_dev_ready(sim_current_device());
    err = d ? d->sticky : cudaSuccess; /* reported; the memory goes all the same */
    sim_unlock();
    if (!ok)
        return sim_ret(cudaErrorInvalidValue);
    free(ptr);
    return sim_ret(err);
}

/* ---- API: pools ---- */

static bool props_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolCreate);
    if (err)
        return sim_ret(err);
    if (!memPool || !props || props->allocType != cudaMemAllocationTypePinned ||
        props->location.type != cudaMemLocationTypeDevice || props->win32SecurityAttributes ||
        !props_zero(props->reserved, sizeof props->reserved))
        return sim_ret(cudaErrorInvalidValue);
    if (props->handleTypes != cudaMemHandleTypeNone &&
        props->handleTypes != cudaMemHandleTypePosixFileDescriptor)
        return sim_ret(cudaErrorNotSupported); /* the one handle type the devices report */
    sim_lock();
    sim_device *d = sim_dev(props->location.id);
    sim_pool *p = NULL;
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else if (!(p = pool_new(props->location.id, false, false)))
        err = cudaErrorMemoryAllocation;
    else if (props->handleTypes == cudaMemHandleTypePosixFileDescriptor && !ipc_init(p)) {
        pool_free(p);
        err = cudaErrorMemoryAllocation;
    }
#if CUDART_VERSION >= 12020
    else
        p->max_size = props->maxSize;
#endif
    sim_unlock();
    if (err)
        return sim_ret(err);
    *memPool = (cudaMemPool_t)p;
    return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolDestroy);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    if (!p || p->is_default) {
        err = cudaErrorInvalidValue;
    } else {
        sim_device *d = &sim_g.devices[p->device];
        err = d->sticky; /* reported; the pool goes all the same */
        if (d->current_pool == p)
            d->current_pool = d->default_pool;
        /* rule 7: returns at once; the memory goes when nothing is outstanding */
        p->destroyed = true;
        pool_reap(p);
    }
    sim_unlock();
    return sim_ret(err);
}

static cudaError_t device_pool(sim_api api, cudaMemPool_t *out, int device, bool current)
{
    cudaError_t err = sim_enter(api);
    if (err)
        return sim_ret(err);
    if (!out)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_device *d = sim_dev(device);
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (d->sticky)
        err = d->sticky;
    else
        *out = (cudaMemPool_t)(current ? d->current_pool : d->default_pool);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    return device_pool(SIM_API_cudaDeviceGetDefaultMemPool, memPool, device, false);
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    return device_pool(SIM_API_cudaDeviceGetMemPool, memPool, device, true);
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    cudaError_t err = sim_enter(SIM_API_cudaDeviceSetMemPool);
    if (err)
        return sim_ret(err);
    sim_lock();
    sim_device *d = sim_dev(device);
    sim_pool *p = pool_resolve(memPool);
    if (!d)
        err = cudaErrorInvalidDevice;
    else if (!p || p->device != device || p->imported)
        err = cudaErrorInvalidValue;
    else if (d->sticky)
        err = d->sticky;
    else
        d->current_pool = p;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolSetAttribute);
    if (err || (err = sim_graph_unsafe_call())) /* potentially unsafe during a capture */
        return sim_ret(err);
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    if (!p) {
        err = cudaErrorInvalidValue;
    } else if (sim_g.devices[p->device].sticky) {
        err = sim_g.devices[p->device].sticky;
    } else {
        int flag = *(int *)value;
        uint64_t v64 = 0;
        switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies: p->reuse_follow = flag != 0; break;
        case cudaMemPoolReuseAllowOpportunistic: p->reuse_opportunistic = flag != 0; break;
        case cudaMemPoolReuseAllowInternalDependencies: p->reuse_internal = flag != 0; break;
        case cudaMemPoolAttrReleaseThreshold:
            memcpy(&v64, value, sizeof v64);
            p->release_threshold = v64;
            break;
        case cudaMemPoolAttrReservedMemHigh:
        case cudaMemPoolAttrUsedMemHigh: /* rule 8: only 0, which resets to current */
            memcpy(&v64, value, sizeof v64);
            if (v64 != 0)
                err = cudaErrorInvalidValue;
            else if (attr == cudaMemPoolAttrReservedMemHigh)
                p->reserved_high = p->reserved;
            else
                p->used_high = p->used;
            break;
        default: err = cudaErrorInvalidValue; break; /* read-only or unknown */
        }
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolGetAttribute);
    if (err || (err = sim_graph_unsafe_call())) /* potentially unsafe during a capture */
        return sim_ret(err);
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    int flag = -1;
    uint64_t v64 = 0;
    if (!p) {
        err = cudaErrorInvalidValue;
    } else if (sim_g.devices[p->device].sticky) {
        err = sim_g.devices[p->device].sticky;
    } else {
        switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies: flag = p->reuse_follow; break;
        case cudaMemPoolReuseAllowOpportunistic: flag = p->reuse_opportunistic; break;
        case cudaMemPoolReuseAllowInternalDependencies: flag = p->reuse_internal; break;
        case cudaMemPoolAttrReleaseThreshold: v64 = p->release_threshold; break;
        case cudaMemPoolAttrReservedMemCurrent: v64 = p->reserved; break;
        case cudaMemPoolAttrReservedMemHigh: v64 = p->reserved_high; break;
        case cudaMemPoolAttrUsedMemCurrent: v64 = p->used; break;
        case cudaMemPoolAttrUsedMemHigh: v64 = p->used_high; break;
        default: err = cudaErrorInvalidValue; break;
        }
    }
    sim_unlock();
    if (err)
        return sim_ret(err);
    if (flag >= 0)
        *(int *)value = flag;
    else
        memcpy(value, &v64, sizeof v64);
    return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolTrimTo);
    if (err || (err = sim_graph_unsafe_call())) /* potentially unsafe during a capture */
        return sim_ret(err);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    if (!p)
        err = cudaErrorInvalidValue;
    else if (sim_g.devices[p->device].sticky)
        err = sim_g.devices[p->device].sticky;
    else
        pool_release_to(p, minBytesToKeep); /* rule 13: unobserved frees stay outstanding */
    sim_unlock();
    return sim_ret(err);
}

/* Grants each listed device access to the pool's memory, all or none: every descriptor is
 * checked before any applies. A grant reaches the pool's existing and later allocations alike
 * (the Programming Guide: pool accessibility follows cudaMemPoolSetAccess, not
 * cudaDeviceEnablePeerAccess). Refused: a location that is not a device or a bad ordinal
 * (cudaErrorInvalidDevice), flags outside cudaMemAccessFlags or anything but ProtReadWrite for the
 * owning device (cudaErrorInvalidValue), and read or write access for a device that
 * cudaDeviceCanAccessPeer says cannot reach the owner (cudaErrorNotSupported; without
 * CUDASIM_PEER_ACCESS=1, every other device). */
cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                 size_t count)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolSetAccess);
    if (err)
        return sim_ret(err);
    if (count && !descList)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    if (!p)
        err = cudaErrorInvalidValue;
    else if (sim_g.devices[p->device].sticky)
        err = sim_g.devices[p->device].sticky;
    for (size_t i = 0; !err && i < count; i++) {
        const struct cudaMemAccessDesc *a = &descList[i];
        if (a->location.type != cudaMemLocationTypeDevice || !sim_dev(a->location.id))
            err = cudaErrorInvalidDevice;
        else if (a->flags != cudaMemAccessFlagsProtNone && a->flags != cudaMemAccessFlagsProtRead &&
                 a->flags != cudaMemAccessFlagsProtReadWrite)
            err = cudaErrorInvalidValue;
        else if (a->location.id == p->device && a->flags != cudaMemAccessFlagsProtReadWrite)
            err = cudaErrorInvalidValue; /* the owning device always keeps read-write */
        else if (a->location.id != p->device && a->flags != cudaMemAccessFlagsProtNone &&
                 !sim_peers_possible())
            err = cudaErrorNotSupported;  /* cudaDeviceCanAccessPeer says 0 for every pair */
    }
    for (size_t i = 0; !err && i < count; i++)
        p->access[descList[i].location.id] = (unsigned char)descList[i].flags;
    sim_unlock();
    return sim_ret(err);
}

/* What cudaMemPoolSetAccess granted: the owning device read-write, others ProtNone until
 * granted. */
cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                 struct cudaMemLocation *location)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolGetAccess);
    if (err)
        return sim_ret(err);
    if (!flags || !location)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    if (!p || location->type != cudaMemLocationTypeDevice)
        err = cudaErrorInvalidValue;
    else if (sim_g.devices[p->device].sticky)
        err = sim_g.devices[p->device].sticky;
    else if (!sim_dev(location->id))
        err = cudaErrorInvalidDevice;
    else
        f = (enum cudaMemAccessFlags)p->access[location->id];
    sim_unlock();
    if (err)
        return sim_ret(err);
    *flags = f;
    return cudaSuccess;
}

/* ---- API: interprocess sharing (cudaMemHandleTypePosixFileDescriptor) ----
 *
 * See "IPC: shareable pools' files" above. What CUDA forbids is refused with the error the
 * Runtime API documents for these calls, cudaErrorInvalidValue (cudaErrorMemoryAllocation, its
 * out of memory, when the host runs out of file descriptors or export slots); outputs are left
 * untouched on error. */

/* A new descriptor of the pool's file (dup'ed, not close-on-exec: it may be handed to a child
 * across exec as well as over a Unix socket); the caller owns and closes it. Refused: a pool
 * not created with cudaMemHandleTypePosixFileDescriptor (an imported one included), another
 * handle type, flags other than 0, a NULL output. */
cudaError_t cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
                                               enum cudaMemAllocationHandleType handleType,
                                               unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolExportToShareableHandle);
    if (err)
        return sim_ret(err);
    if (!shareableHandle || flags != 0 || handleType != cudaMemHandleTypePosixFileDescriptor)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    int fd = -1;
    if (!p || !p->shareable)
        err = cudaErrorInvalidValue;
    else if (sim_g.devices[p->device].sticky)
        err = sim_g.devices[p->device].sticky;
    else if ((fd = dup(p->ipc_fd)) < 0)
        err = cudaErrorMemoryAllocation;
    sim_unlock();
    if (err)
        return sim_ret(err);
    *(int *)shareableHandle = fd;
    return cudaSuccess;
}

/* The handle is the descriptor itself, passed by value ((void *)(intptr_t)fd), as the Programming
 * Guide shows; the caller may close it afterwards (the pool keeps its own). The imported pool is
 * on the exporter's device, accessible from it alone until cudaMemPoolSetAccess; it makes no
 * allocations (cudaMallocFromPoolAsync and cudaDeviceSetMemPool refuse it), reports no memory of
 * its own (the exporter's device counts the pages, once), and is destroyed with
 * cudaMemPoolDestroy. Refused: another handle type, flags, a descriptor that is not a shareable
 * cudasim pool's, a device this process does not have, more than 64 pools imported at once. */
cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t *memPool, void *shareableHandle,
                                                 enum cudaMemAllocationHandleType handleType,
                                                 unsigned int flags)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolImportFromShareableHandle);
    if (err)
        return sim_ret(err);
    if (!memPool || flags != 0 || handleType != cudaMemHandleTypePosixFileDescriptor)
        return sim_ret(cudaErrorInvalidValue);
    int given = (int)(intptr_t)shareableHandle;
    struct stat st;
    size_t hdr = ipc_header_size();
    if (given < 0 || fstat(given, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size < hdr)
        return sim_ret(cudaErrorInvalidValue);
    int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_ipc_header *h = mmap(NULL, hdr, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *window = MAP_FAILED;
    if (h != MAP_FAILED && h->magic == SIM_IPC_MAGIC &&
        (size_t)st.st_size == hdr + h->arena_size)
        window = mmap(NULL, h->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                      fd, (off_t)hdr);
    if (window == MAP_FAILED) {
        if (h != MAP_FAILED)
            munmap(h, hdr);
        close(fd);
        return sim_ret(cudaErrorInvalidValue);
    }
    sim_lock();
    int dev = (int)h->device;
    sim_pool *p = NULL;
    if (h->device < 0 || h->device >= SIM_MAX_DEVICES || !sim_dev(dev))
        err = cudaErrorInvalidValue;
    else if (sim_g.devices[dev].sticky)
        err = sim_g.devices[dev].sticky;
    else if (n_imported == SIM_MAX_IMPORTS || !(p = pool_new(dev, false, false)))
        err = cudaErrorMemoryAllocation;
    if (!err) {
        p->imported = true;
        p->ipc_fd = fd;
        p->ipc = h;
        p->window = window;
        p->window_size = h->arena_size;
        imported_pools[n_imported++] = p;
    }
    sim_unlock();
    if (err) {
        munmap(window, h->arena_size);
        munmap(h, hdr);
        close(fd);
        return sim_ret(err);
    }
    *memPool = (cudaMemPool_t)p;
    return cudaSuccess;
}

/* 64 bytes naming the block (the pool's identity, a slot of its export table, the serial of
 * this export, offset and size). Refused: a pointer that is not the start of a live allocation
 * of a shareable pool of this process (an imported block cannot be exported again). Exporting
 * the same block twice gives the same data. */
cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolExportPointer);
    if (err)
        return sim_ret(err);
    if (!exportData || !ptr)
        return sim_ret(cudaErrorInvalidValue);
    sim_lock();
    sim_pool *pool = pool_of(ptr);
    sim_seg *seg = pool && !pool->imported ? pool_alloc_lookup(pool, ptr) : NULL;
    sim_export_data data = {0};
    if (!seg || !pool->shareable) {
        err = cudaErrorInvalidValue;
    } else if (sim_g.devices[pool->device].sticky) {
        err = sim_g.devices[pool->device].sticky;
    } else {
        struct sim_ipc_header *h = pool->ipc;
        if (!seg->export_slot) {
            uint32_t slot;
            if (pool->n_free_slots)
                slot = pool->free_slots[--pool->n_free_slots];
            else if (h->slots_used < SIM_IPC_SLOTS)
                slot = (uint32_t)h->slots_used++;
            else
                err = cudaErrorMemoryAllocation; /* the table is full */
            if (!err) {
                sim_ipc_slot *x = &h->slots[slot];
                uint64_t serial = ++h->next_serial;
                /* seqlock order: a reader that sees the new serial twice sees these fields */
                atomic_store(&x->live, 0);
                atomic_store(&x->serial, serial);
                atomic_store(&x->offset, (uint64_t)(seg->addr - sim_g.devices[pool->device].arena));
                atomic_store(&x->size, seg->size);
                atomic_store(&x->live, 1);
                seg->export_slot = slot + 1;
                seg->export_serial = serial;
            }
        }
        if (!err) {
            const sim_ipc_slot *x = &h->slots[seg->export_slot - 1];
            data = (sim_export_data){.magic = SIM_IPC_MAGIC, .pool_id = h->pool_id,
                                     .serial = seg->export_serial,
                                     .offset = atomic_load(&x->offset),
                                     .size = atomic_load(&x->size),
                                     .slot = seg->export_slot - 1};
        }
    }
    sim_unlock();
    if (err)
        return sim_ret(err);
    memcpy(exportData, &data, sizeof data);
    return cudaSuccess;
}

/* The block at window + its offset, reading what the exporter wrote and writing what it reads.
 * Freed with cudaFree or cudaFreeAsync here, which ends this process's import only. Refused: a
 * pool that is not imported (a pool of the wrong handle type, or the exporter's own), data of
 * another pool, data that is not an export, a block the exporter has freed since it exported
 * it, a block this pool has imported already and not freed. Using an imported block after the
 * exporter freed it is a bad address (a device fault, as on a GPU where the exporter's free
 * unmaps it). */
cudaError_t cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                     struct cudaMemPoolPtrExportData *exportData)
{
    cudaError_t err = sim_enter(SIM_API_cudaMemPoolImportPointer);
    if (err)
        return sim_ret(err);
    if (!ptr || !exportData)
        return sim_ret(cudaErrorInvalidValue);
    sim_export_data data;
    memcpy(&data, exportData, sizeof data);
    sim_lock();
    sim_pool *p = pool_resolve(memPool);
    uint64_t off = 0, size = 0;
    void *out = NULL;
    if (!p || !p->imported || data.magic != SIM_IPC_MAGIC || data.pool_id != p->ipc->pool_id ||
        !ipc_slot_live(p->ipc, data.slot, data.serial, &off, &size) || off != data.offset ||
        size != data.size || off + size > p->window_size ||
        sim_map_get(&p->allocs, p->window + off, SIM_H_ALLOC)) {
        err = cudaErrorInvalidValue;
    } else if (sim_g.devices[p->device].sticky) {
        err = sim_g.devices[p->device].sticky;
    } else {
        sim_seg *seg = calloc(1, sizeof *seg);
        if (!seg) {
            err = cudaErrorMemoryAllocation;
        } else {
            seg->addr = p->window + off;
            seg->size = size;
            seg->allocated = true;
            seg->export_slot = data.slot + 1;
            seg->export_serial = data.serial;
            sim_map_put(&p->allocs, seg->addr, SIM_H_ALLOC, seg);
            p->live_allocs++;
            out = seg->addr;
        }
    }
    sim_unlock();
    if (err)
        return sim_ret(err);
    *ptr = out;
    return cudaSuccess;
}
