// build: -O2
/* The same leaks told by the exit report and by `dmem leaks` on the abort-shutdown core of the
 * same run, or on the running process (tests/exit_vs_core.rs). Given `wait`, the program makes
 * its leaks, says "ready" with write(2) (stdio's buffer would be freed on the way out) and
 * waits until its standard input ends before it exits. Built at -O2 so that the callers of the
 * allocations are inlined into main: every frame name, the inlined ones too, must come out the
 * same on both sides. A C function named `f` (a bare symbol, which a C++ demangler would read as
 * the type `float`) allocates some of them. What is left at exit:
 * - 3 blocks of 24 bytes from f, called from main: definitely lost;
 * - a 64-byte list head, definitely lost, holding 2 nodes of 40 bytes: indirectly lost;
 * - 5 blocks of 100 bytes allocated through two inlined callers: definitely lost;
 * - a 72-byte block held only through an interior pointer: possibly lost;
 * - a 32-byte block held from a global: still reachable.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node {
    struct node *next;
    long value[4];
};

struct head {
    struct node *first;
    long pad[7];
};

void *keep;
char *inside;

/* Not static and never inlined: the symbol `f` in the program's table. */
__attribute__((noinline)) void *f(size_t n)
{
    void *p = malloc(n);
    if (!p)
        exit(1);
    memset(p, 0x5a, n);
    return p;
}

static inline __attribute__((always_inline)) void *inner_make(size_t n)
{
    void *p = malloc(n);
    if (!p)
        exit(1);
    memset(p, 0x11, n);
    return p;
}

static inline __attribute__((always_inline)) void *outer_make(size_t n)
{
    return inner_make(n + 4);
}

__attribute__((noinline)) static void orphan_list(void)
{
    struct head *h = malloc(sizeof *h);
    if (!h)
        exit(1);
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 2; i++) {
        struct node *n = malloc(sizeof *n);
        if (!n)
            exit(1);
        memset(n, 0, sizeof *n);
        n->next = h->first;
        h->first = n;
    }
    /* Through a volatile pointer, so the stores stay. */
    *(void *volatile *)&keep = keep;
    __asm__ volatile("" : : "r"(h) : "memory");
}

/* Overwrites the dead stack frames below main, where the calls left block addresses. */
__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

/* Says "ready" and reads standard input to its end; never inlined, so that main's registers
 * hold nothing of the blocks while it waits. */
__attribute__((noinline)) static void wait_for_end(void)
{
    char buf[64];
    if (write(1, "ready\n", 6) != 6)
        exit(1);
    while (read(0, buf, sizeof buf) > 0)
        ;
}

int main(int argc, char **argv)
{
    for (int i = 0; i < 3; i++)
        __asm__ volatile("" : : "r"(f(24)) : "memory");
    orphan_list();
    for (int i = 0; i < 5; i++)
        __asm__ volatile("" : : "r"(outer_make(96)) : "memory");
    inside = (char *)inner_make(72) + 16;
    keep = f(32);
    scrub_stack();
    if (argc > 1 && strcmp(argv[1], "wait") == 0)
        wait_for_end();
    return 0;
}
