/* Text for every report (stats JSON, Prometheus, summaries, the OOM report, config errors): one
 * appender that keeps counting past a short buffer, so that a caller learns the length it
 * needs. A leaf: it calls nothing of the library. */
#include <stdarg.h>
#include <stdio.h>

#include "format.h"

void sp__format_append(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*used < len ? buf + *used : NULL, *used < len ? len - *used : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n;
}
