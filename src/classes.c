/* Size classes, shared by both tiers (small.c's bins, heap.c's free-range bins) and the
 * trace: 256-byte steps up to 4 KiB (CUDA aligns allocations to 256 bytes anyway), then 16
 * classes per power of two. A request is rounded up by less than 256 bytes below 4 KiB and by
 * less than 1/16 of itself above, so the rounding waste of any mix of sizes is under 6.25%. */
#include "classes.h"

#define SMALL_STEP 256u
#define SMALL_LIMIT 4096u
#define SMALL_CLASSES 16u
#define SUB 16u          /* classes per power of two above SMALL_LIMIT */
#define SMALL_LOG2 12u

uint32_t sp__class_of(size_t n)
{
    if (n <= SMALL_LIMIT)
        return (uint32_t)((n + SMALL_STEP - 1) / SMALL_STEP - 1);
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
    size_t base = (size_t)1 << k;
    size_t step = base / SUB;
    size_t j = (n - base + step - 1) / step; /* 1..16 */
    return SMALL_CLASSES + (uint32_t)(k - SMALL_LOG2) * SUB + (uint32_t)(j - 1);
}

uint32_t sp__class_floor(size_t n)
{
    if (n >= SP_MAX_ALLOC)
        return SP_CLASS_COUNT - 1;
    uint32_t c = sp__class_of(n);
    return sp__class_size(c) == n ? c : c - 1;
}

size_t sp__class_size(uint32_t cls)
{
    if (cls < SMALL_CLASSES)
        return (size_t)(cls + 1) * SMALL_STEP;
    uint32_t k = SMALL_LOG2 + (cls - SMALL_CLASSES) / SUB;
    size_t j = (cls - SMALL_CLASSES) % SUB + 1;
    size_t base = (size_t)1 << k;
    return base + j * (base / SUB);
}

size_t sp_size_class(size_t bytes)
{
    if (bytes == 0 || bytes > SP_MAX_ALLOC)
        return 0;
    return sp__class_size(sp__class_of(bytes));
}
