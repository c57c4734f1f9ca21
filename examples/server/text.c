/* snprintf-style appending (text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>

size_t text_put(char *buf, size_t len, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = at < len ? vsnprintf(buf + at, len - at, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n;
}

size_t text_put_json_string(char *buf, size_t len, size_t at, const char *s)
{
    at = text_put(buf, len, at, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            at = text_put(buf, len, at, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            at = text_put(buf, len, at, "\\u%04x", c);
        else
            at = text_put(buf, len, at, "%c", c);
    }
    return text_put(buf, len, at, "\"");
}
