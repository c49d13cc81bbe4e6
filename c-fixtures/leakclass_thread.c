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

static void *worker(void *arg)
{
    void *volatile keep[NBLOCKS];
    (void)arg;
    for (int i = 0; i < NBLOCKS; i++)
        keep[i] = must_malloc(64);
    announce_and_wait_forever();
    return (void *)keep[0];
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    wait_for_worker();
    return 0;
}
