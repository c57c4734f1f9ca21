/* snprintf-style text building shared by the server's renderers: appends at an offset that may
 * run past the buffer, so that one pass gives both the text and the length it needs. */
#ifndef SERVER_TEXT_H
#define SERVER_TEXT_H

#include <stddef.h>

/* Appends the formatted text at buf + at (as much as fits, NUL-terminated when len > 0) and
 * returns at plus the text's full length. */
size_t text_put(char *buf, size_t len, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends `s` as a JSON string, quotes included, escaping quotes, backslashes and control
 * characters. Same return as text_put. */
size_t text_put_json_string(char *buf, size_t len, size_t at, const char *s);

#endif
