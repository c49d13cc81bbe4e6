/* fork() from a threaded program while other threads hammer the allocator. A child must never
 * inherit a lock held by a thread that does not exist in it: each child allocates, frees,
 * starts a thread of its own, and exits 0. A deadlock hangs the child, so the parent's wait
 * never returns; the test runs this under a timeout.
 *
 * Where an interposer's header sits in front of a block (the magic word just below the user
 * pointer), the child also checks that the block is recorded with its own thread id, not the
 * parent's. Without the interposer those bytes are the allocator's own size field, which never
 * holds that magic. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { HAMMERS = 4, FORKS = 120 };
#define MAGIC_LIVE 0xd3e3a11cu

static atomic_int stop;

static void *hammer(void *arg)
{
    unsigned seed = (unsigned)(intptr_t)arg;
    void *keep[32] = {0};
    for (unsigned long n = 0; !atomic_load(&stop); n++) {
        /* Let the forking thread run on a small machine, without ever pausing for long. */
        if (n % 256 == 0)
            sched_yield();
        seed = seed * 1103515245u + 12345u;
        int s = (seed >> 16) % 32;
        switch (seed % 4) {
        case 0: free(keep[s]); keep[s] = malloc((seed >> 4) % 3000); break;
        case 1: keep[s] = realloc(keep[s], (seed >> 4) % 5000 + 1); break;
        case 2: free(keep[s]); keep[s] = calloc(1, (seed >> 4) % 20000 + 1); break;
        default: free(keep[s]); keep[s] = memalign(128, (seed >> 4) % 1000 + 1); break;
        }
    }
    for (int s = 0; s < 32; s++)
        free(keep[s]);
    return NULL;
}

static void *child_thread(void *arg)
{
    char *p = malloc(1000);
    strcpy(p, arg);
    return p;
}

/* 0 if the block looks fine, 1 if an interposer recorded the wrong thread for it. */
static int wrong_owner(void *p)
{
    uint32_t word[2];
    memcpy(word, (char *)p - 8, sizeof(word));
    if (word[1] != MAGIC_LIVE)
        return 0;
    return word[0] != (uint32_t)syscall(SYS_gettid);
}

static int child(int i)
{
    int status = 0;
    for (int k = 0; k < 200; k++) {
        char *p = malloc(16 + (size_t)(k * 37 % 4000));
        if (!p)
            return 2;
        memset(p, k, 16);
        if (k == 0 && wrong_owner(p))
            status = 3;
        p = realloc(p, 8000);
        free(p);
    }
    pthread_t t;
    char name[32];
    snprintf(name, sizeof(name), "child %d", i);
    if (pthread_create(&t, NULL, child_thread, name) != 0)
        return 4;
    void *r;
    pthread_join(t, &r);
    if (!r || strcmp(r, name) != 0)
        return 5;
    free(r);
    return status;
}

int main(void)
{
    pthread_t t[HAMMERS];
    for (int i = 0; i < HAMMERS; i++)
        pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)(i + 1));
    int failed = 0;
    for (int i = 0; i < FORKS; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            printf("fork failed\n");
            failed++;
            break;
        }
        if (pid == 0) {
            int rc = child(i);
            /* Alternate between the full exit path (atexit, stdio, destructors) and _exit. */
            if (i % 2)
                exit(rc);
            _exit(rc);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("child %d: %s %d\n", i, WIFSIGNALED(status) ? "signal" : "exit status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < HAMMERS; i++)
        pthread_join(t[i], NULL);
    printf("forks %d, failed children %d\n", FORKS, failed);
    printf("%s\n", failed ? "fork_threads: FAILED" : "fork_threads: all checks passed");
    return failed ? 1 : 0;
}
