/* A block allocated in make_victim, freed in first_free by a thread that then frees thousands
 * of other blocks and exits, and then, on the main thread:
 *
 *   history_double double [N]   freed again in second_free: a double free
 *   history_double exit [N]     returns from main (with abort-shutdown, a core holding the history)
 *   history_double wait [N]     waits until stdin closes (a running process to read)
 *
 * N (default 5000) is how many other blocks the freeing thread frees after the victim, so a
 * small history=N wraps. The victim's address is printed first. The other blocks are larger
 * than the victim, so glibc never hands its memory out again before the second free. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile victim;
static long others = 5000;
/* Counted after each free of the victim, so that neither free is a tail call and each
 * function's frame is on the stack of its free. */
static volatile int frees;

__attribute__((noinline)) static void *make_victim(void)
{
    void *p = malloc(333);
    memset(p, 1, 333);
    return p;
}

__attribute__((noinline)) static void first_free(void *p)
{
    free(p);
    frees++;
}

__attribute__((noinline)) static void churn(long n)
{
    for (long i = 0; i < n; i++) {
        void *volatile q = malloc(600 + i % 64);
        free(q);
    }
}

static void *freeing_thread(void *arg)
{
    first_free(arg);
    churn(others);
    return NULL;
}

__attribute__((noinline)) static void second_free(void *p)
{
    free(p);
    frees++;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (argc > 2)
        others = atol(argv[2]);
    victim = make_victim();
    printf("victim %p\n", victim);
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, freeing_thread, victim);
    pthread_join(t, NULL);
    if (!strcmp(mode, "double")) {
        second_free(victim);
    } else if (!strcmp(mode, "exit")) {
        return 0;
    } else if (!strcmp(mode, "wait")) {
        printf("waiting\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
    } else {
        fprintf(stderr, "usage: history_double double|exit|wait [N]\n");
        return 2;
    }
    return 0;
}
