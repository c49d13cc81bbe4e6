// build: -O0
/* Leak classes, another thread's stack: a worker allocates 300 blocks and keeps them only in a
 * volatile array of pointers on its own stack, then waits on a condition variable that is never
 * signalled; main returns meanwhile. valgrind: the 300 blocks (64 bytes each) are still
 * reachable. glibc's own block for the worker's thread-local storage (its dtv, calloc'ed by
 * pthread_create and pointed to from inside) comes out as possibly lost, here as in valgrind.
 */
#include <pthread.h>
#include "leakclass_common.h"

#define NBLOCKS 300

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready, never;

static void *worker(void *arg)
{
    void *volatile keep[NBLOCKS];
    (void)arg;
    for (int i = 0; i < NBLOCKS; i++)
        keep[i] = must_malloc(64);
    pthread_mutex_lock(&lock);
    ready = 1;
    pthread_cond_broadcast(&cond);
    while (!never)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return (void *)keep[0];
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    pthread_mutex_lock(&lock);
    while (!ready)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return 0;
}
