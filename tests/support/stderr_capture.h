/* stderr captured around a call that warns, and a check that text contains some words: for the
 * suites that assert the library's messages (newcomer, conf_messages, limit_in_force). One
 * capture at a time per process. */
#ifndef SP_TEST_STDERR_CAPTURE_H
#define SP_TEST_STDERR_CAPTURE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

static inline void contains(const char *text, const char *words)
{
    if (!strstr(text, words))
        fail_msg("'%s' does not contain '%s'", text, words);
}

static int saved_stderr = -1;
static FILE *captured;

static inline void capture_begin(void)
{
    fflush(stderr);
    captured = tmpfile();
    assert_non_null(captured);
    saved_stderr = dup(2);
    assert_true(saved_stderr >= 0);
    assert_true(dup2(fileno(captured), 2) >= 0);
}

/* What was written to stderr since capture_begin, in buf. */
static inline const char *capture_end(char *buf, size_t len)
{
    fflush(stderr);
    assert_true(dup2(saved_stderr, 2) >= 0);
    close(saved_stderr);
    rewind(captured);
    size_t n = fread(buf, 1, len - 1, captured);
    buf[n] = '\0';
    fclose(captured);
    return buf;
}

#endif /* SP_TEST_STDERR_CAPTURE_H */
