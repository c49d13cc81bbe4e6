/* A heap underflow: 100 blocks of 64 bytes allocated in a row and held in a global, then an
 * 8-byte write just before block 50, which lands on the size word of the 112-byte header
 * libdmem keeps in front of it (at offset 96 of the header, 16 bytes before the block), as a
 * negative index into an array would. The program never frees them, so bare it exits 0.
 *
 *   heap_underflow wild [wait|FILE]        writes "AAAAAAAA": a size of some 71 TB
 *   heap_underflow plausible [wait|FILE]   writes 100000: a size that could be true
 *   heap_underflow shrunk [wait|FILE]      writes 48: a size that fits where the block is
 *   heap_underflow intact [wait|FILE]      writes nothing
 *
 * It prints the broken header's address ("broken 0x...") and the block in front of it by
 * address ("before 0x..."), for the test to look for, to stdout and to FILE if one is named.
 * With "wait" it then prints "ready" and sleeps until it is killed, for the tests of a running
 * process.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCKS 100
#define HEADER 112
#define VICTIM 50

void *volatile held[BLOCKS];

__attribute__((noinline)) static void *make_block(int i)
{
    char *p = malloc(64);
    if (!p)
        abort();
    memset(p, 'a' + i % 26, 64);
    return p;
}

/* The bug: element -2 of an array of words that starts at `p`. */
__attribute__((noinline)) static void write_before(char *p, uint64_t value)
{
    volatile uint64_t *words = (volatile uint64_t *)p;
    words[-2] = value;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "wild";
    for (int i = 0; i < BLOCKS; i++)
        held[i] = make_block(i);
    char *victim = held[VICTIM];
    char *before = NULL;
    for (int i = 0; i < BLOCKS; i++) {
        char *p = held[i];
        if (p < victim && (!before || p > before))
            before = p;
    }
    printf("broken %p\nbefore %p\n", (void *)(victim - HEADER), (void *)before);
    int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
    if (argc > 2 && !wait) {
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 3;
        fprintf(f, "broken %p\nbefore %p\n", (void *)(victim - HEADER), (void *)before);
        fclose(f);
    }
    if (strcmp(mode, "wild") == 0) {
        write_before(victim, 0x4141414141414141ull);
    } else if (strcmp(mode, "plausible") == 0) {
        write_before(victim, 100000);
    } else if (strcmp(mode, "shrunk") == 0) {
        write_before(victim, 48);
    } else if (strcmp(mode, "intact") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (wait) {
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    return 0;
}
