/* The lifetime guard of exported blocks (share_guard.c): the table an exporter shares with one
 * importing process, the liveness of that process, and the blocks the exporter freed that an
 * importer still holds. No CUDA call: the tables are plain shared memory, so that both sides'
 * rules are the same code. Below the allocator (sp_free asks it), above the pointer map. */
#ifndef SP_SHARE_GUARD_H
#define SP_SHARE_GUARD_H

#include "pool.h"

/* ---- the shared table: one per export, mapped by the exporter and its importer ----
 * A slot per exported block, one 64-bit word each:
 *   bits 0-30   the importer's live imports of the block
 *   bit 31      CLOSED: the exporter freed the block (or the slot was never used)
 *   bits 32-63  the slot's generation, new at every export into it (0: never used)
 * The importer claims an import with a compare-exchange that fails on another generation or a
 * CLOSED word (SP_ERR_STALE_HANDLE), and releases it with one that checks the generation;
 * the exporter closes the word when it frees the block, and frees it at once only if no
 * import is live (else later, once the count is 0 or the importer is gone). */
#define SP_SHARE_SLOTS 4096u
#define SP_SHARE_MAGIC 0x31455241485350ull /* "PSHARE1" */
#define SP_SLOT_CLOSED ((uint64_t)1 << 31)
#define SP_SLOT_IMPORTS(w) ((w) & (SP_SLOT_CLOSED - 1))
#define SP_SLOT_GEN(w) ((uint32_t)((w) >> 32))

typedef struct sp_share_table {
    uint64_t magic, token;
    uint32_t nslots, device;
    atomic_uint_least64_t releases;       /* bumped by every release of the importer */
    atomic_uint_least64_t slots[];
} sp_share_table;

size_t sp__share_table_bytes(uint32_t nslots);
/* Maps a table the exporter sent (its fd), checking its header. SP_ERR_INVALID if it is none. */
int sp__share_table_map(int fd, sp_share_table **out, size_t *bytes);
void sp__share_table_unmap(sp_share_table *t, size_t bytes);
/* The importer's side of a slot: claim one import of (slot, gen), or release one. */
int sp__share_claim(sp_share_table *t, uint32_t slot, uint32_t gen);
int sp__share_unclaim(sp_share_table *t, uint32_t slot, uint32_t gen);

/* ---- the exporter's side ---- */

struct sp_export {
    sp_pool *pool;
    sp_share_table *table;
    size_t table_bytes;
    int alive_fd;               /* the exporter's end of the liveness pair; -1 once gone */
    bool gone;                  /* the importer closed or died (its end hung up) */
    void *ptrs[SP_SHARE_SLOTS]; /* the block exported in each slot, until freed for good */
    uint32_t high;              /* slots ever used: lookups scan [0, high) */
    struct sp_export *next;
};

/* A new export of pool to one importer: its table (its fd in *table_fd) and liveness pair (the
 * importer's end in *importer_fd), both for the caller to send and close. */
int sp__share_export_new(sp_pool *pool, sp_export **out, int *table_fd, int *importer_fd);
/* The slot of the live block ptr in exp's table (the same slot while it stays exported, a new
 * generation otherwise); SP_ERR_LIMIT if every slot is in use, SP_ERR_IO if the importer is
 * gone. */
int sp__share_export_slot(sp_export *exp, void *ptr, uint32_t *slot, uint32_t *gen);
/* sp_free's question for a pool with exports: 1 if ptr is held for an importer (kept live, to
 * be freed on `stream` by sp_pool_share_poll), 0 if sp_free goes on as usual (its slots closed
 * for good), SP_ERR_DOUBLE_FREE if it is held already. */
int sp__share_hold(sp_pool *pool, void *ptr, cudaStream_t stream);

typedef struct {
    void *ptr;
    cudaStream_t stream;
} sp_share_freed;
/* Takes up to max held blocks whose importers have released them or are gone, into out; the
 * caller frees each (sp_free). Returns how many. */
size_t sp__share_reap(sp_pool *pool, sp_share_freed *out, size_t max);
void sp__share_stats(sp_pool *pool, sp_stats *st);
/* At the pool's end: its exports' tables and sockets. */
void sp__share_free(sp_pool *pool);

#endif /* SP_SHARE_GUARD_H */
