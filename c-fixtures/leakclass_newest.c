// build: -O0
/* Leak classes, a thread's newest block: a worker allocates one 64-byte block, drops its only
 * pointer, and parks until exit. libdmem keeps the address of each thread's newest block in
 * its own area of the thread's static TLS, which is libdmem's memory, no root: valgrind, with
 * no such area, says 1 definitely lost (and glibc's block for the worker's TLS, its dtv,
 * possibly lost); the exit report and a core must say the same.
 */
#include "leakclass_common.h"

__attribute__((noinline)) static void drop_one(void)
{
    long *p = must_malloc(64);
    p[0] = 1;
}

static void *worker(void *arg)
{
    (void)arg;
    drop_one();
    scrub_stack();
    announce_and_wait_forever();
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    wait_for_worker();
    scrub_stack();
    return 0;
}
