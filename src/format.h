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


#endif /* SP_FORMAT_H */
