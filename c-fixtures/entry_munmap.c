/* munmap, which libdmem interposes so its stack walker forgets unmapped stacks: glibc's contract
 * (0 on success with errno untouched; -1 and EINVAL for an unaligned address or a zero length;
 * unmapping the middle of a mapping leaves both ends usable), and allocation on coroutine stacks
 * carved side by side from one mapping, each unmapped after its run while the ones below it,
 * which the kernel showed as part of the same mapping, run next. */
// build: -fno-builtin
#include "entry_common.h"
#include <sys/mman.h>
#include <ucontext.h>

enum { PAGE = 4096, STACK = 64 * 1024, STACKS = 8, ROUNDS = 20 };

static ucontext_t main_ctx, ctx[STACKS];
static volatile size_t sink;

static __attribute__((noinline)) void deep(int depth)
{
    char pad[64];
    pad[depth % 64] = (char)depth;
    if (depth > 0) {
        deep(depth - 1);
    } else {
        char *p = malloc(40);
        CHECK(p != NULL, "malloc on a coroutine stack failed");
        p[0] = pad[0];
        sink += (size_t)p[0];
        free(p);
    }
    sink += (size_t)pad[depth % 64];
}

static void body(int depth)
{
    deep(depth);
    swapcontext(&ctx[0], &main_ctx);
}

int main(void)
{
    group("munmap-contract");
    char *m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap failed");
    errno = 1234;
    CHECK(munmap(m + PAGE, PAGE) == 0, "munmap of a middle page failed: %d", errno);
    CHECK(errno == 1234, "a successful munmap changed errno to %d", errno);
    m[0] = 1;
    m[2 * PAGE] = 2;
    CHECK(m[0] == 1 && m[2 * PAGE] == 2, "the ends of the mapping changed");
    errno = 0;
    CHECK(munmap(m + 1, PAGE) == -1 && errno == EINVAL, "unaligned munmap: errno %d", errno);
    errno = 0;
    CHECK(munmap(m, 0) == -1 && errno == EINVAL, "zero-length munmap: errno %d", errno);
    CHECK(munmap(m, PAGE) == 0 && munmap(m + 2 * PAGE, 2 * PAGE) == 0, "munmap of the rest failed");
    end_group();

    group("munmap-coroutine-stacks");
    for (int round = 0; round < ROUNDS; round++) {
        /* One mapping, so the kernel shows the stacks as one; the deepest runs first. */
        char *stacks = mmap(NULL, (size_t)STACKS * STACK, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(stacks != MAP_FAILED, "mmap of the stacks failed");
        for (int i = STACKS - 1; i >= 0; i--) {
            getcontext(&ctx[0]);
            ctx[0].uc_stack.ss_sp = stacks + (size_t)i * STACK;
            ctx[0].uc_stack.ss_size = STACK;
            ctx[0].uc_link = &main_ctx;
            makecontext(&ctx[0], (void (*)(void))body, 1, 4 + 30 * (i % 3));
            swapcontext(&main_ctx, &ctx[0]);
            /* The stack above this one goes away before the next, shallower one runs. */
            CHECK(munmap(stacks + (size_t)i * STACK, STACK) == 0, "munmap of a stack failed");
        }
    }
    end_group();
    return finish("entry_munmap");
}
