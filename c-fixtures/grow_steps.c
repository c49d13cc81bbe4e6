// build: -O0
/* A heap that changes by known amounts between two moments, for `dmem diff`.
 *
 *   grow_steps GROW_BLOCKS GROW_SIZE
 *
 * First it allocates 50 blocks of 32 bytes from hold_steady() (through the inlined
 * steady_block()) and 20 blocks of 100 bytes from
 * hold_shrinking(), prints "ready 1" and waits for a line on stdin. Then it allocates
 * GROW_BLOCKS blocks of GROW_SIZE bytes from grow(), frees 10 of the 100-byte blocks, prints
 * "ready 2" and waits for stdin to close; it exits without freeing anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *steady[50];
static void *shrinking[20];
static void **grown;

/* Always inlined, so the steady blocks' first return address lies in inlined code: DWARF
 * names steady_block inlined into hold_steady there. */
static inline __attribute__((always_inline)) void *steady_block(void)
{
    return memset(malloc(32), 1, 32);
}

__attribute__((noinline)) static void hold_steady(void)
{
    for (int i = 0; i < 50; i++)
        steady[i] = steady_block();
}

__attribute__((noinline)) static void hold_shrinking(void)
{
    for (int i = 0; i < 20; i++)
        shrinking[i] = memset(malloc(100), 2, 100);
}

__attribute__((noinline)) static void grow(long blocks, size_t size)
{
    for (long i = 0; i < blocks; i++)
        grown[i] = memset(malloc(size), 3, size);
}

/* Waits with read(2), not stdio: stdin's buffer would be allocated while the first moment is
 * being looked at, and show up as a change. */
static void wait_line(void)
{
    char line[64];
    if (read(0, line, sizeof line) <= 0)
        exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    long blocks = atol(argv[1]);
    size_t size = (size_t)atol(argv[2]);
    /* The table of grown blocks comes from calloc before the first moment, so it is steady. */
    grown = calloc((size_t)blocks + 1, sizeof *grown);
    hold_steady();
    hold_shrinking();
    printf("ready 1\n");
    fflush(stdout);
    wait_line();

    grow(blocks, size);
    for (int i = 0; i < 10; i++)
        free(shrinking[i]);
    printf("ready 2\n");
    fflush(stdout);
    char rest[64];
    while (read(0, rest, sizeof rest) > 0)
        ;
    return 0;
}
