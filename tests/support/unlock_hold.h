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
#include <pthread.h>
#include <stdbool.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool held, proceed;
} unlock_hold = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
static _Thread_local int unlock_hold_after; /* unlocks left before this thread is held */

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    int rc = real(m);
    if (unlock_hold_after > 0 && m != &unlock_hold.mu && --unlock_hold_after == 0) {
        pthread_mutex_lock(&unlock_hold.mu);
        unlock_hold.held = true;
        pthread_cond_broadcast(&unlock_hold.cv);
        while (!unlock_hold.proceed)
            pthread_cond_wait(&unlock_hold.cv, &unlock_hold.mu);
        real(&unlock_hold.mu);
    }
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
    unlock_hold.held = unlock_hold.proceed = false;
}

static inline void unlock_hold_wait(void)
{
    pthread_mutex_lock(&unlock_hold.mu);
    while (!unlock_hold.held)
        pthread_cond_wait(&unlock_hold.cv, &unlock_hold.mu);
    pthread_mutex_unlock(&unlock_hold.mu); /* not armed in this thread: the real unlock */
}

static inline void unlock_hold_let_go(void)
{
    pthread_mutex_lock(&unlock_hold.mu);
    unlock_hold.proceed = true;
    pthread_cond_broadcast(&unlock_hold.cv);
    pthread_mutex_unlock(&unlock_hold.mu);
}

#endif
