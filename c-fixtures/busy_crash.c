// build: -O1
/* A busy program that crashes: eight workers allocate and free forever (malloc, calloc,
 * memalign, realloc and free, blocks kept in slots on their own stacks), main leaks one block of
 * 4321 bytes, waits until the workers are well under way, and then, by its first argument:
 *   segv      dereferences a bad pointer (the kernel writes the core while workers are inside
 *             malloc or free);
 *   corrupt   first overwrites the thread id and magic of a live block's header (the last 8
 *             bytes in front of it), then does the same;
 *   wait      prints "ready" and keeps running until killed (for gdb's gcore).
 * A core of it must verify clean (or, for corrupt, show the one overwritten header) and hold
 * exactly one definitely lost block of 4321 bytes. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { WORKERS = 8, SLOTS = 32 };

static atomic_long rounds;
/* Keeps the leak's address until main drops it, so the optimiser cannot drop the malloc. */
static void *volatile leak_slot;
static void *volatile kept;

static void *busy(void *arg) {
    unsigned long id = (unsigned long)arg;
    void *slot[SLOTS] = {0};
    for (unsigned long i = 0;; i++) {
        unsigned k = (unsigned)((i * 7 + id) % SLOTS);
        void *volatile *s = (void *volatile *)&slot[k];
        switch (i % 5) {
        case 0: free(*s); *s = malloc(16 + i % 200); break;
        case 1: free(*s); *s = calloc(1, 24 + i % 100); break;
        case 2: free(*s); *s = memalign(64, 48 + i % 64); break;
        case 3: *s = realloc(*s, 32 + i % 300); break;
        default: free(*s); *s = NULL; break;
        }
        if (*s)
            *(volatile char *)*s = (char)i;
        atomic_fetch_add_explicit(&rounds, 1, memory_order_relaxed);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "segv";
    leak_slot = malloc(4321);
    memset(leak_slot, 0x5a, 4321);
    leak_slot = NULL;
    kept = malloc(100);
    pthread_t t[WORKERS];
    for (unsigned long i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, busy, (void *)i);
    while (atomic_load(&rounds) < 200000)
        sched_yield();
    if (!strcmp(mode, "wait")) {
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (!strcmp(mode, "corrupt"))
        memset((char *)kept - 8, 0x41, 8);
    *(volatile int *)(uintptr_t)16 = 1;
    return 0;
}
