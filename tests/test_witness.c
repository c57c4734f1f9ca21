/* The lock-rank check (src/witness.h): locks taken in rank order pass, and a lock taken out of
 * order, a second lock of one rank, or the release of a lock not held aborts the process with
 * both locks named. Each death runs in a forked child (cmocka's own SIGABRT handler reset there)
 * whose stderr the parent reads. Built with the library's own wrappers (base.h, witness.h) and
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

static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t other_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;
static sp_spin cache_lock, usage_lock;

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
        sp_mutex_lock(&runtime_lock, SP_RANK_RUNTIME);
        sp_mutex_lock(&pool_lock, SP_RANK_POOL);
        sp_mutex_lock(&heap_lock, SP_RANK_HEAP);
        sp_mutex_lock(&fence_lock, SP_RANK_FENCE);
        sp_spin_lock(&cache_lock);
        sp_spin_lock_ranked(&usage_lock, SP_RANK_LEAF);
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
    sp_mutex_lock(&heap_lock, SP_RANK_HEAP);
    sp_mutex_unlock(&heap_lock);
    sp_mutex_lock(&pool_lock, SP_RANK_POOL); /* below the heap's rank, but the heap is gone */
    sp_mutex_lock(&heap_lock, SP_RANK_HEAP);
    sp_mutex_unlock(&heap_lock);
    sp_mutex_unlock(&pool_lock);
}

static void pool_under_heap(void)
{
    sp_mutex_lock(&heap_lock, SP_RANK_HEAP);
    sp_mutex_lock(&pool_lock, SP_RANK_POOL);
}

static void a_lock_out_of_order_aborts_naming_both(void **state)
{
    (void)state;
    char err[512];
    expect_abort(pool_under_heap, err, sizeof err);
    assert_non_null(strstr(err, "lock order violated"));
    assert_non_null(strstr(err, "taking pool->lock"));
    assert_non_null(strstr(err, "while holding heap->lock"));
}

static void two_pools(void)
{
    sp_mutex_lock(&pool_lock, SP_RANK_POOL);
    sp_mutex_lock(&other_pool_lock, SP_RANK_POOL);
}

static void two_locks_of_one_rank_abort(void **state)
{
    (void)state;
    char err[512];
    expect_abort(two_pools, err, sizeof err);
    assert_non_null(strstr(err, "taking pool->lock"));
    assert_non_null(strstr(err, "while holding pool->lock"));
}

static void spin_under_leaf(void)
{
    sp_spin_lock_ranked(&usage_lock, SP_RANK_LEAF);
    sp_spin_lock(&cache_lock);
}

static void a_spin_lock_under_a_leaf_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(spin_under_leaf, err, sizeof err);
    assert_non_null(strstr(err, "taking a spin lock"));
    assert_non_null(strstr(err, "while holding a leaf lock"));
}

static void fence_under_spin(void)
{
    sp_spin_lock(&cache_lock); /* a driver call's lock under a spin lock */
    sp_mutex_lock(&fence_lock, SP_RANK_FENCE);
}

static void a_mutex_under_a_spin_lock_aborts(void **state)
{
    (void)state;
    char err[512];
    expect_abort(fence_under_spin, err, sizeof err);
    assert_non_null(strstr(err, "taking cache->fence_lock"));
    assert_non_null(strstr(err, "while holding a spin lock"));
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
    assert_non_null(strstr(err, "releasing a lock this thread does not hold"));
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
        cmocka_unit_test(releasing_a_lock_not_held_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
