// build: -O2 -Wl,-z,now
/* Leak classes, the exit path: a 10-node list orphaned (1 definitely lost, 9 indirectly lost),
 * whose head's address is left where only the way out of the program can find it. valgrind
 * --leak-check=full gives exactly these counts.
 *
 *   stale     (default) the head's address fills the dead stack below main, as a shell's deep
 *             evaluation leaves it before it longjmp's out and calls exit; then main calls exit,
 *             whose frames and glibc's __run_exit_handlers' are laid over it, and leave some of
 *             their words unwritten. memcheck skips those words as uninitialised.
 *   register  main returns with the list orphaned; the test stops the abort of abort-shutdown
 *             under gdb and points a register 40 bytes into the head, as the exit report's own
 *             code may leave one, before the core is written.
 *
 * The head's address is kept only as `hidden`, xor'ed with a key, so no word the scan reads
 * holds it; the test reads it from there. Bound at load time (-z now): a lazy binding of exit on
 * its first call would save the registers' state over the dead frames, at an offset that
 * depends on where the stack starts, and overwrite the addresses left there.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakclass_common.h"

#define KEY ((uintptr_t)0x5a5a5a5a5a5a5a5aULL)

struct node {
    struct node *next;
    long value[8];
};

volatile uintptr_t hidden;

__attribute__((noinline)) static void make_lost_list(void)
{
    struct node *head = NULL;
    for (int i = 0; i < 10; i++) {
        struct node *p = must_malloc(sizeof *p);
        memset(p, 0, sizeof *p);
        p->next = head;
        head = p;
    }
    hidden = (uintptr_t)head ^ KEY;
}

/* Fills 32 KiB of stack below the caller's frame with the head's address, then forgets it in
 * every caller-saved register, so that only the dead slots hold it. */
__attribute__((noinline)) static void leave_on_the_stack(void)
{
    volatile uintptr_t area[4096];
    for (unsigned i = 0; i < sizeof area / sizeof area[0]; i++)
        area[i] = hidden ^ KEY;
    __asm__ volatile("xor %%eax, %%eax\n\txor %%ecx, %%ecx\n\txor %%edx, %%edx\n\txor %%esi, %%esi\n\t"
                     "xor %%edi, %%edi\n\txor %%r8d, %%r8d\n\txor %%r9d, %%r9d\n\txor %%r10d, %%r10d\n\t"
                     "xor %%r11d, %%r11d\n\tpxor %%xmm0, %%xmm0\n\tpxor %%xmm1, %%xmm1"
                     ::: "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "xmm0", "xmm1",
                         "memory");
}

int main(int argc, char **argv)
{
    make_lost_list();
    scrub_stack();
    if (argc > 1 && strcmp(argv[1], "register") == 0)
        return 0;
    leave_on_the_stack();
    exit(0);
}
