/* README's table of SP_ALLOC_CONF keys, printed from the one table (src/conf_keys.h), and the
 * checks that keep the copies of that table honest:
 *   conf_doc                    prints the Markdown table
 *   conf_doc --check README.md  fails (exit 1, with a diff-like message) unless README's table,
 *                               between its conf-keys markers, is that table, and unless
 *                               SP_POOL_CONFIG_INIT holds the table's defaults
 *   conf_doc --write README.md  rewrites README's table from the table
 * Needs no device. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_keys.h"

#define BEGIN "<!-- conf-keys: generated from src/conf_keys.h by tests/conf_doc.c --write -->\n"
#define END "<!-- conf-keys: end -->\n"

static size_t table(char *buf, size_t len)
{
    size_t used = 0;
#define PUT(...) used += (size_t)snprintf(buf + used, used < len ? len - used : 0, __VA_ARGS__)
    PUT("| key | for | default | value |\n|-----|-----|---------|-------|\n");
#define POOL_ROW(n, t, def, def_text, doc) PUT("| `%s` | pool | `%s` | %s |\n", #n, def_text, doc);
    SP__CONF_POOL_KEYS(POOL_ROW)
#undef POOL_ROW
#define RUNTIME_ROW(n, t, def_text, doc) PUT("| `%s` | runtime | %s%s%s | %s |\n", #n,      \
        strcmp(def_text, "none") ? "`" : "", def_text, strcmp(def_text, "none") ? "`" : "", doc);
    SP__CONF_RUNTIME_KEYS(RUNTIME_ROW)
#undef RUNTIME_ROW
#undef PUT
    return used;
}

/* SP_POOL_CONFIG_INIT's fields against the table's defaults: the macro is positional, so a
 * default changed in one place and not the other shows here. */
static int init_matches_table(void)
{
    int bad = 0;
    sp_pool_config init = SP_POOL_CONFIG_INIT;
#define CHECK(n, t, def, def_text, doc)                                                       \
    if ((uint64_t)init.n != (uint64_t)(def)) {                                                 \
        fprintf(stderr, "conf_doc: SP_POOL_CONFIG_INIT's %s differs from src/conf_keys.h's "   \
                        "default %s\n", #n, def_text);                                          \
        bad = 1;                                                                               \
    }
    SP__CONF_POOL_KEYS(CHECK)
#undef CHECK
    if (init.size != sizeof init) {
        fprintf(stderr, "conf_doc: SP_POOL_CONFIG_INIT's size is not sizeof(sp_pool_config)\n");
        bad = 1;
    }
    return bad;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (text && fread(text, 1, (size_t)size, f) != (size_t)size) {
        free(text);
        text = NULL;
    }
    fclose(f);
    if (text) {
        text[size] = '\0';
        *n = (size_t)size;
    }
    return text;
}

int main(int argc, char **argv)
{
    char want[8192];
    if (table(want, sizeof want) >= sizeof want)
        return 2;
    if (argc < 3) {
        fputs(want, stdout);
        return init_matches_table();
    }
    size_t n;
    char *readme = slurp(argv[2], &n);
    if (!readme) {
        fprintf(stderr, "conf_doc: cannot read %s\n", argv[2]);
        return 2;
    }
    char *begin = strstr(readme, BEGIN), *end = begin ? strstr(begin, END) : NULL;
    if (!begin || !end) {
        fprintf(stderr, "conf_doc: %s has no conf-keys markers (%s)\n", argv[2], BEGIN);
        return 1;
    }
    begin += strlen(BEGIN);
    if (strcmp(argv[1], "--write") == 0) {
        FILE *f = fopen(argv[2], "wb");
        if (!f)
            return 2;
        fwrite(readme, 1, (size_t)(begin - readme), f);
        fputs(want, f);
        fputs(end, f);
        fclose(f);
        return init_matches_table();
    }
    int bad = init_matches_table();
    if ((size_t)(end - begin) != strlen(want) || memcmp(begin, want, strlen(want)) != 0) {
        fprintf(stderr, "conf_doc: README's key table differs from src/conf_keys.h; it should "
                        "read (tests/conf_doc --write README.md writes it):\n%s", want);
        bad = 1;
    }
    free(readme);
    return bad;
}
