/* Stream labels (labels.c): the names users give streams, read by reports, the OOM report and
 * the trace. */
#ifndef SP_LABELS_H
#define SP_LABELS_H

#include "cache.h"

/* ---- labels.c ---- */

/* Moves (under the label table's mutex) after every change to the table: a reader that saw
 * the same figure last time (the trace, per event) knows its copy of a label is still right. */
extern atomic_uint sp__label_changes;

/* The label of a stream (exact key), or of any thread's stream with that handle, into out
 * ("" if none). Takes the label table's mutex: after runtime->lock, before nothing. */
void sp__label_of(const sp_runtime *rt, sp_stream_key key, char *out, size_t len);
void sp__label_of_any_thread(const sp_runtime *rt, cudaStream_t stream, char *out, size_t len);
/* Forgets the runtime's label of *stream, or all its labels when stream is NULL. */
void sp__label_forget(const sp_runtime *rt, const cudaStream_t *stream);

#endif /* SP_LABELS_H */
