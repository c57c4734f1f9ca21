/* The alignment streampool documents (streampool.h, sp_alloc): every pointer is aligned to at
 * least 256 bytes, as cudaMalloc's are, for every size class and whichever path the block took:
 * fresh from the driver, back from the stream's own cache, or taken by another stream behind a
 * completed fence. Public API only, so it holds whatever the allocator does inside. */
#include <stdint.h>
#include <stdlib.h>

#include "support/fixtures.h"

#define ALIGNMENT 256u

typedef sp_fixture fixture; /* fixtures.h, with a pool of its own */

static int setup(void **state)
{
    return fx_setup(state) || sp_pool_create(fx.rt, "alignment", NULL, &fx.pool) ? -1 : 0;
}

static void assert_aligned(const void *p, size_t bytes)
{
    if ((uintptr_t)p % ALIGNMENT != 0)
        fail_msg("sp_alloc(%zu) returned %p, not %u-byte aligned", bytes, p, ALIGNMENT);
}

/* Allocates `bytes` on s and checks the pointer's alignment, and that both ends of the range
 * are usable (the whole range would cost gigabytes of writes for the largest classes). */
static void *alloc_aligned(sp_pool *pool, size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    SP(sp_alloc(pool, &p, bytes, s));
    assert_non_null(p);
    assert_aligned(p, bytes);
    size_t end = bytes < ALIGNMENT ? bytes : ALIGNMENT;
    CK(cudaMemsetAsync(p, 0x5a, end, s));
    CK(cudaMemsetAsync((char *)p + bytes - end, 0x5a, end, s));
    return p;
}

/* Every size class from the smallest up to a quarter of the device's free memory: its smallest
 * and its largest request, each fresh, then reused on the same stream, then taken by a second
 * stream once the first is synchronized. */
static void every_size_class_is_256_byte_aligned(void **state)
{
    fixture *f = *state;
    size_t free_bytes = 0, total = 0;
    CK(cudaMemGetInfo(&free_bytes, &total));
    const size_t top = free_bytes / 4;
    cudaStream_t a = new_stream(), b = new_stream();
    unsigned classes = 0;
    size_t previous = 0;
    for (size_t cls = sp_size_class(1); cls != 0 && cls <= top; cls = sp_size_class(cls + 1)) {
        assert_true(cls > previous);
        assert_int_equal(sp_size_class(previous + 1), cls);
        const size_t sizes[2] = {previous + 1, cls};
        for (int i = 0; i < 2; i++) {
            void *p = alloc_aligned(f->pool, sizes[i], a);
            SP(sp_free(f->pool, p, a));
            p = alloc_aligned(f->pool, sizes[i], a); /* from a's cache */
            SP(sp_free(f->pool, p, a));
            CK(cudaStreamSynchronize(a)); /* the fence on a's block is complete */
            p = alloc_aligned(f->pool, sizes[i], b);
            SP(sp_free(f->pool, p, b));
        }
        CK(cudaStreamSynchronize(b));
        if (cls >= ((size_t)16 << 20))
            SP(sp_pool_trim(f->pool, 0)); /* large classes must not pile up in the caches */
        previous = cls;
        classes++;
    }
    /* Up to 4 KiB in 256-byte steps, then at least 16 classes per doubling up to `top` (at least
     * 1 GiB on any device streampool supports, and 4 GiB on cudasim's default 16 GiB). */
    assert_true(classes >= 16 + 16 * 17);
    sp_stats st = stats_of(f->pool);
    assert_int_equal(st.allocs, (uint64_t)classes * 6);
    drop_stream(f->rt, a);
    drop_stream(f->rt, b);
}

/* Requests that are not multiples of anything: odd sizes around every power of two. */
static void odd_sizes_are_256_byte_aligned(void **state)
{
    fixture *f = *state;
    cudaStream_t s = new_stream();
    void *live[3 * 25];
    int n = 0;
    for (int shift = 0; shift < 25; shift++) {
        size_t p2 = (size_t)1 << shift;
        const size_t sizes[3] = {p2 > 1 ? p2 - 1 : 1, p2, p2 + 1};
        for (int i = 0; i < 3; i++)
            live[n++] = alloc_aligned(f->pool, sizes[i], s); /* all live at once: distinct blocks */
    }
    for (int i = 0; i < n; i++)
        SP(sp_free(f->pool, live[i], s));
    drop_stream(f->rt, s);
}

TEST_MAIN("alignment",
    cmocka_unit_test_setup_teardown(every_size_class_is_256_byte_aligned, setup, fx_teardown),
    cmocka_unit_test_setup_teardown(odd_sizes_are_256_byte_aligned, setup, fx_teardown)
)
