// build: -O0
/* Leak classes, interior pointers: 10 zeroed 64-byte parents are referenced from a global array
 * only by pointers 40 bytes into them, and each parent holds (at offset 0) the start of a 32-byte
 * child: all 20 are possibly lost. Offset 40 into a zeroed block matches none of valgrind's
 * default heuristics (stdstring, length64, newarray, multipleinheritance). One more 64-byte block
 * is held from a global by its start: still reachable.
 * valgrind: 20 possibly lost (960 bytes), 1 still reachable (64 bytes).
 */
#include <string.h>
#include "leakclass_common.h"

#define NPARENTS 10

char *inside[NPARENTS];
void *held;

__attribute__((noinline)) static void make_parents(void)
{
    for (int i = 0; i < NPARENTS; i++) {
        char *parent = must_malloc(64);
        memset(parent, 0, 64);
        char *child = must_malloc(32);
        memset(child, 0, 32);
        memcpy(parent, &child, sizeof child);
        inside[i] = parent + 40;
    }
}

int main(void)
{
    make_parents();
    held = must_malloc(64);
    memset(held, 0, 64);
    scrub_stack();
    return 0;
}
