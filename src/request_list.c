/* The live blocks of a request: a list per request under its spin lock, kept apart from
 * request.c so that sp_free (alloc.c) and the pool's destroy (pool.c), which must drop a freed
 * block from its request or an open request's structure, call down into a leaf instead of up
 * into the request API. */
#include <stdlib.h>

#include "request_list.h"


static void link_locked(sp_req *r, sp_block *b)
{
    sp_spin_assert_owner(&r->lock);
    b->req = r;
    SP_LIST_PUSH(r->blocks, b, req_prev, req_next);
    r->live_requested += b->requested;
    if (r->live_requested > r->st.requested_peak)
        r->st.requested_peak = r->live_requested;
}

bool sp__req_link(sp_req *r, sp_block *b, bool missed)
{
    sp_spin_lock(&r->lock);
    if (r->ended) {
        sp_spin_unlock(&r->lock);
        return false;
    }
    link_locked(r, b);
    r->st.allocs++;
    r->st.misses += missed;
    r->st.requested_total += b->requested;
    sp_spin_unlock(&r->lock);
    return true;
}

void sp__req_mark_ended(sp_req *r)
{
    sp_spin_lock(&r->lock);
    r->ended = true;
    sp_spin_unlock(&r->lock);
}

static void unlink_locked(sp_req *r, sp_block *b)
{
    sp_spin_assert_owner(&r->lock);
    SP_LIST_UNLINK(r->blocks, b, req_prev, req_next);
    b->req = NULL;
    b->req_prev = b->req_next = NULL;
    r->live_requested -= b->requested;
}

sp_req *sp__req_forget(sp_block *b)
{
    sp_req *r = b->req;
    sp_spin_lock(&r->lock);
    unlink_locked(r, b);
    r->st.frees++;
    sp_spin_unlock(&r->lock);
    return r;
}

void sp__req_unforget(sp_req *r, sp_block *b)
{
    sp_spin_lock(&r->lock);
    link_locked(r, b);
    r->st.frees--;
    sp_spin_unlock(&r->lock);
}

size_t sp__req_take(sp_req *r, void **ptrs, size_t cap, uint64_t *bytes)
{
    size_t n = 0;
    sp_spin_lock(&r->lock);
    while (r->blocks && n < cap) {
        sp_block *b = r->blocks;
        ptrs[n++] = b->ptr;
        *bytes += b->requested;
        unlink_locked(r, b);
    }
    sp_spin_unlock(&r->lock);
    return n;
}

void sp__req_free_all(sp_req **table)
{
    for (size_t i = 0; i < SP_REQ_BUCKETS; i++)
        while (table[i]) {
            sp_req *r = table[i];
            table[i] = r->next;
            free(r);
        }
}
