// build: -O0
/* Leak classes, a thread that has ended but was not joined: it kept 8 blocks of 48 bytes only in
 * locals of its own frame and returned. Its stack is no thread's any more, so those frames are
 * dead (no root); but its descriptor at the top of that stack, which glibc keeps until the
 * thread is joined, is memory of the process still, and points into glibc's block for the
 * thread's TLS (its dtv). Main waits until the kernel has seen the thread end.
 * valgrind: the 8 blocks definitely lost, the dtv possibly lost.
 *
 * With the argument `ready` main prints "ready" and waits to be killed instead of returning.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "leakclass_common.h"

#define NBLOCKS 8

static volatile pid_t worker_tid;

static void *worker(void *arg)
{
    void *volatile keep[NBLOCKS];
    (void)arg;
    for (int i = 0; i < NBLOCKS; i++)
        keep[i] = must_malloc(48);
    worker_tid = gettid();
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t;
    char task[64];
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    while (!worker_tid)
        usleep(100);
    snprintf(task, sizeof task, "/proc/self/task/%d", (int)worker_tid);
    while (access(task, F_OK) == 0)
        usleep(100);
    if (argc > 1 && strcmp(argv[1], "ready") == 0) {
        /* write(), not stdio: its buffer would be one more block than a bare run leaves. */
        if (write(1, "ready\n", 6) != 6)
            exit(1);
        for (;;)
            pause();
    }
    return 0;
}
