/* Leaks from two call paths of different weight, so a flame graph of its core has a shape to
 * check: main -> build_tree -> make_node holds 64 blocks of 1000 bytes, main -> make_label holds
 * one of 100. */
#include <stdlib.h>
#include <string.h>

/* noipa: no inlining and no specialised clones, so each function keeps its own name. */
#define NOINLINE __attribute__((noipa))

static void *volatile sink;

NOINLINE static void *
make_node(size_t size)
{
    void *p = malloc(size);
    memset(p, 'n', size); /* not zero, or the compiler makes this a call to calloc */
    return p;
}

NOINLINE static void
build_tree(int n)
{
    for (int i = 0; i < n; i++)
        sink = make_node(1000);
}

NOINLINE static void
make_label(void)
{
    sink = malloc(100);
}

int
main(void)
{
    build_tree(64);
    make_label();
    return 0;
}
