// build: -pthread -lm
/* A process whose heap grows in four known shapes, for the tests of `dmem top`.
 *
 * From four functions, each its own allocation stack:
 *   hold_steady       STEADY_BLOCKS blocks of 64 bytes, allocated at start and held: many
 *                     blocks, so that a reader that stopped the process while it walked them
 *                     would stop it for long enough to see (see the heartbeat below);
 *   grow_linear       one 4096-byte block every 10 ms;
 *   fill_cache        256-byte entries into a cache of CACHE_CAP entries, the number filled by
 *                     time t being CACHE_CAP * (1 - 2^(-t/1s)): the rate halves every second;
 *   grow_accelerating 1024-byte blocks, 32 * 2^(t/0.8s) of them by time t (capped).
 * Every schedule follows the clock (CLOCK_MONOTONIC since start), not a count of iterations,
 * so a slow or loaded machine changes how often the main loop runs but not the shapes.
 *
 * A second thread writes a heartbeat: the monotonic clock in nanoseconds, as 8 bytes appended to
 * HEARTBEAT_FILE, every 2 ms. Gaps in it show when the process did not run. When it is allowed
 * (as root), that thread runs under SCHED_FIFO, so that on a busy machine its gaps measure
 * whether the process was stopped, not how long other programs held the processor.
 *
 * usage: top_growth HEARTBEAT_FILE SECONDS [nodump | steady=N]
 * Writes "ready" on stdout once the steady blocks are held; exits after SECONDS. "steady=N" holds
 * N steady blocks instead of STEADY_BLOCKS (the tests of `dmem leaks PID` use a heap large
 * enough for its scan to be caught while it runs). With "nodump"
 * it first makes itself non-dumpable (prctl(PR_SET_DUMPABLE, 0)), so that only CAP_SYS_PTRACE
 * may read its memory. It lets any process read it despite Yama's ptrace_scope=1
 * (PR_SET_PTRACER_ANY), as a program meant to be watched would.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define STEADY_BLOCKS 100000
#define CACHE_CAP 20000
#define ACCEL_CAP 60000

static int heartbeat_fd;
static volatile int done;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *
heartbeat(void *arg)
{
    (void)arg;
    struct sched_param sp = {.sched_priority = 1};
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); /* fails quietly without rights */
    struct timespec pause = {0, 2 * 1000 * 1000};
    while (!done) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
        if (write(heartbeat_fd, &ns, sizeof ns) != sizeof ns)
            abort();
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static void **steady;
static long nsteady = STEADY_BLOCKS;
static void *cache[CACHE_CAP];
static void *accel[ACCEL_CAP];
#define LINEAR_CAP 100000
static void *linear[LINEAR_CAP];
static size_t nlinear, ncache, naccel;

static __attribute__((noinline)) void
hold_steady(void)
{
    for (long i = 0; i < nsteady; i++) {
        steady[i] = malloc(64);
        memset(steady[i], 1, 64);
    }
}

static __attribute__((noinline)) void
grow_linear(size_t want)
{
    while (nlinear < want && nlinear < LINEAR_CAP) {
        linear[nlinear] = malloc(4096);
        memset(linear[nlinear], 2, 64);
        nlinear++;
    }
}

static __attribute__((noinline)) void
fill_cache(size_t want)
{
    while (ncache < want && ncache < CACHE_CAP) {
        cache[ncache] = malloc(256);
        memset(cache[ncache], 3, 64);
        ncache++;
    }
}

static __attribute__((noinline)) void
grow_accelerating(size_t want)
{
    while (naccel < want && naccel < ACCEL_CAP) {
        accel[naccel] = malloc(1024);
        memset(accel[naccel], 4, 64);
        naccel++;
    }
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: top_growth HEARTBEAT_FILE SECONDS [nodump | steady=N]\n");
        return 2;
    }
    if (argc > 3 && strncmp(argv[3], "steady=", 7) == 0)
        nsteady = atol(argv[3] + 7);
    if (argc > 3 && strcmp(argv[3], "nodump") == 0)
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    heartbeat_fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (heartbeat_fd < 0) {
        perror(argv[1]);
        return 1;
    }
    double seconds = atof(argv[2]);
    /* The table is allocated here, so hold_steady's stack holds the steady blocks only. */
    steady = malloc(nsteady * sizeof *steady);
    hold_steady();
    pthread_t hb;
    pthread_create(&hb, NULL, heartbeat, NULL);
    printf("ready\n");
    fflush(stdout);

    double start = now();
    for (;;) {
        double t = now() - start;
        if (t >= seconds)
            break;
        grow_linear((size_t)(t * 100));
        fill_cache((size_t)(CACHE_CAP * (1 - exp2(-t))));
        grow_accelerating((size_t)(32 * exp2(t / 0.8)));
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    done = 1;
    pthread_join(hb, NULL);
    return 0;
}
