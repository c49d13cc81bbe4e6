// build: -O0 -pthread
/* Allocations of known numbers and shapes, for the per-stack counts (DMEM_OPTS=count-allocs).
 * Each function below is one allocation stack (one call site of malloc, reached from one call
 * site in main):
 *
 *   temp_alloc    TEMPS blocks of 64 bytes, each freed before the next allocation: every one a
 *                 temporary allocation;
 *   keep_alloc    KEPT blocks of 128 bytes, held to the end: none temporary;
 *   pair_alloc    PAIRS pairs of 32-byte blocks, both of a pair allocated before either is
 *                 freed: of each pair only the second is temporary;
 *   thread_alloc  on a second thread, THREAD_TEMPS blocks of 48 bytes each freed at once.
 *
 *   count_allocs           does the above once and exits (the tests take its core)
 *   count_allocs live S    allocates the KEPT blocks, prints "ready", then for S seconds makes
 *                          100 temporary allocations every millisecond; for reading a running
 *                          process, where temp_alloc never holds more than one block
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define TEMPS 20000
#define KEPT 3000
#define PAIRS 5000
#define THREAD_TEMPS 7000

static void *kept[KEPT];
static int nkept;

static void *
must(void *p)
{
    if (!p)
        abort();
    return p;
}

static void
temp_alloc(void)
{
    char *p = must(malloc(64));
    memset(p, 1, 64);
    free(p);
}

static void
keep_alloc(void)
{
    kept[nkept] = must(malloc(128));
    memset(kept[nkept], 2, 128);
    nkept++;
}

static void *
pair_alloc(void)
{
    void *p = must(malloc(32));
    memset(p, 3, 32);
    return p;
}

static void *
thread_alloc(void *arg)
{
    (void)arg;
    for (int i = 0; i < THREAD_TEMPS; i++) {
        char *p = must(malloc(48));
        memset(p, 4, 48);
        free(p);
    }
    return NULL;
}

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "live") == 0) {
        /* Any process of this user may read it despite Yama's ptrace_scope=1. */
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
        double end = now() + atof(argv[2]);
        while (nkept < KEPT)
            keep_alloc();
        printf("ready\n");
        fflush(stdout);
        struct timespec ms = {0, 1000000};
        while (now() < end) {
            for (int i = 0; i < 100; i++)
                temp_alloc();
            nanosleep(&ms, NULL);
        }
        return 0;
    }
    for (int i = 0; i < TEMPS; i++)
        temp_alloc();
    for (int i = 0; i < KEPT; i++)
        keep_alloc();
    for (int i = 0; i < PAIRS; i++) {
        void *pair[2];
        for (int k = 0; k < 2; k++)
            pair[k] = pair_alloc();
        free(pair[0]);
        free(pair[1]);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, thread_alloc, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    printf("done\n");
    return 0;
}
