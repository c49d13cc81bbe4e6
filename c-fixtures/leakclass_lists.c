// build: -O0
/* Leak classes, lists: a 1000-node list held in a global (1000 still reachable), a 1000-node
 * list orphaned (1 definitely lost, 999 indirectly lost) and 500 orphaned 24-byte blocks (500
 * definitely lost). valgrind --leak-check=full gives exactly these counts.
 *
 * The orphans come last, so the last of them is the most recent allocation: glibc's pointer to
 * the free space after it (main_arena.top) then points into it, since with libdmem's 112-byte
 * header a 24-byte block's last bytes overlap the next chunk's size word. A scan that counted
 * the allocator's own state as a root would call that block reachable.
 */
#include "leakclass_common.h"

struct node {
    struct node *next;
    long value;
};

struct node *held;

__attribute__((noinline)) static struct node *make_list(int n, long tag)
{
    struct node *head = NULL, **tail = &head;
    for (int i = 0; i < n; i++) {
        struct node *p = must_malloc(sizeof *p);
        p->next = NULL;
        p->value = tag + i;
        *tail = p;
        tail = &p->next;
    }
    return head;
}

__attribute__((noinline)) static void make_orphans(void)
{
    for (int i = 0; i < 500; i++) {
        long *p = must_malloc(24);
        p[0] = i;
        p[1] = 0;
        p[2] = -1;
    }
}

int main(void)
{
    held = make_list(1000, 1000000);
    make_list(1000, 2000000);
    make_orphans();
    scrub_stack();
    return 0;
}
