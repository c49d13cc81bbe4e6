// build: -O0
/* Leak classes, dead frames: a worker calls a function that keeps the only pointer to a 40-byte
 * block in the lowest slot of a large array on its stack, and returns; the worker then waits on
 * a condition variable nobody signals, its stack pointer far above that slot, which is now
 * below it (a frame that has returned). It also holds a 24-byte block in its own live frame.
 * The worker's thread-local storage lies right above its frames, at the top of its stack.
 * valgrind: the block in the dead frame definitely lost, the live frame's still reachable, and
 * glibc's block for the worker's TLS (its dtv) possibly lost.
 *
 * With the argument `ready` main prints "ready" and waits to be killed instead of returning.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "leakclass_common.h"

#define SLOTS 400

__attribute__((noinline)) static void deep(void)
{
    void *volatile slots[SLOTS];
    for (int i = 0; i < SLOTS; i++)
        slots[i] = NULL;
    slots[0] = must_malloc(40);
}

static void *worker(void *arg)
{
    void *volatile held = must_malloc(24);
    (void)arg;
    deep();
    announce_and_wait_forever();
    return (void *)held;
}

int main(int argc, char **argv)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    wait_for_worker();
    if (argc > 1 && strcmp(argv[1], "ready") == 0) {
        /* write(), not stdio: its buffer would be one more block than a bare run leaves. */
        if (write(1, "ready\n", 6) != 6)
            exit(1);
        for (;;)
            pause();
    }
    return 0;
}
