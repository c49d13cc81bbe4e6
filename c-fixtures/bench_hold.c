// build: -pthread
/* Holds many live blocks and waits: the heap `bench/live_read.sh` reads with `dmem top`.
 *
 * THREADS threads each allocate BLOCKS/THREADS blocks of 16 to 256 bytes from one of 64
 * call sites (so there are 64 stacks per thread's chain), print "ready" once all are held,
 * and the process then sleeps until its standard input closes.
 *
 * usage: bench_hold BLOCKS THREADS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long per_thread;

#define SITE(n)                                                                                \
    static __attribute__((noinline)) void *site##n(size_t size)                               \
    {                                                                                          \
        void *p = malloc(size);                                                                \
        __asm__ volatile("" ::"r"(p) : "memory");                                              \
        return p;                                                                              \
    }
#define SITES8(n) SITE(n##0) SITE(n##1) SITE(n##2) SITE(n##3) SITE(n##4) SITE(n##5) SITE(n##6) SITE(n##7)
SITES8(1) SITES8(2) SITES8(3) SITES8(4) SITES8(5) SITES8(6) SITES8(7) SITES8(8)
#define REF8(n) site##n##0, site##n##1, site##n##2, site##n##3, site##n##4, site##n##5, site##n##6, site##n##7
static void *(*sites[64])(size_t) = {REF8(1), REF8(2), REF8(3), REF8(4), REF8(5), REF8(6), REF8(7), REF8(8)};

static void *
hold(void *arg)
{
    unsigned long seed = (unsigned long)arg * 2654435761u + 1;
    void **keep = malloc(per_thread * sizeof *keep);
    for (long i = 0; i < per_thread; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        keep[i] = sites[(seed >> 33) % 64](16 + (seed >> 40) % 241);
    }
    return keep;
}

int
main(int argc, char **argv)
{
    long blocks = argc > 1 ? atol(argv[1]) : 1000000;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    per_thread = blocks / threads;
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++)
        pthread_create(&t[i], NULL, hold, (void *)(long)i);
    for (int i = 0; i < threads && i < 64; i++)
        pthread_join(t[i], NULL);
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}
