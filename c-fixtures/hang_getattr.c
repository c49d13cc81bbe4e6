/* pthread_getattr_np as a thread's first act. glibc holds the target thread's lock while it
 * reallocs (the affinity mask, and for the main thread the lines of /proc/self/maps), so an
 * interposed realloc that itself asks for the calling thread's stack bounds the same way waits
 * for a lock its own thread holds. The JVM and LLVM do exactly this on every thread they start.
 *
 *   hang_getattr main     the main thread, first in an early constructor and again in main
 *   hang_getattr threads  threads whose first act is pthread_getattr_np on themselves
 *   hang_getattr cross    pairs of threads asking for each other's attributes
 *
 * Each mode prints what it checked; the output is the same on every run. */
#include "hang_common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 4, THREAD_STACK = 256 * 1024, CROSS_PAIRS = 1000, CROSS_ROUNDS = 20 };

static int early_ok = -1;

/* Runs before the program's other constructors, with the arguments main will get. */
__attribute__((constructor(101))) static void early(int argc, char **argv, char **envp)
{
    (void)envp;
    if (argc > 1 && strcmp(argv[1], "main") == 0) {
        size_t size;
        int probe;
        early_ok = own_stack_holds(&probe, &size);
    }
}

static int main_mode(void)
{
    size_t size;
    int probe;
    int ok = own_stack_holds(&probe, &size);
    char *s = malloc(64);
    snprintf(s, 64, "main thread: constructor %s, main %s", early_ok == 1 ? "yes" : "no", ok ? "yes" : "no");
    puts(s);
    free(s);
    return early_ok == 1 && ok ? 0 : 1;
}

static void *self_first(void *arg)
{
    size_t size = 0;
    int probe;
    int ok = own_stack_holds(&probe, &size);
    /* Then the thread goes on as a runtime would: allocate, grow, free. */
    char *buf = NULL;
    for (int i = 1; i <= 32; i++) {
        buf = realloc(buf, (size_t)i * 48);
        memset(buf, 'a' + i % 26, (size_t)i * 48);
    }
    long id = (long)(intptr_t)arg;
    char *line = malloc(128);
    snprintf(line, 128, "thread %ld: own stack %s, %zu bytes, last byte %c", id, ok ? "yes" : "no", size,
             buf[32 * 48 - 1]);
    free(buf);
    return line;
}

static int threads_mode(void)
{
    pthread_t t[THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], &attr, self_first, (void *)(intptr_t)i) != 0)
            return 1;
    pthread_attr_destroy(&attr);
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        char *line;
        pthread_join(t[i], (void **)&line);
        puts(line);
        bad += strstr(line, "own stack yes") == NULL;
        free(line);
    }
    return bad != 0;
}

/* Each thread of a pair asks for the other's attributes, holding the other's lock while glibc
 * allocates: two threads that then each wait in the allocator for their own lock wait forever.
 * Fresh pairs, released together by a barrier, so their first allocations meet. */
struct pair {
    pthread_t t[2];
    pthread_barrier_t start, done;
};

struct member {
    struct pair *pair;
    int me;
};

static void *cross(void *arg)
{
    struct member *m = arg;
    struct pair *p = m->pair;
    pthread_barrier_wait(&p->start);
    int good = 0;
    for (int i = 0; i < CROSS_ROUNDS; i++) {
        pthread_attr_t attr;
        size_t size = 0;
        if (pthread_getattr_np(p->t[1 - m->me], &attr) != 0)
            break;
        pthread_attr_getstacksize(&attr, &size);
        pthread_attr_destroy(&attr);
        good += size == THREAD_STACK;
    }
    /* Neither exits while the other may still ask about it: glibc answers ESRCH for a thread
     * that has exited. */
    pthread_barrier_wait(&p->done);
    return (void *)(intptr_t)(good != CROSS_ROUNDS);
}

static int cross_mode(void)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    int bad = 0;
    for (int n = 0; n < CROSS_PAIRS; n++) {
        struct pair p;
        struct member m[2] = {{&p, 0}, {&p, 1}};
        /* Main joins the start barrier, so both ids are stored before either thread reads one. */
        pthread_barrier_init(&p.start, NULL, 3);
        pthread_barrier_init(&p.done, NULL, 2);
        for (int i = 0; i < 2; i++)
            if (pthread_create(&p.t[i], &attr, cross, &m[i]) != 0)
                return 1;
        pthread_barrier_wait(&p.start);
        for (int i = 0; i < 2; i++) {
            void *r;
            pthread_join(p.t[i], &r);
            bad += r != NULL;
        }
        pthread_barrier_destroy(&p.start);
        pthread_barrier_destroy(&p.done);
    }
    pthread_attr_destroy(&attr);
    printf("cross: %d pairs, %d rounds each, %d thread(s) saw a wrong stack size\n", CROSS_PAIRS,
           CROSS_ROUNDS, bad);
    return bad != 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "main") == 0)
        return main_mode();
    if (strcmp(mode, "threads") == 0)
        return threads_mode();
    if (strcmp(mode, "cross") == 0)
        return cross_mode();
    fprintf(stderr, "usage: hang_getattr main|threads|cross\n");
    return 2;
}
