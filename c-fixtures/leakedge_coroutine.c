// build: -O0
/* Leak classes, a stack in the heap: main runs a coroutine (makecontext/swapcontext) on a 64 KiB
 * stack it malloc'ed, and nothing but the coroutine's context refers to that block. On it the
 * coroutine allocates a 32-byte block that only its own frame holds, which holds a 16-byte one,
 * and then 5 blocks of 56 bytes it drops at once, above the stack block in the heap; then it
 * calls exit() there, its stack pointer inside the heap.
 *
 * The thread's stack is not the mapping around its stack pointer (that is the heap): the
 * coroutine's stack is a block like any other, reached through the context's pointer to it,
 * and what its frames hold is reached through it; the 5 dropped blocks are definitely lost.
 * valgrind: 5 definitely lost; the stack block, the 32-byte and the 16-byte block still
 * reachable (the exit path overwrites the dead frames that held the dropped blocks).
 *
 * With the argument `ready` the coroutine prints "ready" and waits to be killed instead of
 * calling exit(). It first clears the dead frames below it, where the allocator's frames left
 * the last dropped block's address: a stale word that the exit path overwrites, and that a scan
 * of the whole stack block (valgrind's, dmem's) would otherwise take for a reference.
 */
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include "leakclass_common.h"

#define STACK (64 << 10)

static ucontext_t main_context, co_context;
static int wait_ready;

__attribute__((noinline)) static void drop_blocks(void)
{
    for (int i = 0; i < 5; i++)
        *(long *volatile)must_malloc(56) = i;
}

/* scrub_stack() of leakclass_common.h clears 64 KiB, the whole of this stack: 4 KiB here. */
__attribute__((noinline)) static void clear_dead_frames(void)
{
    volatile char area[4096];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

static void coroutine(void)
{
    void **volatile mine = must_malloc(32);
    mine[0] = must_malloc(16);
    drop_blocks();
    if (wait_ready) {
        clear_dead_frames();
        /* write(), not stdio: its buffer would be one more block than a bare run leaves. */
        if (write(1, "ready\n", 6) != 6)
            exit(1);
        for (;;)
            pause();
    }
    exit(0);
}

int main(int argc, char **argv)
{
    wait_ready = argc > 1 && strcmp(argv[1], "ready") == 0;
    if (getcontext(&co_context) != 0)
        return 1;
    co_context.uc_stack.ss_sp = must_malloc(STACK);
    co_context.uc_stack.ss_size = STACK;
    co_context.uc_link = &main_context;
    makecontext(&co_context, coroutine, 0);
    scrub_stack();
    swapcontext(&main_context, &co_context);
    return 1;
}
