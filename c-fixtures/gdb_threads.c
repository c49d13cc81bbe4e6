// build: -fno-optimize-sibling-calls
/* Four threads each leak their own number of blocks of their own size (thread K: K + 1 blocks of
 * 1000 + K bytes) and print their kernel thread id, so a test can check that every block in the
 * core is attributed to the thread that allocated it. The main thread also leaks one 5000-byte
 * block and prints its address, for `dmem whatis` on a pointer into its middle. The same lines
 * go to the file named by the first argument, if any, for a test that cannot see stdout.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NTHREADS 4

static void *keep[NTHREADS][NTHREADS + 1];
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *report;

static void say(const char *fmt, long a, long b)
{
    printf(fmt, a, b);
    fflush(stdout);
    if (report) {
        fprintf(report, fmt, a, b);
        fflush(report);
    }
}

__attribute__((noinline)) static void threads_alloc_blocks(int k)
{
    for (int i = 0; i <= k; i++) {
        keep[k][i] = malloc(1000 + (size_t)k);
        memset(keep[k][i], 'a' + k, 1000 + (size_t)k);
    }
}

static void *worker(void *arg)
{
    int k = (int)(long)arg;
    threads_alloc_blocks(k);
    pthread_mutex_lock(&print_lock);
    say("thread %ld tid %ld\n", k, (long)syscall(SYS_gettid));
    pthread_mutex_unlock(&print_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[NTHREADS];
    if (argc > 1 && !(report = fopen(argv[1], "w")))
        return 1;
    /* One thread at a time, so each has surely exited and the next cannot reuse its id. */
    for (long k = 0; k < NTHREADS; k++) {
        if (pthread_create(&th[k], NULL, worker, (void *)k) != 0)
            return 1;
        pthread_join(th[k], NULL);
    }
    char *big = malloc(5000);
    memset(big, 'z', 5000);
    say("main tid %ld\n", (long)syscall(SYS_gettid), 0); /* printf ignores the extra 0 */
    say("block 0x%lx %ld\n", (long)(uintptr_t)big, 5000);
    if (report)
        fclose(report);
    return 0;
}
