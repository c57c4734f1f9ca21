/* Holds a thread right after a mutex it unlocks, until the test thread lets it go: an
 * interposed pthread_mutex_unlock (the test executable's definition comes before libc's, for
 * the library's calls too). The thread to hold arms it with unlock_hold_arm(n) and is held after
 * its n-th unlock from then on; the test thread waits for that with unlock_hold_wait() and
 * resumes it with unlock_hold_let_go(). A fixture's teardown lets go too, for a test that failed
 * while a thread was held. Included by one file per test executable (it defines the wrapper). */
#ifndef SP_TEST_UNLOCK_HOLD_H
#define SP_TEST_UNLOCK_HOLD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>

#include "hold_point.h"

static hold_point unlock_hold = HOLD_POINT_INIT;
static _Thread_local int unlock_hold_after; /* unlocks left before this thread is held */

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    int rc = real(m);
    /* the hold's own unlocks come back here with this thread disarmed (its count is 0 then) */
    if (unlock_hold_after > 0 && m != &unlock_hold.mu && --unlock_hold_after == 0)
        hold_point_here(&unlock_hold);
    return rc;
}

/* In the thread to hold (0 disarms it). */
static inline void unlock_hold_arm(int unlocks)
{
    unlock_hold_after = unlocks;
}

/* In the test thread, before it starts the thread to hold. */
static inline void unlock_hold_reset(void)
{
    hold_point_reset(&unlock_hold);
}

/* In the test thread, which is not armed: its unlocks are only the real ones. */
static inline void unlock_hold_wait(void)
{
    hold_point_wait(&unlock_hold);
}

static inline void unlock_hold_let_go(void)
{
    hold_point_let_go(&unlock_hold);
}

#endif
