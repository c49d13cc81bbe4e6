/* Shared by the leakclass_* fixtures (leak classes compared with valgrind). */
#ifndef LEAKCLASS_COMMON_H
#define LEAKCLASS_COMMON_H

#include <pthread.h>
#include <stdlib.h>

/* malloc that exits on failure, so no fixture carries on with a null block. */
static inline void *must_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        exit(1);
    return p;
}

/* Overwrites the dead stack frames below the caller, where the builders left block addresses
 * that a conservative scan from the exit path's stack pointer would otherwise take for live
 * references. */
__attribute__((noinline, unused)) static void scrub_stack(void)
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

static pthread_mutex_t parking_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parking_cond = PTHREAD_COND_INITIALIZER;
static int parking_ready, parking_never;

/* For a worker: says it is ready, then waits on a condition variable nobody signals, so it is
 * alive (blocked in a futex wait) when main returns. */
__attribute__((unused)) static void announce_and_wait_forever(void)
{
    pthread_mutex_lock(&parking_lock);
    parking_ready = 1;
    pthread_cond_broadcast(&parking_cond);
    while (!parking_never)
        pthread_cond_wait(&parking_cond, &parking_lock);
    pthread_mutex_unlock(&parking_lock);
}

/* For main: waits until a worker has called announce_and_wait_forever. */
__attribute__((unused)) static void wait_for_worker(void)
{
    pthread_mutex_lock(&parking_lock);
    while (!parking_ready)
        pthread_cond_wait(&parking_cond, &parking_lock);
    pthread_mutex_unlock(&parking_lock);
}

#endif
