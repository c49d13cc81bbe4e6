// build: -O0
/* Ground truth for leak finding. At exit the heap holds a 1000-node list reached from a global,
 * an orphaned 1000-node list and 500 orphaned blocks: exactly 1000 blocks are reachable, 501 are
 * direct leaks (the orphaned list's head and the 500 singles) and 999 are indirect (the rest of
 * the orphaned list), as valgrind counts them.
 *
 * Built without optimisation so that every store into the blocks stays. Addresses of a few
 * orphans are kept XORed with a constant: a debugger can find them again (`dmem why`) while
 * they stay invisible to a conservative scan.
 */
#include <stdint.h>
#include <stdlib.h>

#define HIDE 0x5a5a5a5a5a5a5a5aUL

struct node {
    struct node *next;
    long value;
};

struct node *held;
uintptr_t orphan_head_x, orphan_middle_x, orphan_single_x;

__attribute__((noinline)) static struct node *make_list(int n, long tag)
{
    struct node *head = NULL, **tail = &head;
    for (int i = 0; i < n; i++) {
        struct node *p = malloc(sizeof *p);
        if (!p)
            exit(1);
        p->next = NULL;
        p->value = tag + i;
        *tail = p;
        tail = &p->next;
    }
    return head;
}

__attribute__((noinline)) static void make_orphan_list(void)
{
    struct node *head = make_list(1000, 2000000);
    struct node *p = head;
    for (int i = 0; i < 500; i++)
        p = p->next;
    orphan_head_x = (uintptr_t)head ^ HIDE;
    orphan_middle_x = (uintptr_t)p ^ HIDE;
}

__attribute__((noinline)) static void *make_single(int i)
{
    long *p = malloc(24);
    if (!p)
        exit(1);
    p[0] = i;
    p[1] = 0;
    p[2] = -1;
    return p;
}

__attribute__((noinline)) static void make_orphans(void)
{
    for (int i = 0; i < 500; i++) {
        void *p = make_single(i);
        if (i == 0)
            orphan_single_x = (uintptr_t)p ^ HIDE;
    }
}

/* Overwrites the dead stack frames below main, where the builders left block addresses. */
__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main(void)
{
    make_orphan_list();
    make_orphans();
    /* Last, so that malloc's pointer to the free space after the last block (the top chunk, in
     * libc's data) falls inside a held block: glibc's chunks share their boundary word with the
     * next chunk, so that pointer looks like one into the block just before it. */
    held = make_list(1000, 1000000);
    scrub_stack();
    return 0;
}
