// build: -O0
/* Leak classes, thread-local storage: the main thread holds a 3-node list (40-byte nodes) only
 * from a __thread variable, and a live worker holds 2 blocks (72 bytes) only from its own
 * __thread variables while it waits on a condition variable at exit; 5 more 56-byte blocks are
 * orphaned. valgrind: 5 definitely lost, 5 still reachable, and glibc's block for the worker's
 * thread-local storage (its dtv) possibly lost.
 *
 * With the argument `worker-exits` the worker calls exit() itself while main waits in
 * pthread_join: the exit report then runs on the worker, and the main thread's TLS, which the
 * loader allocated apart from any stack, must still be found. The counts are the same.
 */
#include <string.h>
#include <pthread.h>
#include "leakclass_common.h"

struct node {
    struct node *next;
    long value[4];
};

__thread struct node *mine;
__thread void *worker_a, *worker_b;

static void *worker(void *arg)
{
    worker_a = must_malloc(72);
    worker_b = must_malloc(72);
    if (arg)
        exit(0);
    announce_and_wait_forever();
    return NULL;
}

__attribute__((noinline)) static void make_main_list(void)
{
    for (int i = 0; i < 3; i++) {
        struct node *p = must_malloc(sizeof *p);
        p->next = mine;
        p->value[0] = i;
        mine = p;
    }
}

__attribute__((noinline)) static void make_orphans(void)
{
    for (int i = 0; i < 5; i++)
        *(long *)must_malloc(56) = i;
}

int main(int argc, char **argv)
{
    pthread_t t;
    int worker_exits = argc > 1 && strcmp(argv[1], "worker-exits") == 0;
    make_main_list();
    make_orphans();
    scrub_stack();
    if (pthread_create(&t, NULL, worker, worker_exits ? &t : NULL))
        return 1;
    if (worker_exits) {
        pthread_join(t, NULL);
        return 1;
    }
    wait_for_worker();
    scrub_stack();
    return 0;
}
