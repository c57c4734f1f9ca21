/* A block: the piece of a segment (or a capture's own driver allocation) that every layer
 * passes around: live, cached in a stream's bin, or a free range of its segment. */
#ifndef SP_BLOCK_H
#define SP_BLOCK_H

#include "classes.h"

enum { SP_BLOCK_LIVE = 1, SP_BLOCK_CACHED, SP_BLOCK_BYPASS /* live, graph capture: no cache */ };

/* How an allocation was served (alloc.c decides it where the stats count it; the trace records
 * it): each outcome but REUSE moves one counter, so the trace's counts equal the stats'. */
typedef enum {
    SP_OUTCOME_HIT,    /* the stream's own cache: same_stream_hits */
    SP_OUTCOME_REUSE,  /* a miss served by freed memory already known usable, no call */
    SP_OUTCOME_STEAL,  /* another stream's memory settled by this miss: cross_stream_reuses */
    SP_OUTCOME_WAIT,   /* another stream's memory behind a stream wait: cross_stream_waits */
    SP_OUTCOME_FRESH,  /* a new slab or segment: one of driver_allocs */
    SP_OUTCOME_BYPASS, /* a capture's own driver allocation: capture_bypasses */
} sp_outcome;

/* A piece of a segment (or, for a graph-capture bypass, one whole driver allocation): live, a
 * small block cached in a stream's bin, or a free range of its segment. Owned by one pool. */
typedef struct sp_block {
    void *ptr;
    size_t size;               /* small: its class size; large and free ranges: bytes */
    size_t requested;          /* of the live allocation */
    uint32_t cls;              /* small blocks: the class; SP_CLASS_COUNT otherwise */
    atomic_int state;
    sp_pool *pool;
    /* the tag of a free block or range: the cache of the stream that freed it and that cache's
     * free count at the free. tag NULL: settled, usable by any stream. */
    sp_stream_cache *tag;
    uint64_t epoch;
    sp_segment *seg;           /* NULL: a bypass block, its own driver allocation */
    struct sp_block *addr_prev, *addr_next; /* neighbours in the segment, by address */
    bool is_free;              /* a free range in its segment's heap (under the heap's lock) */
    /* a free range: the heap's coalesce that settled it by asking (sp_heap.coalesces), so that
     * the take of the same miss counts a cross-stream reuse; 0 if none */
    uint32_t asked_in;
    struct sp_block *prev, *next; /* in a stream bin or a heap's free bin */
    /* introspect.c: who allocated a live block, and who last freed it (set under that cache's
     * lock, read under the ptrmap shard's lock while the block is live) */
    sp_stream_cache *owner;    /* the allocating stream's cache; NULL for a capture bypass */
    sp_stream_cache *freed_by; /* the cache of its latest free: a steal when another takes it */
    union {                    /* within the second cache line, which the hot path touches */
        uint64_t alloc_seq;    /* owner set: its allocation count when this was allocated */
        cudaStream_t bypass_stream; /* owner NULL: the capturing stream it was allocated on */
    };
    /* request.c: the open request that allocated this live block (NULL: none), and its
     * neighbours in that request's list (request_list.c). Past the two cache lines the hot path
     * uses: sp_free reads `req` only in a pool that has had a request (requests_used). */
    struct sp_req *req;
    struct sp_block *req_prev, *req_next;
} sp_block;

/* Doubly linked lists threaded through their elements, as BSD's <sys/queue.h> LIST: `head` is
 * the list's first element (an lvalue), `prev` and `next` name the element's link fields, so
 * that one element can sit on several lists (a block in a bin and in its request, a segment in
 * its heap). The _TAIL forms keep a last element too (`tail`, an lvalue), in the same branches. */
#define SP_LIST_PUSH(head, e, prev, next) SP__LIST_PUSH(head, e, prev, next, (void)0)
#define SP_LIST_UNLINK(head, e, prev, next) SP__LIST_UNLINK(head, e, prev, next, (void)0)
#define SP_LIST_PUSH_TAIL(head, tail, e, prev, next)                                               \
    SP__LIST_PUSH(head, e, prev, next, (tail) = (e))
#define SP_LIST_UNLINK_TAIL(head, tail, e, prev, next)                                             \
    SP__LIST_UNLINK(head, e, prev, next, (tail) = (e)->prev)

/* `if_last`: what else is done when e becomes (push) or was (unlink) the last element */
#define SP__LIST_PUSH(head, e, prev, next, if_last)                                                \
    do {                                                                                           \
        (e)->prev = NULL;                                                                          \
        (e)->next = (head);                                                                        \
        if ((head))                                                                                \
            (head)->prev = (e);                                                                    \
        else                                                                                       \
            if_last;                                                                               \
        (head) = (e);                                                                              \
    } while (0)

#define SP__LIST_UNLINK(head, e, prev, next, if_last)                                              \
    do {                                                                                           \
        if ((e)->prev)                                                                             \
            (e)->prev->next = (e)->next;                                                           \
        else                                                                                       \
            (head) = (e)->next;                                                                    \
        if ((e)->next)                                                                             \
            (e)->next->prev = (e)->prev;                                                           \
        else                                                                                       \
            if_last;                                                                               \
    } while (0)

#endif /* SP_BLOCK_H */
