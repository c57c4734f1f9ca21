/* Names as they go into reports: which pool names are accepted (printable UTF-8, so that every
 * report can show them), and the one escaping routine each output format uses for them (JSON
 * strings, Prometheus label values). Every byte a caller hands over comes out valid in the
 * target format, even from a struct the caller filled in by hand. */
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

void sp__names_append_json(char *buf, size_t len, size_t *used, const char *s)
{
    sp__format_append(buf, len, used, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        uint32_t cp;
        size_t n = utf8_decode(p, &cp);
        if (n == 0) {
            sp__format_append(buf, len, used, "\\ufffd"); /* a stray byte: the replacement character */
            p++;
            continue;
        }
        switch (cp) {
        case '"': sp__format_append(buf, len, used, "\\\""); break;
        case '\\': sp__format_append(buf, len, used, "\\\\"); break;
        case '\n': sp__format_append(buf, len, used, "\\n"); break;
        case '\r': sp__format_append(buf, len, used, "\\r"); break;
        case '\t': sp__format_append(buf, len, used, "\\t"); break;
        default:
            if (is_control(cp))
                sp__format_append(buf, len, used, "\\u%04x", (unsigned)cp);
            else
                sp__format_append(buf, len, used, "%.*s", (int)n, (const char *)p);
        }
        p += n;
    }
    sp__format_append(buf, len, used, "\"");
}

void sp__names_append_label_value(char *buf, size_t len, size_t *used, const char *s)
{
    /* Prometheus text format: a label value is UTF-8 with \, " and newline escaped */
    sp__format_append(buf, len, used, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        uint32_t cp;
        size_t n = utf8_decode(p, &cp);
        if (n == 0) {
            sp__format_append(buf, len, used, "\xEF\xBF\xBD"); /* U+FFFD */
            p++;
            continue;
        }
        if (cp == '\\' || cp == '"')
            sp__format_append(buf, len, used, "\\%c", (char)cp);
        else if (cp == '\n')
            sp__format_append(buf, len, used, "\\n");
        else
            sp__format_append(buf, len, used, "%.*s", (int)n, (const char *)p);
        p += n;
    }
    sp__format_append(buf, len, used, "\"");
}
