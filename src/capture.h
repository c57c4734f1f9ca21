/* A stream's graph capture (capture.c): whether it is under way, and the blocks kept aside during it (rule 24). */
#ifndef SP_CAPTURE_H
#define SP_CAPTURE_H

#include "heap.h"

/* Is the stream of cache c being captured into a graph (declared: c's flag, no lock; ALWAYS:
 * asked of CUDA)? In ALWAYS mode, a stream found no longer capturing gets its kept-aside blocks
 * back. */
int sp__capture_check(sp_stream_cache *c, bool *capturing);
/* Returns the blocks kept aside during a capture to their slabs and segments, tagged with a
 * free on c's stream now. */
void sp__capture_release_aside(sp_stream_cache *c);

#endif /* SP_CAPTURE_H */
