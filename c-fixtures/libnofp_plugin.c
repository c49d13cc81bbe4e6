// build: -O2 -fomit-frame-pointer
/* A module that nofp_dlchurn loads, uses and unloads over and over. Its two functions allocate
 * from a frame of FRAME_BYTES; libnofp_plugin2.c is this same code with a larger frame, so when
 * it is loaded where this one was, the same return addresses need different unwind rules. */
#include <stdlib.h>

#ifndef FRAME_BYTES
#define FRAME_BYTES 512
#endif

__attribute__((noinline)) void *
plugin_inner(size_t n)
{
    char scratch[FRAME_BYTES];
    scratch[0] = (char)n;
    __asm__ volatile("" : : "r"(scratch) : "memory");
    char *p = malloc(n);
    p[0] = scratch[0];
    return p;
}

__attribute__((noinline)) void *
plugin_entry(size_t n)
{
    void *p = plugin_inner(n);
    __asm__ volatile("" : : : "memory"); /* a call, not a tail jump */
    return p;
}
