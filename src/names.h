/* Pool names and the escaping of names in JSON and Prometheus text (names.c). */
#ifndef SP_NAMES_H
#define SP_NAMES_H

#include "base.h"

/* SP_OK for 1..SP_POOL_NAME_MAX bytes of well-formed UTF-8 without control characters (C0,
 * DEL, C1); SP_ERR_INVALID otherwise. */
int sp__names_check_pool(const char *name);
/* A JSON string: quotes around `s`, every control character escaped, a byte that is not UTF-8
 * as U+FFFD. */
void sp__names_append_json(char *buf, size_t len, size_t *used, const char *s);
/* A Prometheus label value: quotes around `s`, with \, " and newline escaped. */
void sp__names_append_label_value(char *buf, size_t len, size_t *used, const char *s);

#endif /* SP_NAMES_H */
