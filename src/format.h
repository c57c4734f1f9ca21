/* The text of every report: the appender (format.c) and how names are checked and escaped
 * (names.c). Leaves. */
#ifndef SP_FORMAT_H
#define SP_FORMAT_H

#include "base.h"

/* ---- format.c: the appender of every report ---- */

/* snprintf at buf + *used, advancing *used by what the whole text needs (like snprintf, so a
 * short buffer still yields the full length). */
void sp__format_append(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- names.c: pool names, and how names are escaped in every report ---- */

/* SP_OK for 1..SP_POOL_NAME_MAX bytes of well-formed UTF-8 without control characters (C0,
 * DEL, C1); SP_ERR_INVALID otherwise. */
int sp__names_check_pool(const char *name);
/* A JSON string: quotes around `s`, every control character escaped, a byte that is not UTF-8
 * as U+FFFD. */
void sp__names_append_json(char *buf, size_t len, size_t *used, const char *s);
/* A Prometheus label value: quotes around `s`, with \, " and newline escaped. */
void sp__names_append_label_value(char *buf, size_t len, size_t *used, const char *s);

#endif /* SP_FORMAT_H */
