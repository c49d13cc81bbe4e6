// build: -O0
/* A big heap for timing `dmem leaks`: COUNT blocks (default 1,000,000) of SIZE bytes (default
 * 600), shaped like a server's heap. 40% are held by a table reached from a global, 30% sit in
 * held linked lists of 1000 nodes, 20% are leaked four-block structures (one direct, three
 * indirect) and 10% are leaked single blocks. Blocks are filled with non-pointer data so the
 * scan has real contents to go through.
 */
#include <stdint.h>
#include <stdlib.h>

#define MAX_LISTS (1 << 16)

void **table;
void *lists[MAX_LISTS];
static uint64_t seed = 88172645463325252UL;

static uint64_t next_random(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

__attribute__((noinline)) static void **block(size_t size, int pointers)
{
    void **p = malloc(size);
    if (!p)
        exit(1);
    size_t words = size / sizeof *p;
    for (size_t i = pointers; i < words; i++)
        p[i] = (void *)(uintptr_t)(next_random() >> 8);
    for (int i = 0; i < pointers && (size_t)i < words; i++)
        p[i] = NULL;
    return p;
}

__attribute__((noinline)) static void build(long count, size_t size)
{
    long held = count * 4 / 10, listed = count * 3 / 10, trees = count * 2 / 10 / 4;
    long singles = count - held - listed - trees * 4;
    table = (void **)block((size_t)held * sizeof(void *) + sizeof(void *), 0);
    for (long i = 0; i < held; i++)
        table[i] = block(size, 0);
    for (long i = 0; i < listed; i++) {
        long l = (i / 1000) % MAX_LISTS;
        void **p = block(size, 1);
        p[0] = lists[l];
        lists[l] = p;
    }
    for (long i = 0; i < trees; i++) {
        void **root = block(size, 3);
        for (int k = 0; k < 3; k++)
            root[k] = block(size, 0);
    }
    for (long i = 0; i < singles; i++)
        block(size, 0);
}

/* Overwrites the dead stack frames below main, where the builders left block addresses. */
__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) : 1000000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 600;
    build(count, size);
    scrub_stack();
    return 0;
}
