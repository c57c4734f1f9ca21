/* Sizes: the size classes (classes.c) and the constants of the two tiers, small blocks carved
 * from slabs (small.c) and large ranges carved from segments (heap.c). A leaf. */
#ifndef SP_CLASSES_H
#define SP_CLASSES_H

#include "base.h"

/* ---- size classes (classes.c) and the two tiers ----
 * 256-byte steps up to 4 KiB, then 16 classes per power of two: rounding waste is under 256
 * bytes below 4 KiB and under 1/16 (6.25%) of the request above. */
#define SP_CLASS_COUNT (16 + 34 * 16) /* up to SP_MAX_ALLOC = 2^46 */

/* Two tiers. Requests up to SP_SMALL_MAX are rounded to their size class and cached per stream
 * in bins (the hot path); their blocks are carved from SP_SLAB_BYTES slabs. Larger requests are
 * rounded to SP_LARGE_ALIGN and carved by best fit from segments (heap.c). */
#define SP_SMALL_MAX ((size_t)1 << 20)
#define SP_SLAB_BYTES ((size_t)2 << 20)
#define SP_LARGE_ALIGN ((size_t)512)
/* A capturing stream's allocation goes straight to the driver (rule 24): its bytes are claimed,
 * counted and reported rounded to the alignment of the driver's pointers. */
#define SP_BYPASS_ALIGN ((size_t)256)
/* The driver reserves pool memory in pages of this size (2 MiB on every current GPU). */
#define SP_DRIVER_GRANULARITY ((uint64_t)2 << 20)
/* Medium requests (up to SP_MEDIUM_MAX) share segments; huge ones get whole segments of their
 * own. A segment is whole driver pages: the driver maps whole pages anyway, and the tail of a
 * page that a segment left out stayed free in the driver's pool, where no streampool
 * allocation fits (none is smaller than a page) and no remap can take it. In a medium segment
 * the tail serves other medium requests. Near a pool's limit (whole pages), where a capture's
 * bypass allocations left part of a page, a segment is only the request rounded to
 * SP_SEGMENT_ROUND. */
#define SP_MEDIUM_MAX ((size_t)8 << 20)
#define SP_SEGMENT_ROUND ((size_t)64 << 10)
/* A huge request reuses a free huge segment at most 1/SP_HUGE_SLACK larger than itself. The
 * slack stays held while the block lives, in flight on its stream, where no other request can
 * use it: in sp-bench serve, 1/4 (with a rung that took segments up to twice the request below
 * the high-water mark) reserved 1.00-1.17x what raw cudaMallocAsync did at 4 and 16 streams,
 * 1/8 without that rung 0.99-1.04x, for more driver calls. */
#define SP_HUGE_SLACK 8
/* A stream keeps the huge segment it frees (parked, for its next request) only while its huge
 * frees stay within 1/SP_HUGE_SAME of one size, a steady state that then costs no CUDA call.
 * Any other huge free gives its segment back to the driver at once, on the freeing stream: the
 * pages become the driver's to remap for any stream and size as soon as the stream's work
 * passes the free, as raw cudaMallocAsync's would, instead of waiting for the stream's next
 * miss (sp-bench serve at 4 streams: 0.94-1.08x raw cudaMallocAsync's reserved memory in six
 * runs, 1.02-1.18x without). */
#define SP_HUGE_SAME 16

/* A stream's park: the large ranges it freed most recently (at most SP_PARK_SLOTS), kept out
 * of the segment heap so that its next large request of the same size takes one back under its
 * own spin lock, not the heap's mutex that every stream shares. Invisible to other streams' best
 * fit, merging and give-back, so a park is small, and whatever needs the heap's whole truth
 * (any large miss, give-back, stats, release, destroy) flushes every park into the heap first. */
#define SP_PARK_SLOTS 4

/* A same-stream miss may take a cached block up to this many classes larger (at most 4/16 =
 * 25% over the request above 4 KiB) rather than carve a new one. */
#define SP_FIT_CLASSES 4

/* What a fresh allocation for a request carved at `size` bytes takes from the driver, away from
 * the pool's limit: a slab for the small tier, whole driver pages above (pool.c's growth, and
 * footprint.c's bound on what a request may draw from its claim). */
static inline size_t sp__fresh_size(bool small, size_t size)
{
    return small ? SP_SLAB_BYTES : sp__round_up(size, SP_DRIVER_GRANULARITY);
}

uint32_t sp__class_of(size_t bytes); /* bytes in 1..SP_MAX_ALLOC */
/* The largest class whose size is <= bytes (bytes >= 256): the bin of a free range. */
uint32_t sp__class_floor(size_t bytes);
size_t sp__class_size(uint32_t cls);

#endif /* SP_CLASSES_H */
