// build: -O1 -ldl
/* A thread stopped inside malloc after its new block is linked, run with libslow_free.so as the
 * backend: the owner's blocks, freed by another thread, wait in its inbox, so its next malloc
 * links the new block and then gives those back through the backend's free, which waits there
 * for good. main returns meanwhile. The new block (77 bytes) is held by nothing but the
 * allocation in progress, which memcheck counts as the thread's: still reachable, never lost.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "leakclass_common.h"

#define N 8

static void *volatile blocks[N];
static volatile int made, freed;
static void (*arm)(pid_t);
static int (*waiting)(void);

static void *owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++)
        blocks[i] = must_malloc(40);
    made = 1;
    while (!freed)
        usleep(1000);
    arm(gettid());
    /* Never returns: the backend's free of the handed blocks waits. */
    void *q = must_malloc(77);
    printf("returned %p\n", q);
    return NULL;
}

static void *freer(void *arg)
{
    (void)arg;
    while (!made)
        usleep(1000);
    for (int i = 0; i < N; i++) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
    freed = 1;
    return NULL;
}

int main(void)
{
    arm = (void (*)(pid_t))dlsym(RTLD_DEFAULT, "slow_free_arm");
    waiting = (int (*)(void))dlsym(RTLD_DEFAULT, "slow_free_waiting");
    if (!arm || !waiting) {
        fprintf(stderr, "libslow_free.so is not loaded\n");
        return 1;
    }
    pthread_t a, b;
    if (pthread_create(&a, NULL, owner, NULL) || pthread_create(&b, NULL, freer, NULL))
        return 1;
    pthread_join(b, NULL);
    while (!waiting())
        usleep(1000);
    return 0;
}
