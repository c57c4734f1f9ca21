/* Issue 27, item 10: the configuration's warnings say what happened, whatever the teardown
 * order. SP_ALLOC_CONF_QUIET=0 is not quiet; a pool whose creation failed (no memory for its
 * reservation) is reported as such, never as "(a typo?)", and is not counted by
 * sp_runtime_check_config; the "did you mean" hint names a pool created in another case even
 * after that pool was destroyed. Portable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/sp_test_support.h"

#include "support/stderr_capture.h"

/* The warnings sp_runtime_destroy prints for rt, with SP_ALLOC_CONF_QUIET as given (NULL:
 * unset). */
static const char *destroy_warnings(sp_runtime *rt, const char *quiet, char *out, size_t len)
{
    if (quiet)
        setenv("SP_ALLOC_CONF_QUIET", quiet, 1);
    else
        unsetenv("SP_ALLOC_CONF_QUIET");
    capture_begin();
    destroy_runtime(rt);
    capture_end(out, len);
    unsetenv("SP_ALLOC_CONF_QUIET");
    return out;
}

static sp_runtime *runtime_with(const char *alloc_conf)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.alloc_conf = alloc_conf;
    return track_runtime(0, &cfg);
}

static void quiet_means_what_it_says(void **state)
{
    (void)state;
    char out[1024];
    const char *typo = "pool 'lama', but no pool of that name was created (a typo?)";
    contains(destroy_warnings(runtime_with("lama.limit:1G"), NULL, out, sizeof out), typo);
    contains(destroy_warnings(runtime_with("lama.limit:1G"), "0", out, sizeof out), typo);
    contains(destroy_warnings(runtime_with("lama.limit:1G"), "", out, sizeof out), typo);
    assert_string_equal(destroy_warnings(runtime_with("lama.limit:1G"), "1", out, sizeof out), "");
    assert_string_equal(destroy_warnings(runtime_with("lama.limit:1G"), "yes", out, sizeof out),
                        "");
}

static void a_pool_that_failed_for_memory_is_no_typo(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_with("big.reserve:100T,ghost.priority:1");
    sp_pool *big = NULL;
    int rc = sp_pool_create(rt, "big", NULL, &big);
    assert_true(rc == SP_ERR_OUT_OF_MEMORY || rc == SP_ERR_CUDA); /* cudasim: out of memory */
    assert_null(big);
    char names[64];
    assert_int_equal(sp_runtime_check_config(rt, names, sizeof names), 1); /* 'ghost' only */
    assert_string_equal(names, "ghost");
    char out[1024];
    destroy_warnings(rt, NULL, out, sizeof out);
    contains(out, "the configuration sets keys for pool 'big', which was never created: its "
                  "creation failed (");
    contains(out, sp_status_name(rc));
    assert_null(strstr(out, "'big', but no pool of that name was created"));
    contains(out, "pool 'ghost', but no pool of that name was created (a typo?)");
}

/* The hint does not depend on the pool being alive at sp_runtime_destroy. */
static void the_case_hint_outlives_the_pool(void **state)
{
    (void)state;
    sp_runtime *rt = runtime_with("CHAT.limit:1G");
    sp_pool *chat;
    SP(sp_pool_create(rt, "chat", NULL, &chat));
    SP(sp_pool_destroy(chat)); /* gone before the runtime */
    char out[1024];
    destroy_warnings(rt, NULL, out, sizeof out);
    contains(out, "pool 'CHAT', but no pool of that name was created (pool names are "
                  "case-sensitive: did you mean 'chat'?)");
}

TEST_MAIN_WITHOUT_ALLOC_CONF("conf_messages",
    TRACKED(quiet_means_what_it_says),
    TRACKED(a_pool_that_failed_for_memory_is_no_typo),
    TRACKED(the_case_hint_outlives_the_pool)
)
