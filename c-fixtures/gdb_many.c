// build: -fno-optimize-sibling-calls
/* Leaks COUNT blocks of SIZE bytes (default 1000 and 700) from four different call stacks, then
 * exits; run with DMEM_OPTS=abort-shutdown it leaves a core whose heap is mostly those blocks.
 * The benchmark of `dmem summary` runs it with a million blocks, the tests with a few thousand.
 * Sibling-call optimisation is off so every function keeps its frame in the recorded stacks.
 */
#include <stdlib.h>
#include <string.h>

/* Each function fills a different byte so the compiler cannot fold them into one. */
__attribute__((noinline)) static void *many_leaf(size_t n, int fill)
{
    void *p = malloc(n);
    if (p)
        memset(p, fill, n < 64 ? n : 64);
    return p;
}

__attribute__((noinline)) static void *many_one(size_t n) { return many_leaf(n, 1); }
__attribute__((noinline)) static void *many_two(size_t n) { return many_one(n); }
__attribute__((noinline)) static void *many_other(size_t n) { return many_leaf(n, 3); }

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) : 1000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 700;
    void **keep = calloc((size_t)count, sizeof *keep);
    if (!keep)
        return 1;
    for (long i = 0; i < count; i++) {
        switch (i % 4) {
        case 0: keep[i] = many_leaf(size, 0); break;
        case 1: keep[i] = many_one(size); break;
        case 2: keep[i] = many_two(size); break;
        default: keep[i] = many_other(size); break;
        }
        if (!keep[i])
            return 1;
    }
    return 0;
}
