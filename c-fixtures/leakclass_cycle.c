// build: -O0
/* Leak classes, cycles:
 * - an orphaned 3-block cycle: 1 definitely lost, 2 indirectly lost;
 * - an orphaned head pointing into an orphaned 2-block cycle: 1 definitely lost (the head), 2
 *   indirectly lost. The cycle is allocated before the head, so in address order the cycle
 *   comes first and heads a clique of its own until the head's clique takes it over;
 * - a 4-block cycle held from a global: 4 still reachable.
 * valgrind: 2 definitely lost, 4 indirectly lost, 4 still reachable (48-byte blocks).
 */
#include "leakclass_common.h"

struct node {
    struct node *next;
    long value[5];
};

struct node *held;

/* A cycle of n nodes; returns one of them. */
__attribute__((noinline)) static struct node *make_cycle(int n, long tag)
{
    struct node *first = NULL, *prev = NULL;
    for (int i = 0; i < n; i++) {
        struct node *p = must_malloc(sizeof *p);
        p->next = NULL;
        for (int k = 0; k < 5; k++)
            p->value[k] = tag + i;
        if (prev)
            prev->next = p;
        else
            first = p;
        prev = p;
    }
    prev->next = first;
    return first;
}

__attribute__((noinline)) static void orphan_head_on_cycle(void)
{
    struct node *cycle = make_cycle(2, 200);
    struct node *head = must_malloc(sizeof *head);
    head->next = cycle;
    for (int k = 0; k < 5; k++)
        head->value[k] = 300;
}

int main(void)
{
    make_cycle(3, 100);
    orphan_head_on_cycle();
    held = make_cycle(4, 400);
    scrub_stack();
    return 0;
}
