// build: -O0
/* A heap in three shapes over two phases, for the tests of `dmem timeline` and `dmem record
 * --timeline`. Three allocation stacks, each its own function:
 *
 *   hold_steady        STEADY blocks, allocated at start and held to the end;
 *   grow_forever       grows through both phases, to FOREVER blocks;
 *   grow_then_shrink   grows to BUMP blocks in the first phase and frees them all, newest
 *                      first, in the second.
 *
 * Blocks are 4096 bytes, so at its peak grow_forever holds the most (4.9 MB), grow_then_shrink
 * next (3.1 MB) and hold_steady least (1 MB). In the first phase live bytes rise; in the
 * second grow_then_shrink frees faster than grow_forever allocates, so live bytes fall: the
 * process holds the most at the turn between the two.
 *
 *   timeline_phases PHASE_MS
 *
 * Prints "ready" once the steady blocks are held, waits PHASE_MS / 4, runs the two phases of
 * PHASE_MS each, printing "turn SECONDS" (the wall clock, CLOCK_REALTIME) at the turn, then
 * holds PHASE_MS / 2 and exits without freeing anything, so no sample can catch the heap
 * shrinking at exit. Every schedule follows the clock, not a count of iterations, so a loaded
 * machine changes how often the loop runs but not the shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define SIZE 4096
#define STEADY 250
#define FOREVER 1200
#define BUMP 750

static void *steady[STEADY], *forever[FOREVER], *bump[BUMP];

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Each function calls malloc itself, so that its own frame is the innermost of its stack. */
#define ALLOC(slot)                                                                            \
    do {                                                                                       \
        (slot) = malloc(SIZE);                                                                 \
        if (!(slot))                                                                           \
            abort();                                                                           \
        memset((slot), 0x5a, SIZE);                                                            \
    } while (0)

__attribute__((noinline)) static void
hold_steady(void)
{
    for (int i = 0; i < STEADY; i++)
        ALLOC(steady[i]);
}

__attribute__((noinline)) static void
grow_forever(int *n, int want)
{
    while (*n < want) {
        ALLOC(forever[*n]);
        ++*n;
    }
}

__attribute__((noinline)) static void
grow_then_shrink(int *n, int want)
{
    while (*n < want) {
        ALLOC(bump[*n]);
        ++*n;
    }
    while (*n > want) {
        --*n;
        free(bump[*n]);
        bump[*n] = NULL;
    }
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: timeline_phases PHASE_MS\n");
        return 2;
    }
    double phase = atol(argv[1]) / 1e3;
    /* Any process of this user may read it despite Yama's ptrace_scope=1. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    hold_steady();
    printf("ready\n");
    fflush(stdout);
    pause_ms((long)(phase * 250));

    /* Each function is called from one place, so each shape is one allocation stack. */
    int grown = 0, bumped = 0, turned = 0;
    double start = now();
    for (;;) {
        double t = now() - start;
        int last = t >= 2 * phase;
        int want_bump;
        if (t < phase)
            want_bump = (int)(BUMP * t / phase);
        else if (!turned)
            want_bump = BUMP; /* the first phase's last blocks */
        else if (!last)
            want_bump = (int)(BUMP * (2 * phase - t) / phase);
        else
            want_bump = 0;
        grow_forever(&grown, last ? FOREVER : (int)(FOREVER * t / (2 * phase)));
        grow_then_shrink(&bumped, want_bump);
        if (t >= phase && !turned) {
            struct timespec wall;
            clock_gettime(CLOCK_REALTIME, &wall);
            printf("turn %.3f\n", wall.tv_sec + wall.tv_nsec / 1e9);
            fflush(stdout);
            turned = 1;
            continue;
        }
        if (last)
            break;
        /* Steps 20 ms apart: `dmem record` reads the list without stopping the process, and a
         * read that a free in the middle of the list cuts short, four times over, would keep
         * only its newer part (a loaded reader took longer than 2 ms steps left it). */
        pause_ms(20);
    }
    printf("done\n");
    fflush(stdout);
    pause_ms((long)(phase * 500));
    return 0;
}
