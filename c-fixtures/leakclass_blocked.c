// build: -O0
/* A worker that blocks every signal holds 50 blocks (40 bytes each) only in a volatile array on
 * its stack and sits in read() on a pipe nobody writes when main returns. A stop signal cannot
 * reach it, so the exit report must not wait for it beyond its bound, must name it ("thread TID
 * could not be stopped") and must still scan its stack as it is: the 50 blocks are still
 * reachable, as valgrind says. The worker's thread id is printed first, for the test to look for.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "leakclass_common.h"

#define NBLOCKS 50

static int ready[2], never[2];

static void *worker(void *arg)
{
    void *volatile keep[NBLOCKS];
    sigset_t all;
    char c;
    (void)arg;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (int i = 0; i < NBLOCKS; i++)
        keep[i] = must_malloc(40);
    long tid = syscall(SYS_gettid);
    if (write(ready[1], &tid, sizeof tid) != sizeof tid)
        exit(1);
    while (read(never[0], &c, 1) != 0)
        ;
    return (void *)keep[0];
}

int main(void)
{
    pthread_t t;
    long tid;
    if (pipe(ready) || pipe(never))
        return 1;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    if (read(ready[0], &tid, sizeof tid) != sizeof tid)
        return 1;
    /* Written with write(2), not stdio, so no stdio buffer is allocated. */
    char line[32];
    int n = snprintf(line, sizeof line, "worker %ld\n", tid);
    if (write(1, line, n) != n)
        return 1;
    return 0;
}
