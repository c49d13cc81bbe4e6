/* Shared by the leakclass_* fixtures (leak classes compared with valgrind). */
#ifndef LEAKCLASS_COMMON_H
#define LEAKCLASS_COMMON_H

#include <stdlib.h>

/* malloc that exits on failure, so no fixture carries on with a null block. */
static inline void *must_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        exit(1);
    return p;
}

/* Overwrites the dead stack frames below the caller, where the builders left block addresses
 * that a conservative scan from the exit path's stack pointer would otherwise take for live
 * references. */
__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

#endif
