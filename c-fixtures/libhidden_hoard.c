/* A library whose allocating function is static: its name is in the file's symbol table and
 * DWARF only, never in a process's memory, so only a reader of the file can learn it. The tests
 * of `dmem serve` install it where only root may read it and check that no other user learns
 * the name through the server. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void *treasure_keeper_b71e(size_t n)
{
    void *p = malloc(n);
    if (!p)
        abort();
    memset(p, 0x3c, n);
    return p;
}

/* The one exported function: blocks from the hidden one. */
void *hoard(size_t n)
{
    return treasure_keeper_b71e(n);
}
