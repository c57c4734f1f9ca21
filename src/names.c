/* Names as they go into reports: which pool names are accepted (printable UTF-8, so that every
 * report can show them), and the one escaping routine each output format uses for them (JSON
 * strings, Prometheus label values). Every byte a caller hands over comes out valid in the
 * target format, even from a struct the caller filled in by hand. */
#include <stdio.h>
#include <string.h>

#include "format.h"
#include "names.h"

/* Decodes one UTF-8 sequence at s (NUL-terminated). Returns its length and the code point in
 * *cp, or 0 if the bytes are not well-formed UTF-8 (overlong, surrogate, past U+10FFFF, cut). */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp)
{
    uint32_t c = s[0];
    size_t n;
    uint32_t min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2, min = 0x80, c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, min = 0x800, c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, min = 0x10000, c &= 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the NUL */
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

/* C0 controls, DEL and the C1 controls: they reorder or hide text on a terminal and break
 * line-based formats. */
static bool is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);
}

int sp__names_check_pool(const char *name)
{
    if (!name)
        return SP_ERR_INVALID;
    size_t len = strlen(name);
    if (len == 0 || len > SP_POOL_NAME_MAX)
        return SP_ERR_INVALID;
    for (const unsigned char *s = (const unsigned char *)name; *s;) {
        uint32_t cp;
        size_t n = utf8_decode(s, &cp);
        if (n == 0 || is_control(cp))
            return SP_ERR_INVALID;
        s += n;
    }
    return SP_OK;
}

/* How a code point is written inside the quotes: its escape (in esc, when built), or NULL to
 * copy it as it stands. */
typedef const char *names_escape_fn(uint32_t cp, char esc[12]);

/* s (NULL: empty) in double quotes, UTF-8 escaped by `escape`; a byte that starts no code point
 * becomes `stray`. */
static void append_quoted(char *buf, size_t len, size_t *used, const char *s, const char *stray,
                          names_escape_fn *escape)
{
    sp__format_append(buf, len, used, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        uint32_t cp;
        size_t n = utf8_decode(p, &cp);
        if (n == 0) {
            sp__format_append(buf, len, used, "%s", stray);
            p++;
            continue;
        }
        char esc[12];
        const char *e = escape(cp, esc);
        if (e)
            sp__format_append(buf, len, used, "%s", e);
        else
            sp__format_append(buf, len, used, "%.*s", (int)n, (const char *)p);
        p += n;
    }
    sp__format_append(buf, len, used, "\"");
}

/* JSON: the quote, the backslash and the control characters escaped (the usual ones by name) */
static const char *json_escape(uint32_t cp, char esc[12])
{
    switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    }
    if (!is_control(cp))
        return NULL;
    snprintf(esc, 12, "\\u%04x", (unsigned)cp); /* is_control's are below U+00A0 */
    return esc;
}

void sp__names_append_json(char *buf, size_t len, size_t *used, const char *s)
{
    append_quoted(buf, len, used, s, "\\ufffd" /* the replacement character */, json_escape);
}

/* Prometheus text format: a label value is UTF-8 with \, " and newline escaped */
static const char *label_escape(uint32_t cp, char esc[12])
{
    (void)esc;
    switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    }
    return NULL;
}

void sp__names_append_label_value(char *buf, size_t len, size_t *used, const char *s)
{
    append_quoted(buf, len, used, s, "\xEF\xBF\xBD" /* U+FFFD */, label_escape);
}
