// build: -O0
/* A heap that grows in steps, holds its peak, shrinks and holds again, for the tests of
 * `dmem serve` and `dmem record`.
 *
 *   heap_phases STEPS BLOCKS SIZE STEP_MS HOLD_MS [nodump]
 *
 * Prints "ready" once it runs. Then, STEPS times, allocates BLOCKS blocks of SIZE bytes from
 * grow_step() and sleeps STEP_MS milliseconds; so live bytes rise by BLOCKS * SIZE per step.
 * At the peak it prints "peak" and sleeps HOLD_MS; then shrink() frees every block but the
 * first step's, it prints "shrunk", sleeps HOLD_MS again and exits 0 after freeing the rest.
 * With "nodump" it first makes itself non-dumpable, so that only CAP_SYS_PTRACE may read it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static void **blocks;

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

__attribute__((noinline)) static void grow_step(long from, long n, size_t size)
{
    for (long i = from; i < from + n; i++) {
        blocks[i] = malloc(size);
        if (!blocks[i])
            abort();
        memset(blocks[i], 0x5a, size);
    }
}

__attribute__((noinline)) static void shrink(long from, long to)
{
    for (long i = from; i < to; i++) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: heap_phases STEPS BLOCKS SIZE STEP_MS HOLD_MS [nodump]\n");
        return 2;
    }
    long steps = atol(argv[1]), n = atol(argv[2]), step_ms = atol(argv[4]), hold_ms = atol(argv[5]);
    size_t size = (size_t)atol(argv[3]);
    if (argc > 6 && strcmp(argv[6], "nodump") == 0)
        prctl(PR_SET_DUMPABLE, 0);
    /* Any process of this user may read it despite Yama's ptrace_scope=1. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    blocks = calloc((size_t)(steps * n), sizeof *blocks);
    if (!blocks)
        return 1;
    printf("ready\n");
    fflush(stdout);
    for (long s = 0; s < steps; s++) {
        grow_step(s * n, n, size);
        pause_ms(step_ms);
    }
    printf("peak\n");
    fflush(stdout);
    pause_ms(hold_ms);
    shrink(n, steps * n);
    printf("shrunk\n");
    fflush(stdout);
    pause_ms(hold_ms);
    shrink(0, n);
    free(blocks);
    return 0;
}
