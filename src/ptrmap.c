/* Pointer -> block for every block a runtime holds, live or cached: sp_free's lookup, and what
 * tells an unknown pointer, a double free and a pointer of another pool apart. Sharded by
 * pointer hash, one spin lock per shard, open addressing with backward-shift deletion. Each
 * shard also remembers the pointers it lately lost (`gone`), so that a second free of a block
 * whose memory has left the pool is still a double free; only insertions, removals and the
 * unknown-pointer answer touch it, never a free that finds its block. */
#include <stdlib.h>

#include "ptrmap.h"
#include "cache.h"

struct sp_ptrmap_slot {
    const void *key;
    sp_block *block;
};

static uint64_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    return x;
}

static sp_ptrmap_shard *shard_of(sp_ptrmap *m, uint64_t h)
{
    return &m->shards[h >> (64 - SP_PTRMAP_SHARD_BITS)];
}

static size_t find_slot(const sp_ptrmap_shard *s, const void *key, uint64_t h)
{
    size_t mask = s->cap - 1;
    size_t i = (size_t)h & mask;
    while (s->slots[i].key && s->slots[i].key != key)
        i = (i + 1) & mask;
    return i;
}

/* The slot in `gone` of a pointer with hash h: bits the shard index and the slot index (the
 * low bits) do not use up first. */
static size_t gone_slot(uint64_t h)
{
    return (size_t)(h >> 40) % SP_PTRMAP_GONE;
}

static int grow(sp_ptrmap_shard *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    struct sp_ptrmap_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return SP_ERR_NO_HOST_MEMORY;
    struct sp_ptrmap_slot *old = s->slots;
    size_t old_cap = s->cap;
    s->slots = slots;
    s->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            s->slots[find_slot(s, old[i].key, hash_ptr(old[i].key))] = old[i];
    free(old);
    return SP_OK;
}

int sp__ptrmap_insert(sp_ptrmap *m, sp_block *b)
{
    uint64_t h = hash_ptr(b->ptr);
    sp_ptrmap_shard *s = shard_of(m, h);
    int rc = SP_OK;
    sp_spin_lock(&s->lock);
    if ((s->len + 1) * 4 > s->cap * 3)
        rc = grow(s);
    if (rc == SP_OK) {
        size_t i = find_slot(s, b->ptr, h);
        if (!s->slots[i].key)
            s->len++;
        s->slots[i] = (struct sp_ptrmap_slot){b->ptr, b};
        if (s->gone[gone_slot(h)] == b->ptr) /* a block again: no longer a freed pointer */
            s->gone[gone_slot(h)] = NULL;
    }
    sp_spin_unlock(&s->lock);
    return rc;
}

static void remove_at(sp_ptrmap_shard *s, size_t i)
{
    size_t mask = s->cap - 1;
    s->gone[gone_slot(hash_ptr(s->slots[i].key))] = s->slots[i].key;
    s->slots[i].key = NULL;
    s->len--;
    for (size_t j = (i + 1) & mask; s->slots[j].key; j = (j + 1) & mask) {
        size_t home = (size_t)hash_ptr(s->slots[j].key) & mask;
        bool between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!between) {
            s->slots[i] = s->slots[j];
            s->slots[j].key = NULL;
            i = j;
        }
    }
}

void sp__ptrmap_remove(sp_ptrmap *m, const void *ptr)
{
    uint64_t h = hash_ptr(ptr);
    sp_ptrmap_shard *s = shard_of(m, h);
    sp_spin_lock(&s->lock);
    if (s->cap) {
        size_t i = find_slot(s, ptr, h);
        if (s->slots[i].key)
            remove_at(s, i);
    }
    sp_spin_unlock(&s->lock);
}

int sp__ptrmap_take_for_free(sp_ptrmap *m, const void *ptr, const sp_pool *pool, sp_block **out)
{
    uint64_t h = hash_ptr(ptr);
    sp_ptrmap_shard *s = shard_of(m, h);
    int rc = SP_ERR_BAD_POINTER;
    sp_spin_lock(&s->lock);
    size_t i = s->cap ? find_slot(s, ptr, h) : 0;
    sp_block *b = s->cap ? s->slots[i].block : NULL;
    if (b && s->slots[i].key) {
        /* Every way out of LIVE is here, under the shard's lock, so a load and a store do what a
         * compare-exchange would, one locked instruction fewer per free. The acquire pairs with
         * the release store of the alloc that made the block LIVE. */
        int state = atomic_load_explicit(&b->state, memory_order_acquire);
        if (b->pool != pool) {
            rc = SP_ERR_WRONG_POOL;
        } else if (state == SP_BLOCK_LIVE) {
            atomic_store_explicit(&b->state, SP_BLOCK_CACHED, memory_order_relaxed);
            rc = SP_OK;
        } else if (state == SP_BLOCK_BYPASS) {
            remove_at(s, i); /* goes straight back to the driver */
            rc = SP_OK;
        } else {
            rc = SP_ERR_DOUBLE_FREE;
        }
        *out = b;
    } else if (s->gone[gone_slot(h)] == ptr) {
        rc = SP_ERR_DOUBLE_FREE; /* its block is gone, merged or back with the driver */
    }
    sp_spin_unlock(&s->lock);
    return rc;
}

void sp__ptrmap_init(sp_ptrmap *m)
{
    for (int i = 0; i < SP_PTRMAP_SHARDS; i++) {
        sp_spin_init(&m->shards[i].lock, SP_RANK_SPIN, "ptrmap shard->lock");
        m->shards[i].slots = NULL;
        m->shards[i].cap = m->shards[i].len = 0;
    }
}

void sp__ptrmap_free(sp_ptrmap *m)
{
    for (int i = 0; i < SP_PTRMAP_SHARDS; i++) {
        free(m->shards[i].slots);
        m->shards[i].slots = NULL;
        m->shards[i].cap = m->shards[i].len = 0;
    }
}

/* introspect.c's reads: fn sees each block under its shard's lock, so that a live block cannot
 * be freed meanwhile; fn must take no lock and allocate nothing. */
void sp__ptrmap_visit(sp_ptrmap *m, const void *ptr, void (*fn)(sp_block *, void *), void *arg)
{
    uint64_t h = hash_ptr(ptr);
    sp_ptrmap_shard *s = shard_of(m, h);
    sp_spin_lock(&s->lock);
    size_t i = s->cap ? find_slot(s, ptr, h) : 0;
    fn(s->cap && s->slots[i].key ? s->slots[i].block : NULL, arg);
    sp_spin_unlock(&s->lock);
}

void sp__ptrmap_each(sp_ptrmap *m, void (*fn)(sp_block *, void *), void *arg)
{
    for (int k = 0; k < SP_PTRMAP_SHARDS; k++) {
        sp_ptrmap_shard *s = &m->shards[k];
        sp_spin_lock(&s->lock);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i].key)
                fn(s->slots[i].block, arg);
        sp_spin_unlock(&s->lock);
    }
}

/* ---- what a pointer is: sp_pointer_info and sp_free_any ---- */

/* Under the shard's lock: a live block cannot be freed meanwhile (the free marks it under this
 * lock), and its fields were written before it was marked live. */
static void read_block(sp_block *b, void *arg)
{
    sp_ptr_lookup *l = arg;
    if (!b)
        return;
    int state = atomic_load_explicit(&b->state, memory_order_acquire);
    l->info.pool = b->pool;
    if (state == SP_BLOCK_LIVE || state == SP_BLOCK_BYPASS) {
        l->info.state = SP_POINTER_LIVE;
        l->info.requested = b->requested;
        l->info.usable = b->size;
        l->info.stream = b->owner ? b->owner->key.stream : b->bypass_stream;
        l->owner = b->owner;
    } else {
        l->info.state = SP_POINTER_CACHED; /* its fields may change under another lock */
    }
}

sp_ptr_lookup sp__ptrmap_lookup(sp_ptrmap *m, const void *ptr)
{
    sp_ptr_lookup l = {{.size = sizeof l.info}, NULL};
    sp__ptrmap_visit(m, ptr, read_block, &l);
    return l;
}
