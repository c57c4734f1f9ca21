/* The pointer map (ptrmap.c): pointer -> block for every block a runtime holds, in shards
 * under spin locks. A leaf. */
#ifndef SP_PTRMAP_H
#define SP_PTRMAP_H

#include "block.h"

/* ---- pointer map (ptrmap.c): pointer -> block for every block a runtime holds ---- */

/* shards by the top bits of a pointer's hash; the low bits index the slots */
#define SP_PTRMAP_SHARD_BITS 6
#define SP_PTRMAP_SHARDS (1 << SP_PTRMAP_SHARD_BITS)
/* Pointers lately removed from a shard (their memory merged away or given back to the driver),
 * so that freeing one again is told as a double free, not as an unknown pointer: direct-mapped,
 * a newer pointer with the same slot pushes an older one out. */
#define SP_PTRMAP_GONE 16

typedef struct {
    sp_spin lock;
    struct sp_ptrmap_slot *slots;
    size_t cap, len;
    const void *gone[SP_PTRMAP_GONE];
} sp_ptrmap_shard;

typedef struct {
    sp_ptrmap_shard shards[SP_PTRMAP_SHARDS];
} sp_ptrmap;

/* m empty, its shard locks set up: once, before its first use */
void sp__ptrmap_init(sp_ptrmap *m);
int sp__ptrmap_insert(sp_ptrmap *m, sp_block *b);
void sp__ptrmap_remove(sp_ptrmap *m, const void *ptr);
/* Looks ptr up and, if it is a live block of `pool`, marks it cached; all under the shard's
 * lock so that the block cannot go away meanwhile. Returns SP_OK, SP_ERR_BAD_POINTER,
 * SP_ERR_DOUBLE_FREE or SP_ERR_WRONG_POOL; *out gets the block (also a BYPASS one, which is
 * removed from the map). */
int sp__ptrmap_take_for_free(sp_ptrmap *m, const void *ptr, const sp_pool *pool, sp_block **out);
void sp__ptrmap_free(sp_ptrmap *m);
/* Calls fn with ptr's block (NULL if unknown), or with every block, under the shard's lock:
 * fn takes no lock and allocates nothing (introspect.c). */
void sp__ptrmap_visit(sp_ptrmap *m, const void *ptr, void (*fn)(sp_block *, void *), void *arg);
void sp__ptrmap_each(sp_ptrmap *m, void (*fn)(sp_block *, void *), void *arg);
/* What ptr is (sp_pointer_info), and for a live block the cache of the stream that allocated
 * it (sp_free_any frees on that stream), read under the shard's lock. */
typedef struct {
    sp_ptr_info info;
    sp_stream_cache *owner;
} sp_ptr_lookup;
sp_ptr_lookup sp__ptrmap_lookup(sp_ptrmap *m, const void *ptr);

#endif /* SP_PTRMAP_H */
