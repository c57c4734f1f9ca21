/* A point where one thread is held until the test thread lets it go. The thread to hold calls
 * hold_point_here (it tells the test thread it arrived, then waits); the test thread waits for
 * the arrival with hold_point_wait and resumes it with hold_point_let_go; hold_point_reset, in the
 * test thread before the thread to hold starts, makes the point ready for another round. The
 * stream gates of test_support.h (a host function held) and the interposed calls that hold a
 * thread inside the library (support/unlock_hold.h, test_tenants.c's driver allocation) stop
 * there. */
#ifndef SP_TEST_HOLD_POINT_H
#define SP_TEST_HOLD_POINT_H

#include <pthread.h>
#include <stdbool.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool arrived, proceed;
} hold_point;

#define HOLD_POINT_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false}

static inline void hold_point_reset(hold_point *h)
{
    h->arrived = h->proceed = false;
}

static inline void hold_point_here(hold_point *h)
{
    pthread_mutex_lock(&h->mu);
    h->arrived = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->proceed)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static inline void hold_point_wait(hold_point *h)
{
    pthread_mutex_lock(&h->mu);
    while (!h->arrived)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static inline void hold_point_let_go(hold_point *h)
{
    pthread_mutex_lock(&h->mu);
    h->proceed = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

#endif
