// build: -pthread
/* A storm of threads allocating and freeing, for reading while it runs (`dmem top`'s storm test
 * and the reader's cost in bench/live_read.sh).
 *
 * THREADS threads share a table of SLOTS slots. Each operation picks a slot at random and
 * swaps it with empty: a block found there is freed (often one another thread allocated), an
 * empty slot gets a new block of 16 to 1024 bytes. So about half the slots hold a block, and
 * blocks are freed by threads other than the one that allocated them.
 *
 * usage: top_storm SECONDS [THREADS]   (default 4 threads)
 * Prints "ready" when the threads start and, at the end, "ops N": the operations done, for
 * throughput.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SLOTS 16384

static _Atomic(void *) slots[SLOTS];
static atomic_int stop;
static atomic_long total_ops;

static __attribute__((noinline)) void *
storm_alloc(size_t size)
{
    void *p = malloc(size);
    *(volatile char *)p = 1;
    return p;
}

static __attribute__((noinline)) void
storm_free(void *p)
{
    free(p);
}

static void *
worker(void *arg)
{
    uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15u + 1;
    long ops = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 256; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t i = x % SLOTS;
            void *old = atomic_exchange_explicit(&slots[i], NULL, memory_order_acq_rel);
            if (old) {
                storm_free(old);
            } else {
                void *p = storm_alloc(16 + (x >> 20) % 1009);
                void *prev = atomic_exchange_explicit(&slots[i], p, memory_order_acq_rel);
                if (prev)
                    storm_free(prev);
            }
            ops++;
        }
    }
    atomic_fetch_add(&total_ops, ops);
    return NULL;
}

int
main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        threads = 4;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    printf("ready\n");
    fflush(stdout);
    struct timespec pause = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&pause, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("ops %ld\n", atomic_load(&total_ops));
    return 0;
}
