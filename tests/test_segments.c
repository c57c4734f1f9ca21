/* Large ranges carved from segments: exact bytes across split and merge, stream order kept by
 * tags (a gated stream's freed range never reaches another stream early), and a canary stress
 * where several streams split and merge ranges and no live range ever overlaps another or is
 * written before its fence. Portable: the same file runs on a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"

static const size_t KiB = 1024, MiB = (size_t)1 << 20;

typedef sp_fixture fixture; /* fixtures.h */

static sp_pool *pool_with(fixture *f, const char *name, sp_cross_stream_policy policy)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.cross_stream = policy;
    sp_pool *pool;
    SP(sp_pool_create(f->rt, name, &cfg, &pool));
    return pool;
}

/* One 4 MiB segment (whole driver pages) split into two ranges and a free rest, then merged back whole: every figure
 * exact at each step, and the merged range serves the original size again without the driver. */
static void split_and_merge_bytes_are_exact(void **state)
{
    fixture *f = *state;
    sp_pool *pool = pool_with(f, "split", SP_CROSS_STREAM_BALANCED);
    const size_t piece = MiB + 512; /* 1 MiB + 1 rounded to 512 bytes */
    void *whole, *a, *b;
    SP(sp_alloc(pool, &whole, 4 * MiB, fx.a));
    SP(sp_free(pool, whole, fx.a));
    SP(sp_alloc(pool, &a, MiB + 1, fx.a));
    SP(sp_alloc(pool, &b, MiB + 1, fx.a));
    assert_ptr_equal(a, whole);
    assert_ptr_equal(b, (char *)whole + piece);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.segment_bytes, 4 * MiB);
    assert_int_equal(st.held.current, 4 * MiB);
    assert_int_equal(st.requested.current, 2 * (MiB + 1));
    assert_int_equal(st.active.current, 2 * piece);
    assert_int_equal(st.cached.current, 4 * MiB - 2 * piece);
    assert_int_equal(st.inactive_split, 4 * MiB - 2 * piece);
    assert_int_equal(st.largest_free, 4 * MiB - 2 * piece);

    SP(sp_free(pool, a, fx.a)); /* a free range between the segment's start and live b */
    st = stats_of(pool);
    assert_int_equal(st.active.current, piece);
    assert_int_equal(st.inactive_split, 4 * MiB - piece);
    /* a's range is not adjacent to the rest, which stays the largest */
    assert_int_equal(st.largest_free, 4 * MiB - 2 * piece);
    SP(sp_free(pool, b, fx.a)); /* merges with both neighbours */
    st = stats_of(pool);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.cached.current, 4 * MiB);
    assert_int_equal(st.inactive_split, 0); /* nothing live in the segment */
    assert_int_equal(st.largest_free, 4 * MiB);

    SP(sp_alloc(pool, &whole, 4 * MiB, fx.a));
    assert_ptr_equal(whole, a);
    st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.held.peak, 4 * MiB);
    assert_int_equal(st.active.peak, 4 * MiB);
    assert_int_equal(st.largest_free, 0);
    SP(sp_free(pool, whole, fx.a));
    SP(sp_pool_trim(pool, 0));
    st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.segments, 0);
    assert_int_equal(st.driver_frees, 1);
    SP(sp_pool_destroy(pool));
}

/* A range freed on a stream that a gate holds is never handed to another stream before the gate
 * opens: BALANCED and NO_WAIT take fresh memory, WAIT makes the other stream wait (it then
 * cannot run before the gate opens). After the gate, the range moves without a wait. */
static void gated_range_stays_with_its_stream(void **state)
{
    fixture *f = *state;
    for (int policy = 0; policy <= SP_CROSS_STREAM_NO_WAIT; policy++) {
        char name[32];
        snprintf(name, sizeof name, "gated-%d", policy);
        sp_pool *pool = pool_with(f, name, (sp_cross_stream_policy)policy);
        cudaStream_t a = new_stream(), b = new_stream();
        gate *g = gate_new();
        void *pa, *pb, *pc;
        SP(sp_alloc(pool, &pa, 20 * MiB, a));
        CK(cudaStreamSynchronize(a));
        gate_hold(g, a);
        CK(cudaMemsetAsync(pa, 0x3c, 20 * MiB, a)); /* a's pending use of the range */
        SP(sp_free(pool, pa, a));
        SP(sp_alloc(pool, &pb, 20 * MiB, b));
        sp_stats st = stats_of(pool);
        if (policy == SP_CROSS_STREAM_WAIT) {
            assert_ptr_equal(pb, pa);
            assert_int_equal(st.cross_stream_waits, 1);
            assert_int_equal(st.driver_allocs, 1);
            assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady); /* b waits behind a */
        } else {
            assert_ptr_not_equal(pb, pa);
            assert_int_equal(st.cross_stream_waits, 0);
            assert_int_equal(st.driver_allocs, 2);
        }
        gate_open(g);
        CK(cudaStreamSynchronize(a));
        if (policy != SP_CROSS_STREAM_WAIT) { /* now settled: b takes a's range, no wait */
            SP(sp_alloc(pool, &pc, 20 * MiB, b));
            assert_ptr_equal(pc, pa);
            st = stats_of(pool);
            assert_int_equal(st.cross_stream_reuses, 1);
            assert_int_equal(st.cross_stream_waits, 0);
            assert_int_equal(st.driver_allocs, 2);
            SP(sp_free(pool, pc, b));
        }
        SP(sp_free(pool, pb, b));
        drop_stream(f->rt, a);
        drop_stream(f->rt, b);
        SP(sp_pool_destroy(pool));
    }
}

/* Best fit among other streams' free ranges of one size bin asks about (BALANCED) or waits on
 * (WAIT) only the range it takes: a larger range met first in the bin and then beaten by a
 * smaller one must not count as a reuse, nor make the allocating stream wait on its stream's
 * pending work (that wait serializes the allocation behind an unrelated stream). */
static void best_fit_waits_only_on_the_range_it_takes(void **state)
{
    fixture *f = *state;
    for (int policy = SP_CROSS_STREAM_BALANCED; policy <= SP_CROSS_STREAM_WAIT; policy++) {
        char name[32];
        snprintf(name, sizeof name, "best-fit-%d", policy);
        sp_pool *pool = pool_with(f, name, (sp_cross_stream_policy)policy);
        cudaStream_t a = new_stream(), b = new_stream(), c = new_stream();
        const size_t small = 6 * MiB, large = 6 * MiB + 128 * KiB; /* one size bin */
        void *x, *y, *rest, *p;
        SP(sp_alloc(pool, &x, small, a));                 /* a 6 MiB segment */
        SP(sp_alloc(pool, &y, large, b));                 /* an 8 MiB segment ... */
        SP(sp_alloc(pool, &rest, 8 * MiB - large, b));    /* ... used to its end */
        gate *ga = gate_new(), *gb = gate_new();
        if (policy == SP_CROSS_STREAM_WAIT) { /* pending work before each free */
            gate_hold(ga, a);
            gate_hold(gb, b);
        }
        CK(cudaMemsetAsync(x, 0x11, small, a));
        CK(cudaMemsetAsync(y, 0x22, large, b));
        SP(sp_free(pool, x, a));
        SP(sp_free(pool, y, b)); /* y's range is met first in the bin, x's is the best fit */
        if (policy != SP_CROSS_STREAM_WAIT) {
            CK(cudaStreamSynchronize(a));
            CK(cudaStreamSynchronize(b));
        }
        SP(sp_alloc(pool, &p, small, c));
        assert_ptr_equal(p, x);
        sp_stats st = stats_of(pool);
        assert_int_equal(st.driver_allocs, 2);
        if (policy == SP_CROSS_STREAM_WAIT) {
            assert_int_equal(st.cross_stream_waits, 1); /* on a's fence only */
            assert_int_equal(st.cross_stream_reuses, 0);
        } else {
            assert_int_equal(st.cross_stream_reuses, 1);
            assert_int_equal(st.cross_stream_waits, 0);
        }
        gate_open(ga);
        gate_open(gb);
        SP(sp_free(pool, p, c));
        SP(sp_free(pool, rest, b));
        drop_stream(f->rt, a);
        drop_stream(f->rt, b);
        drop_stream(f->rt, c);
        SP(sp_pool_destroy(pool));
    }
}

/* Huge requests (over 8 MiB) never split a segment: a free one at most 25% larger is reused
 * whole; a larger one goes back to the driver before a new segment is taken, so the driver can
 * remap its pages rather than reserve more. Exact bytes at each step. */
static void huge_segments_stay_whole(void **state)
{
    fixture *f = *state;
    sp_pool *pool = pool_with(f, "huge", SP_CROSS_STREAM_BALANCED);
    void *a, *b;
    SP(sp_alloc(pool, &a, 40 * MiB, fx.a));
    SP(sp_free(pool, a, fx.a));
    SP(sp_alloc(pool, &b, 36 * MiB, fx.a)); /* 40 <= 36 * 1.125: the whole segment */
    assert_ptr_equal(b, a);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 1);
    assert_int_equal(st.requested.current, 36 * MiB);
    assert_int_equal(st.active.current, 40 * MiB);
    assert_int_equal(st.held.current, 40 * MiB);
    assert_int_equal(st.largest_free, 0);
    assert_int_equal(st.inactive_split, 0);
    SP(sp_free(pool, b, fx.a));
    SP(sp_alloc(pool, &b, 20 * MiB, fx.a)); /* 40 > 20 * 1.125: back to the driver, a new 20 */
    st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 2);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.reclaimed_bytes, 0); /* the miss's own give-back: no reclaim */
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.segment_bytes, 20 * MiB);
    assert_int_equal(st.held.current, 20 * MiB);
    assert_int_equal(st.active.current, 20 * MiB);
    assert_int_equal(st.held.peak, 40 * MiB);
    SP(sp_free(pool, b, fx.a));
    SP(sp_pool_destroy(pool));
}

/* Huge segments: a stream keeps the one it frees while its huge frees are of one size (the
 * steady state, no driver call); a huge free of another size gives its segment back at once,
 * on the freeing stream; and a huge miss never takes a free segment more than 1/8 over its
 * size: the free segments go back, largest first, until they cover the request, and the driver
 * remaps their pages. Exact bytes. */
static void huge_segments_go_back_unless_one_size(void **state)
{
    fixture *f = *state;
    sp_pool *pool = pool_with(f, "huge-miss", SP_CROSS_STREAM_BALANCED);
    void *a, *b, *c, *d;
    SP(sp_alloc(pool, &a, 60 * MiB, fx.a));
    SP(sp_alloc(pool, &b, 30 * MiB, fx.a));
    SP(sp_free(pool, a, fx.a)); /* the stream's first huge free: kept */
    SP(sp_free(pool, b, fx.a)); /* 30 after 60: back to the driver at once */
    sp_stats st = stats_of(pool);
    assert_int_equal(st.driver_frees, 1);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.held.current, 60 * MiB);
    /* 60 > 12 + 12 / 8: the free 60 goes back (it covers 12 alone), a new 12 is taken */
    SP(sp_alloc(pool, &c, 12 * MiB, fx.a));
    st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 3);
    assert_int_equal(st.driver_frees, 2);
    assert_int_equal(st.reclaimed_bytes, 0);
    assert_int_equal(st.held.current, 12 * MiB);
    assert_int_equal(st.held.peak, 90 * MiB);
    SP(sp_free(pool, c, fx.a)); /* 12 after 30: back at once */
    st = stats_of(pool);
    assert_int_equal(st.driver_frees, 3);
    assert_int_equal(st.segments, 0);
    assert_int_equal(st.held.current, 0);
    SP(sp_alloc(pool, &d, 20 * MiB, fx.a));
    SP(sp_free(pool, d, fx.a)); /* 20 after 12: back at once */
    SP(sp_alloc(pool, &d, 20 * MiB, fx.a));
    SP(sp_free(pool, d, fx.a)); /* 20 after 20: one size, kept */
    SP(sp_alloc(pool, &d, 20 * MiB, fx.a)); /* and reused with no driver call */
    st = stats_of(pool);
    assert_int_equal(st.driver_allocs, 5);
    assert_int_equal(st.driver_frees, 4);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.held.current, 20 * MiB);
    assert_int_equal(st.active.current, 20 * MiB);
    SP(sp_free(pool, d, fx.a));
    SP(sp_pool_destroy(pool));
}

/* ---- the canary stress ---- */

enum { STREAMS = 4, ROUNDS = 4, OPS = 120, MAX_LIVE = 64 };

typedef struct {
    void *ptr;
    size_t size;
    int stream;
    unsigned char byte;
    unsigned char *host; /* the stream's copy of the block, taken after the gate opens */
} live_block;

static size_t pick_size(unsigned *seed)
{
    unsigned r = (unsigned)rand_r(seed);
    switch (r % 4) {
    case 0: return 256 + r % (64 * KiB);                 /* small: slabs */
    case 1: return MiB + 1 + r % (3 * MiB);               /* medium: shared segments */
    case 2: return 8 * MiB + 1 + r % (2 * MiB);           /* huge: segments of their own */
    default: return 512 * KiB + r % (512 * KiB);          /* the top small classes */
    }
}

static void assert_no_overlap(const live_block *live, int n, const live_block *b)
{
    uintptr_t lo = (uintptr_t)b->ptr, hi = lo + b->size;
    for (int i = 0; i < n; i++) {
        uintptr_t l = (uintptr_t)live[i].ptr, h = l + live[i].size;
        if (lo < h && l < hi)
            fail_msg("new range [%p, +%zu) overlaps live [%p, +%zu)", b->ptr, b->size,
                     live[i].ptr, live[i].size);
    }
}

/* Every block is written on its stream and copied to the host behind that stream's gate, then
 * freed there; meanwhile other streams allocate, split and merge ranges and write theirs. If any
 * range reached another stream before its fence, that stream's write could land before the
 * copy: every copy must show its own block's byte. */
static void canary_stress(fixture *f, sp_cross_stream_policy policy, unsigned seed)
{
    char name[32];
    snprintf(name, sizeof name, "stress-%d", (int)policy);
    sp_pool *pool = pool_with(f, name, policy);
    cudaStream_t s[STREAMS];
    for (int i = 0; i < STREAMS; i++)
        s[i] = new_stream();
    live_block live[MAX_LIVE];
    live_block done[OPS];
    int nlive = 0;
    unsigned char next_byte = 1;
    for (int round = 0; round < ROUNDS; round++) {
        gate *g[STREAMS];
        for (int i = 0; i < STREAMS; i++) {
            g[i] = gate_new();
            gate_hold(g[i], s[i]);
        }
        int ndone = 0;
        for (int op = 0; op < OPS; op++) {
            int k = rand_r(&seed) % STREAMS;
            bool do_free = nlive == MAX_LIVE || (nlive > 0 && rand_r(&seed) % 5 < 2);
            if (do_free) {
                int i = rand_r(&seed) % nlive;
                live_block *b = &live[i];
                CK(cudaMallocHost((void **)&b->host, b->size));
                CK(cudaMemcpyAsync(b->host, b->ptr, b->size, cudaMemcpyDeviceToHost,
                                   s[b->stream]));
                SP(sp_free(pool, b->ptr, s[b->stream]));
                done[ndone++] = *b;
                live[i] = live[--nlive];
            } else {
                live_block b = {.size = pick_size(&seed), .stream = k, .byte = next_byte};
                next_byte = next_byte == 255 ? 1 : next_byte + 1;
                SP(sp_alloc(pool, &b.ptr, b.size, s[k]));
                assert_no_overlap(live, nlive, &b);
                CK(cudaMemsetAsync(b.ptr, b.byte, b.size, s[k]));
                live[nlive++] = b;
            }
        }
        for (int i = 0; i < STREAMS; i++)
            gate_open(g[i]);
        CK(cudaDeviceSynchronize());
        static unsigned char expect[64 * 1024];
        for (int d = 0; d < ndone; d++) {
            memset(expect, done[d].byte, sizeof expect);
            for (size_t x = 0; x < done[d].size; x += sizeof expect) {
                size_t n = done[d].size - x < sizeof expect ? done[d].size - x : sizeof expect;
                if (memcmp(done[d].host + x, expect, n) != 0)
                    fail_msg("round %d policy %d: a %zu-byte block lost its byte 0x%02x near "
                             "offset %zu", round, (int)policy, done[d].size, done[d].byte, x);
            }
            CK(cudaFreeHost(done[d].host));
        }
    }
    for (int i = 0; i < nlive; i++)
        SP(sp_free(pool, live[i].ptr, s[live[i].stream]));
    sp_stats st = stats_of(pool);
    assert_int_equal(st.requested.current, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.bad_frees, 0);
    assert_int_equal(st.allocs, st.frees);
    assert_int_equal(st.held.current, st.cached.current);
    assert_int_equal(st.held.current, st.segment_bytes + st.slab_bytes);
    assert_true(st.held.peak >= st.active.peak);
    for (int i = 0; i < STREAMS; i++)
        drop_stream(f->rt, s[i]);
    SP(sp_pool_destroy(pool));
}

static void canary_stress_balanced(void **state) { canary_stress(*state, SP_CROSS_STREAM_BALANCED, 7); }
static void canary_stress_wait(void **state) { canary_stress(*state, SP_CROSS_STREAM_WAIT, 11); }

TEST_MAIN("segments",
    FX_EXACT(split_and_merge_bytes_are_exact),
    FX_EXACT(gated_range_stays_with_its_stream),
    FX_EXACT(best_fit_waits_only_on_the_range_it_takes),
    FX_EXACT(huge_segments_stay_whole),
    FX_EXACT(huge_segments_go_back_unless_one_size),
    FX_EXACT(canary_stress_balanced),
    FX_EXACT(canary_stress_wait)
)
