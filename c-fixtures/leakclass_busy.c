// build: -O1
/* Threads busy in malloc and free when main returns: each of 8 workers keeps 64 slots in an
 * array on its own stack and forever frees one slot's block and allocates another. Whatever
 * moment the exit report stops them, every live block is held by a worker's stack or, for the
 * block being handed over, by its registers: nothing is definitely or indirectly lost (only
 * glibc's dtv blocks of the workers are possibly lost). Run repeatedly, this catches a stop that
 * misses a thread, reads a stack or registers wrongly, or deadlocks with a worker inside the
 * allocator.
 */
#include <stdint.h>
#include <unistd.h>
#include "leakclass_common.h"

#define NWORKERS 8
#define NSLOTS 64

static int started;
/* Rounds each worker has made, so main returns only once every slot array is mostly full,
 * however the threads were scheduled. */
static unsigned long rounds[NWORKERS];

static void *churn(void *arg)
{
    void *volatile keep[NSLOTS] = {0};
    uint32_t r = (uint32_t)(uintptr_t)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        r = r * 1103515245u + 12345u;
        unsigned i = (r >> 8) % NSLOTS;
        free(keep[i]);
        keep[i] = must_malloc((r >> 16) % 4000 + 1);
        __atomic_add_fetch(&rounds[(uintptr_t)arg - 1], 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(void)
{
    for (uintptr_t i = 0; i < NWORKERS; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, churn, (void *)(i + 1)))
            return 1;
    }
    while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < NWORKERS)
        usleep(1000);
    for (int i = 0; i < NWORKERS; i++)
        while (__atomic_load_n(&rounds[i], __ATOMIC_RELAXED) < 1000)
            usleep(1000);
    usleep(20000);
    return 0;
}
