/* Names an attacker controls, for the output tests: the function that leaks is named, in the
 * symbol table, with a terminal escape that would retitle and clear a terminal and a bell,
 * bytes XML cannot carry. Built without debug info, so the symbol table is what names it, and
 * in one text section, as a section named after that function could not be assembled. Its one
 * 48-byte block is lost from a stack of 14 calls, deeper than the 10 return addresses recorded,
 * so the recorded stack is cut. Prints "done" and exits 0. */
// build: -g0 -O1 -fno-function-sections
#include <stdio.h>
#include <stdlib.h>

/* Static, so calls to it are direct: a quoted name cannot take @PLT. (No \001: the assembler
 * drops a symbol holding it, as it names its own local labels so.) */
static __attribute__((noinline)) void *evil(size_t n) __asm__("\"evil\033]0;pwned\007\033[2Jname\"");
static __attribute__((noinline)) void *evil(size_t n)
{
    void *p = malloc(n);
    /* The block leaves the function, so the optimiser keeps the call. */
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

void *volatile kept;

/* 13 distinct frames above evil, so no two return addresses are the same function. */
#define LEVEL(n, next)                                                                          \
    __attribute__((noinline)) static void *level##n(size_t s)                                  \
    {                                                                                           \
        void *p = next(s);                                                                      \
        __asm__ volatile("" : : "r"(p) : "memory");                                             \
        return p;                                                                               \
    }
LEVEL(1, evil)
LEVEL(2, level1)
LEVEL(3, level2)
LEVEL(4, level3)
LEVEL(5, level4)
LEVEL(6, level5)
LEVEL(7, level6)
LEVEL(8, level7)
LEVEL(9, level8)
LEVEL(10, level9)
LEVEL(11, level10)
LEVEL(12, level11)
LEVEL(13, level12)

int main(void)
{
    kept = level13(48);
    /* Lost: the only pointer is overwritten. */
    kept = NULL;
    printf("done\n");
    return 0;
}
