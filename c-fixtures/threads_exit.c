/* Threads that exit while blocks they allocated are still live: other threads (and main) free
 * and reallocate those blocks after the allocating thread is gone, including detached threads
 * whose blocks are freed while they may still be exiting. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WAVES = 40, PER_WAVE = 8, BLOCKS = 64 };

static unsigned char *slots[WAVES][PER_WAVE][BLOCKS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int detached_done;
static long bad;

static size_t size_of(int w, int t, int b)
{
    return 1 + (size_t)((w * 131 + t * 31 + b * 7) % 2000) + (b == 0 ? 150000 : 0);
}

struct job { int wave, thread; };

static void *allocator(void *arg)
{
    struct job *j = arg;
    for (int b = 0; b < BLOCKS; b++) {
        size_t n = size_of(j->wave, j->thread, b);
        unsigned char *p = (b % 3 == 0) ? calloc(1, n) : malloc(n);
        if (p)
            memset(p, (j->wave + j->thread + b) & 0xff, n);
        slots[j->wave][j->thread][b] = p;
    }
    return NULL;
}

static void *detached_allocator(void *arg)
{
    allocator(arg);
    pthread_mutex_lock(&lock);
    detached_done++;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static int check_and_free(int w, int t, int b, int grow)
{
    unsigned char *p = slots[w][t][b];
    size_t n = size_of(w, t, b);
    if (!p)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)((w + t + b) & 0xff))
            return 0;
    if (grow) {
        p = realloc(p, n + 1000);
        if (!p)
            return 0;
    }
    free(p);
    slots[w][t][b] = NULL;
    return 1;
}

/* Frees the blocks of an earlier wave whose threads have all exited. */
static void *freer(void *arg)
{
    int w = (int)(intptr_t)arg;
    long my_bad = 0;
    for (int t = 0; t < PER_WAVE; t++)
        for (int b = 0; b < BLOCKS; b++)
            my_bad += !check_and_free(w, t, b, (b + t) % 4 == 0);
    pthread_mutex_lock(&lock);
    bad += my_bad;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void)
{
    static struct job jobs[WAVES][PER_WAVE];
    pthread_t freers[WAVES];
    int nfreers = 0;
    for (int w = 0; w < WAVES; w++) {
        pthread_t t[PER_WAVE];
        int detached = w % 2;
        for (int i = 0; i < PER_WAVE; i++) {
            jobs[w][i] = (struct job){w, i};
            if (detached) {
                pthread_attr_t attr;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                pthread_create(&t[i], &attr, detached_allocator, &jobs[w][i]);
                pthread_attr_destroy(&attr);
            } else {
                pthread_create(&t[i], NULL, allocator, &jobs[w][i]);
            }
        }
        if (detached) {
            /* The blocks are complete once the counter moves; the threads may still be in
             * their exit path while they are freed. */
            pthread_mutex_lock(&lock);
            while (detached_done < PER_WAVE * (w / 2 + 1))
                pthread_cond_wait(&cond, &lock);
            pthread_mutex_unlock(&lock);
        } else {
            for (int i = 0; i < PER_WAVE; i++)
                pthread_join(t[i], NULL);
        }
        /* Every third wave is freed by main itself, the others by a new thread. */
        if (w % 3 == 0) {
            long my_bad = 0;
            for (int i = 0; i < PER_WAVE; i++)
                for (int b = 0; b < BLOCKS; b++)
                    my_bad += !check_and_free(w, i, b, b % 5 == 0);
            pthread_mutex_lock(&lock);
            bad += my_bad;
            pthread_mutex_unlock(&lock);
        } else {
            pthread_create(&freers[nfreers++], NULL, freer, (void *)(intptr_t)w);
        }
    }
    for (int i = 0; i < nfreers; i++)
        pthread_join(freers[i], NULL);
    printf("waves %d, threads %d, blocks %d\n", WAVES, WAVES * PER_WAVE,
           WAVES * PER_WAVE * BLOCKS);
    printf("bad blocks %ld\n", bad);
    printf("%s\n", bad ? "threads_exit: FAILED" : "threads_exit: all checks passed");
    return bad ? 1 : 0;
}
