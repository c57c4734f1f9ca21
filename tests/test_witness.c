/* The lock-rank check (src/witness.h): locks taken in rank order pass, and a lock taken out of
 * order, a second lock of one rank, or the release of a lock not held aborts the process naming
 * both locks by the names and ranks stored at their init; an ownership assertion passes where
 * the lock is held (or not, for _not_owner; none at all, for _lockless) and aborts naming it
 * otherwise. Each death runs in a forked child (cmocka's own SIGABRT handler reset there) whose
 * stderr the parent reads. Built with the library's own wrappers (base.h, witness.h) and
 * witness.c compiled in with -DSP_WITNESS, whatever the build type. Needs no device. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base.h"

static sp_mutex runtime_lock = SP_MUTEX_INITIALIZER(SP_RANK_RUNTIME, "runtime->lock");
static sp_mutex pool_lock = SP_MUTEX_INITIALIZER(SP_RANK_POOL, "pool->lock");
static sp_mutex other_pool_lock = SP_MUTEX_INITIALIZER(SP_RANK_POOL, "other pool->lock");
static sp_mutex heap_lock = SP_MUTEX_INITIALIZER(SP_RANK_HEAP, "heap->lock");
static sp_mutex fence_lock = SP_MUTEX_INITIALIZER(SP_RANK_FENCE, "cache->fence_lock");
static sp_spin cache_lock = SP_SPIN_INITIALIZER(SP_RANK_SPIN, "cache->lock");
static sp_spin usage_lock = SP_SPIN_INITIALIZER(SP_RANK_LEAF, "usage->lock");

/* Runs fn in a child and returns what it wrote on stderr; the child must die of SIGABRT. */
static void expect_abort(void (*fn)(void), char *out, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL); /* cmocka's handler would resume the test in the child */
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        fn();
        _exit(0); /* not caught: the parent sees a normal exit */
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < len && (n = read(fds[0], out + used, len - 1 - used)) > 0)
        used += (size_t)n;
    out[used] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void locks_in_rank_order_pass(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) { /* everything released: the same order again */
        sp_mutex_lock(&runtime_lock);
        sp_mutex_lock(&pool_lock);
        sp_mutex_lock(&heap_lock);
        sp_mutex_lock(&fence_lock);
        sp_spin_lock(&cache_lock);
        sp_spin_lock(&usage_lock);
        /* released in any order */
        sp_mutex_unlock(&pool_lock);
        sp_spin_unlock(&cache_lock);
        sp_mutex_unlock(&runtime_lock);
        sp_spin_unlock(&usage_lock);
        sp_mutex_unlock(&fence_lock);
        sp_mutex_unlock(&heap_lock);
    }
}

static void a_released_lock_no_longer_counts(void **state)
{
    (void)state;
    sp_mutex_lock(&heap_lock);
    sp_mutex_unlock(&heap_lock);
    sp_mutex_lock(&pool_lock); /* below the heap's rank, but the heap is gone */
    sp_mutex_lock(&heap_lock);
    sp_mutex_unlock(&heap_lock);
    sp_mutex_unlock(&pool_lock);
}

/* err holds `before`, then the lock named as a message names it: "pool->lock (rank 6
 * SP_RANK_POOL, " (its address follows) */
static void assert_names(const char *err, const char *before, const char *name, sp_rank rank,
                         const char *rank_id)
{
    char want[256];
    int n = snprintf(want, sizeof want, "%s%s (rank %d %s, ", before, name, (int)rank, rank_id);
    assert_true(n > 0 && (size_t)n < sizeof want);
    if (!strstr(err, want))
        fail_msg("\"%s\" not in \"%s\"", want, err);
}

static void pool_under_heap(void)
{
    sp_mutex_lock(&heap_lock);
    sp_mutex_lock(&pool_lock);
}

static void a_lock_out_of_order_aborts_naming_both(void **state)
{
    (void)state;
    char err[512];
    expect_abort(pool_under_heap, err, sizeof err);
    assert_names(err, "streampool: lock order violated: taking ", "pool->lock", SP_RANK_POOL,
                 "SP_RANK_POOL");
    assert_names(err, " while holding ", "heap->lock", SP_RANK_HEAP, "SP_RANK_HEAP");
}

static void two_pools(void)
{
    sp_mutex_lock(&pool_lock);
    sp_mutex_lock(&other_pool_lock);
}

static void two_locks_of_one_rank_abort(void **state)
{
    (void)state;
    char err[512];
    expect_abort(two_pools, err, sizeof err);
    assert_names(err, "taking ", "other pool->lock", SP_RANK_POOL, "SP_RANK_POOL");
    assert_names(err, "while holding ", "pool->lock", SP_RANK_POOL, "SP_RANK_POOL");
}

static void spin_under_leaf(void)
{
    sp_spin_lock(&usage_lock);
    sp_spin_lock(&cache_lock);
}

static void a_spin_lock_under_a_leaf_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(spin_under_leaf, err, sizeof err);
    assert_names(err, "taking ", "cache->lock", SP_RANK_SPIN, "SP_RANK_SPIN");
    assert_names(err, "while holding ", "usage->lock", SP_RANK_LEAF, "SP_RANK_LEAF");
}

static void fence_under_spin(void)
{
    sp_spin_lock(&cache_lock); /* a driver call's lock under a spin lock */
    sp_mutex_lock(&fence_lock);
}

static void a_mutex_under_a_spin_lock_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(fence_under_spin, err, sizeof err);
    assert_names(err, "taking ", "cache->fence_lock", SP_RANK_FENCE, "SP_RANK_FENCE");
    assert_names(err, "while holding ", "cache->lock", SP_RANK_SPIN, "SP_RANK_SPIN");
}

/* Locks set up at run time (sp_mutex_init, sp_spin_init) keep the rank and name given there. */
static sp_mutex made_runtime;
static sp_spin made_leaf;

static void runtime_under_made_leaf(void)
{
    sp_spin_lock(&made_leaf);
    sp_mutex_lock(&made_runtime);
}

static void locks_set_up_at_run_time_are_named_as_given(void **state)
{
    (void)state;
    assert_int_equal(sp_mutex_init(&made_runtime, SP_RANK_RUNTIME, "made runtime->lock"), 0);
    sp_spin_init(&made_leaf, SP_RANK_LEAF, "made usage->lock");
    sp_mutex_lock(&made_runtime); /* in order: passes */
    sp_spin_lock(&made_leaf);
    sp_spin_unlock(&made_leaf);
    sp_mutex_unlock(&made_runtime);
    char err[512];
    expect_abort(runtime_under_made_leaf, err, sizeof err);
    assert_names(err, "taking ", "made runtime->lock", SP_RANK_RUNTIME, "SP_RANK_RUNTIME");
    assert_names(err, "while holding ", "made usage->lock", SP_RANK_LEAF, "SP_RANK_LEAF");
    sp_mutex_destroy(&made_runtime);
}

static void release_unheld(void)
{
    sp_spin_unlock(&cache_lock);
}

static void releasing_a_lock_not_held_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(release_unheld, err, sizeof err);
    assert_names(err, "streampool: releasing a lock this thread does not hold: ", "cache->lock",
                 SP_RANK_SPIN, "SP_RANK_SPIN");
}

static sp_spin never_set_up; /* zeroed: no rank, no name */

static void take_never_set_up(void)
{
    sp_spin_lock(&never_set_up);
}

static void a_lock_never_set_up_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(take_never_set_up, err, sizeof err);
    assert_non_null(strstr(err, "streampool: taking a lock with no rank or name: "
                                "a lock never initialized (rank 0 no rank, "));
}

/* ---- ownership ---- */

static void assert_owner_passes_while_held(void **state)
{
    (void)state;
    sp_mutex_lock(&pool_lock);
    sp_spin_lock(&cache_lock);
    sp_mutex_assert_owner(&pool_lock);
    sp_spin_assert_owner(&cache_lock);
    sp_spin_unlock(&cache_lock);
    sp_mutex_assert_owner(&pool_lock); /* the other one gone, this one still held */
    sp_mutex_unlock(&pool_lock);
}

static void owner_of_unheld_mutex(void)
{
    sp_mutex_lock(&heap_lock); /* another lock held is not this one */
    sp_mutex_assert_owner(&pool_lock);
}

static void owner_of_unheld_spin(void)
{
    sp_spin_lock(&cache_lock);
    sp_spin_unlock(&cache_lock); /* held once, released: not held now */
    sp_spin_assert_owner(&cache_lock);
}

static void assert_owner_aborts_naming_the_lock_not_held(void **state)
{
    (void)state;
    char err[512];
    expect_abort(owner_of_unheld_mutex, err, sizeof err);
    assert_names(err, "streampool: owner_of_unheld_mutex needs ", "pool->lock", SP_RANK_POOL,
                 "SP_RANK_POOL");
    assert_non_null(strstr(err, " held, and this thread does not hold it\n"));
    expect_abort(owner_of_unheld_spin, err, sizeof err);
    assert_names(err, "streampool: owner_of_unheld_spin needs ", "cache->lock", SP_RANK_SPIN,
                 "SP_RANK_SPIN");
}

static void assert_not_owner_passes_while_not_held(void **state)
{
    (void)state;
    sp_mutex_assert_not_owner(&pool_lock);
    sp_spin_assert_not_owner(&cache_lock);
    sp_mutex_lock(&heap_lock); /* another lock held: still not this one */
    sp_mutex_assert_not_owner(&pool_lock);
    sp_mutex_unlock(&heap_lock);
}

static void not_owner_of_held_mutex(void)
{
    sp_mutex_lock(&pool_lock);
    sp_mutex_assert_not_owner(&pool_lock);
}

static void not_owner_of_held_spin(void)
{
    sp_spin_lock(&usage_lock);
    sp_spin_assert_not_owner(&usage_lock);
}

static void assert_not_owner_aborts_naming_the_lock_held(void **state)
{
    (void)state;
    char err[512];
    expect_abort(not_owner_of_held_mutex, err, sizeof err);
    assert_names(err, "streampool: not_owner_of_held_mutex needs ", "pool->lock", SP_RANK_POOL,
                 "SP_RANK_POOL");
    assert_non_null(strstr(err, " not held, and this thread holds it\n"));
    expect_abort(not_owner_of_held_spin, err, sizeof err);
    assert_names(err, "streampool: not_owner_of_held_spin needs ", "usage->lock", SP_RANK_LEAF,
                 "SP_RANK_LEAF");
}

static void lockless_with_two_held(void)
{
    sp_mutex_lock(&pool_lock);
    sp_spin_lock(&cache_lock);
    sp_assert_lockless();
}

static void assert_lockless_passes_with_none_and_aborts_with_one(void **state)
{
    (void)state;
    sp_assert_lockless();
    sp_mutex_lock(&pool_lock);
    sp_mutex_unlock(&pool_lock);
    sp_assert_lockless(); /* released: none again */
    char err[512];
    expect_abort(lockless_with_two_held, err, sizeof err);
    assert_names(err,
                 "streampool: lockless_with_two_held needs no lock held, and this thread holds "
                 "2, the last ",
                 "cache->lock", SP_RANK_SPIN, "SP_RANK_SPIN");
}

/* A *_locked function as src/ writes them: its contract (the table's lock held) asserted first. */
typedef struct {
    sp_mutex lock;
    int entries;
} table;

static table tab = {SP_MUTEX_INITIALIZER(SP_RANK_POOL, "table->lock"), 0};

static int add_locked(table *t)
{
    sp_mutex_assert_owner(&t->lock);
    return ++t->entries;
}

static void add_without_the_lock(void)
{
    (void)add_locked(&tab);
}

static void a_locked_function_passes_under_its_lock_and_aborts_without(void **state)
{
    (void)state;
    sp_mutex_lock(&tab.lock);
    assert_int_equal(add_locked(&tab), 1);
    assert_int_equal(add_locked(&tab), 2);
    sp_mutex_unlock(&tab.lock);
    char err[512];
    expect_abort(add_without_the_lock, err, sizeof err);
    assert_names(err, "streampool: add_locked needs ", "table->lock", SP_RANK_POOL, "SP_RANK_POOL");
    assert_int_equal(tab.entries, 2); /* the child died before adding */
}

/* Every rank has its name (messages name ranks by it), each its own. */
static void every_rank_is_named(void **state)
{
    (void)state;
    for (int r = 1; r < SP_RANK_COUNT; r++) {
        const char *name = sp__witness_rank_name((sp_rank)r);
        assert_non_null(name);
        assert_int_equal(strncmp(name, "SP_RANK_", 8), 0);
        for (int q = 1; q < r; q++)
            assert_string_not_equal(name, sp__witness_rank_name((sp_rank)q));
    }
    assert_string_equal(sp__witness_rank_name(SP_RANK_PEER), "SP_RANK_PEER");
    assert_string_equal(sp__witness_rank_name(SP_RANK_SHARE), "SP_RANK_SHARE");
    assert_string_equal(sp__witness_rank_name((sp_rank)0), "no rank");
    assert_string_equal(sp__witness_rank_name(SP_RANK_COUNT), "no rank");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(locks_in_rank_order_pass),
        cmocka_unit_test(a_released_lock_no_longer_counts),
        cmocka_unit_test(a_lock_out_of_order_aborts_naming_both),
        cmocka_unit_test(two_locks_of_one_rank_abort),
        cmocka_unit_test(a_spin_lock_under_a_leaf_aborts),
        cmocka_unit_test(a_mutex_under_a_spin_lock_aborts),
        cmocka_unit_test(locks_set_up_at_run_time_are_named_as_given),
        cmocka_unit_test(releasing_a_lock_not_held_aborts),
        cmocka_unit_test(a_lock_never_set_up_aborts),
        cmocka_unit_test(assert_owner_passes_while_held),
        cmocka_unit_test(assert_owner_aborts_naming_the_lock_not_held),
        cmocka_unit_test(assert_not_owner_passes_while_not_held),
        cmocka_unit_test(assert_not_owner_aborts_naming_the_lock_held),
        cmocka_unit_test(assert_lockless_passes_with_none_and_aborts_with_one),
        cmocka_unit_test(a_locked_function_passes_under_its_lock_and_aborts_without),
        cmocka_unit_test(every_rank_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
