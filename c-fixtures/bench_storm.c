// build: -O2 -fomit-frame-pointer
/* A two-thread malloc/realloc/free storm with cross-thread frees, for the bench.
 *
 * Each thread owns a table of slots and, from the bottom of a call chain a dozen frames deep (so
 * a recorded stack is a full one), repeatedly mallocs into an empty slot, reallocs or frees a full
 * one, and every so often hands a block to the other thread, which frees it. The handover goes
 * through a lock-free single-producer ring per direction, so the storm measures the allocator
 * path and not a mutex of its own.
 *
 * usage: bench_storm [ITERATIONS_PER_THREAD]   (default 2000000)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096
#define RING 1024
#define DEPTH 12

struct ring {
    _Atomic size_t head; /* written by the consumer */
    char pad1[56];
    _Atomic size_t tail; /* written by the producer */
    char pad2[56];
    void *items[RING];
};

struct worker {
    int id;
    long iterations;
    uint64_t rng;
    void *slots[SLOTS];
    struct ring *out; /* blocks this thread hands over */
    struct ring *in;  /* blocks this thread frees for the other */
    long handed, freed_foreign;
};

static struct ring rings[2];
static _Atomic int running;

static uint64_t
next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int
push(struct ring *r, void *p)
{
    size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t - atomic_load_explicit(&r->head, memory_order_acquire) == RING)
        return 0;
    r->items[t % RING] = p;
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    return 1;
}

static long
drain(struct ring *r)
{
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    size_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    long n = 0;
    for (; h != t; h++, n++)
        free(r->items[h % RING]);
    atomic_store_explicit(&r->head, h, memory_order_release);
    return n;
}

/* One operation on one slot: the leaf of the call chain, where every allocation happens. */
static __attribute__((noinline)) void
operate(struct worker *w)
{
    uint64_t r = next(&w->rng);
    size_t i = r % SLOTS;
    size_t size = 16 + (r >> 20) % 1000;
    void *p = w->slots[i];
    if (!p) {
        p = malloc(size);
        memset(p, (int)i, 16);
        w->slots[i] = p;
    } else if ((r >> 40) % 4 == 0) {
        p = realloc(p, size * 2);
        memset(p, 1, 16);
        w->slots[i] = p;
    } else if ((r >> 40) % 4 == 1 && push(w->out, p)) {
        w->slots[i] = NULL;
        w->handed++;
    } else {
        free(p);
        w->slots[i] = NULL;
    }
}

static __attribute__((noinline)) void
chain(struct worker *w, int depth)
{
    if (depth == 0)
        operate(w);
    else
        chain(w, depth - 1);
    __asm__ volatile("" ::: "memory"); /* keep the call a call, not a tail jump */
}

static void *
run(void *arg)
{
    struct worker *w = arg;
    for (long k = 0; k < w->iterations; k++) {
        chain(w, DEPTH);
        if ((k & 63) == 0)
            w->freed_foreign += drain(w->in);
    }
    atomic_fetch_sub(&running, 1);
    /* Keep freeing what the other thread hands over until it is done too. */
    while (atomic_load(&running) > 0)
        w->freed_foreign += drain(w->in);
    w->freed_foreign += drain(w->in);
    for (size_t i = 0; i < SLOTS; i++)
        free(w->slots[i]);
    return NULL;
}

int
main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 2000000;
    static struct worker workers[2];
    pthread_t t[2];
    atomic_store(&running, 2);
    for (int i = 0; i < 2; i++) {
        workers[i].id = i;
        workers[i].iterations = iterations;
        workers[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        workers[i].out = &rings[i];
        workers[i].in = &rings[1 - i];
        pthread_create(&t[i], NULL, run, &workers[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("storm: %ld iterations x 2 threads, %ld + %ld blocks freed by the other thread\n",
           iterations, workers[1].freed_foreign, workers[0].freed_foreign);
    return 0;
}
