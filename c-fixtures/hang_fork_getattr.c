/* fork while another thread is inside pthread_getattr_np on the forking thread. That thread's
 * lock is held at the moment of fork, and the child inherits it held, with nobody left to
 * release it: a child that calls pthread_getattr_np on itself waits forever. So must a child
 * whose allocator asks for its stack bounds that way. The children only allocate and exit.
 *
 * Each round starts a fresh thread that has never allocated; a watcher thread calls
 * pthread_getattr_np on it in a tight loop, and the fresh thread forks meanwhile. The main thread
 * forks the same way while the watcher works on it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 60, MAIN_FORKS = 30, SPINS = 200 };

static _Atomic(pthread_t) target;
static atomic_int watching, stop;
static atomic_long calls, loops;

/* Calls pthread_getattr_np on whichever thread `target` names, until told to stop. */
static void *watcher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_t t = atomic_load(&target);
        pthread_attr_t attr;
        if (t && pthread_getattr_np(t, &attr) == 0) {
            pthread_attr_destroy(&attr);
            atomic_fetch_add(&calls, 1);
            atomic_store(&watching, 1);
        }
        atomic_fetch_add(&loops, 1);
    }
    return NULL;
}

/* The child allocates (its first allocation, when forked from a fresh thread) and exits; with
 * exit() every tenth time, which runs the exit handlers (and an allocator's exit report), else
 * with _exit(). */
static pid_t fork_child(int full_exit)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *p = malloc(100);
        snprintf(p, 100, "child %d", (int)getpid());
        p = realloc(p, 200);
        free(p);
        if (full_exit)
            exit(0);
        _exit(0);
    }
    return pid;
}

/* 0 if the child exited with status 0. */
static int reap(pid_t pid)
{
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Waits (without allocating) until the watcher has worked on the calling thread, then forks,
 * each time after a different short delay; returns how many children failed. The watcher is
 * then turned away from this thread, which may be about to exit, and the call returns once the
 * watcher has finished any call on it. */
static int fork_while_watched(int forks, int delay)
{
    atomic_store(&watching, 0);
    atomic_store(&target, pthread_self());
    while (!atomic_load(&watching))
        ;
    int bad = 0;
    for (int i = 0; i < forks; i++) {
        for (volatile int s = 0; s < SPINS * ((delay + i) % 7); s++)
            ;
        bad += reap(fork_child((delay + i) % 10 == 0));
    }
    atomic_store(&target, (pthread_t)0);
    long seen = atomic_load(&loops);
    while (atomic_load(&loops) < seen + 2)
        ;
    return bad;
}

static void *fresh(void *arg)
{
    return (void *)(intptr_t)fork_while_watched(1, (int)(intptr_t)arg);
}

int main(void)
{
    pthread_t w;
    if (pthread_create(&w, NULL, watcher, NULL) != 0)
        return 1;
    int bad = 0;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_t t;
        void *r;
        if (pthread_create(&t, NULL, fresh, (void *)(intptr_t)i) != 0)
            return 1;
        pthread_join(t, &r);
        bad += (int)(intptr_t)r;
    }
    bad += fork_while_watched(MAIN_FORKS, 0);
    atomic_store(&stop, 1);
    pthread_join(w, NULL);
    printf("%d children forked while watched, %d failed, watcher %s\n", ROUNDS + MAIN_FORKS, bad,
           atomic_load(&calls) > 0 ? "ran" : "never ran");
    return bad != 0;
}
