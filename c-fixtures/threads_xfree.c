/* Sixteen threads in a ring: each allocates blocks of varied sizes and kinds, hands them to the
 * next thread, which checks their contents, sometimes reallocates them and frees them. Every
 * thread also runs a private realloc storm. Frees therefore mostly happen on a thread other than
 * the allocating one. The report is made of counts only, so it is the same on every run. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 16, PER_THREAD = 3000, QCAP = 64, STORM_SLOTS = 32, STORM_ROUNDS = 3000 };

struct queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned char *items[QCAP];
    size_t sizes[QCAP];
    int head, count;
};

static struct queue queues[NT];
static long bad_contents[NT], received[NT], storm_bad[NT], null_results[NT];

static unsigned char pattern(int from, long seq, size_t i)
{
    return (unsigned char)(from * 17 + seq * 3 + i);
}

static void push(struct queue *q, unsigned char *p, size_t n)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == QCAP)
        pthread_cond_wait(&q->cond, &q->lock);
    q->items[(q->head + q->count) % QCAP] = p;
    q->sizes[(q->head + q->count) % QCAP] = n;
    q->count++;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

/* Takes one block if there is one; returns 0 if the queue was empty. */
static int try_pop(struct queue *q, unsigned char **p, size_t *n)
{
    int got = 0;
    pthread_mutex_lock(&q->lock);
    if (q->count) {
        *p = q->items[q->head];
        *n = q->sizes[q->head];
        q->head = (q->head + 1) % QCAP;
        q->count--;
        got = 1;
        pthread_cond_broadcast(&q->cond);
    }
    pthread_mutex_unlock(&q->lock);
    return got;
}

static void *alloc_kind(long seq, size_t n)
{
    void *p = NULL;
    switch (seq % 5) {
    case 0: return calloc(1, n);
    case 1: return memalign(64, n);
    case 2: return posix_memalign(&p, 256, n) == 0 ? p : NULL;
    default: return malloc(n);
    }
}

/* Receives one block: checks where it came from by its pattern, then frees or reallocates it. */
static void consume(int self, unsigned char *p, size_t n)
{
    int from = p[0];
    long seq;
    memcpy(&seq, p + 1, sizeof(seq));
    for (size_t i = 1 + sizeof(seq); i < n; i++)
        if (p[i] != pattern(from, seq, i)) {
            bad_contents[self]++;
            break;
        }
    received[self]++;
    if (seq % 7 == 0) {
        unsigned char *q = realloc(p, n * 2 + 1);
        if (!q) {
            null_results[self]++;
            free(p);
            return;
        }
        if (q[0] != from || memcmp(q + 1, &seq, sizeof(seq)) != 0)
            bad_contents[self]++;
        p = q;
    }
    free(p);
}

static void *worker(void *arg)
{
    int self = (int)(intptr_t)arg;
    struct queue *mine = &queues[self], *next = &queues[(self + 1) % NT];
    long sent = 0;
    unsigned seed = (unsigned)self * 2654435761u;
    unsigned char *storm[STORM_SLOTS] = {0};
    size_t storm_size[STORM_SLOTS] = {0};
    long storm_done = 0;

    while (sent < PER_THREAD || received[self] < PER_THREAD) {
        unsigned char *p;
        size_t n;
        int progress = 0;
        while (try_pop(mine, &p, &n)) {
            consume(self, p, n);
            progress = 1;
        }
        if (sent < PER_THREAD) {
            /* Never block on a full queue while our own queue may fill up too. */
            pthread_mutex_lock(&next->lock);
            int room = next->count < QCAP;
            pthread_mutex_unlock(&next->lock);
            if (room) {
                seed = seed * 1103515245u + 12345u;
                n = 1 + sizeof(long) + (seed >> 8) % 1500 + (sent % 997 == 0 ? 300000 : 0);
                p = alloc_kind(sent, n);
                if (!p) {
                    null_results[self]++;
                    sent++;
                    continue;
                }
                p[0] = (unsigned char)self;
                memcpy(p + 1, &sent, sizeof(sent));
                for (size_t i = 1 + sizeof(sent); i < n; i++)
                    p[i] = pattern(self, sent, i);
                push(next, p, n);
                sent++;
                progress = 1;
            }
        }
        if (!progress)
            sched_yield();
        /* A few steps of the private realloc storm on every turn. */
        for (int k = 0; k < 2 && storm_done < STORM_ROUNDS; k++, storm_done++) {
            seed = seed * 1103515245u + 12345u;
            int s = (seed >> 16) % STORM_SLOTS;
            size_t m = 1 + (seed >> 3) % 5000;
            unsigned char *q = realloc(storm[s], m);
            if (!q) {
                null_results[self]++;
                continue;
            }
            size_t keep = storm_size[s] < m ? storm_size[s] : m;
            for (size_t i = 0; i < keep; i++)
                if (q[i] != (unsigned char)(s + i)) {
                    storm_bad[self]++;
                    break;
                }
            for (size_t i = 0; i < m; i++)
                q[i] = (unsigned char)(s + i);
            storm[s] = q;
            storm_size[s] = m;
        }
        if (sent >= PER_THREAD && received[self] < PER_THREAD) {
            pthread_mutex_lock(&mine->lock);
            while (mine->count == 0)
                pthread_cond_wait(&mine->cond, &mine->lock);
            pthread_mutex_unlock(&mine->lock);
        }
    }
    for (int s = 0; s < STORM_SLOTS; s++)
        free(storm[s]);
    return NULL;
}

int main(void)
{
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        pthread_mutex_init(&queues[i].lock, NULL);
        pthread_cond_init(&queues[i].cond, NULL);
    }
    for (int i = 0; i < NT; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);

    long total_received = 0, total_bad = 0, total_storm_bad = 0, total_null = 0;
    for (int i = 0; i < NT; i++) {
        total_received += received[i];
        total_bad += bad_contents[i];
        total_storm_bad += storm_bad[i];
        total_null += null_results[i];
    }
    printf("threads %d, blocks handed over %ld\n", NT, total_received);
    printf("corrupt handed-over blocks %ld\n", total_bad);
    printf("corrupt realloc-storm blocks %ld\n", total_storm_bad);
    printf("failed allocations %ld\n", total_null);
    int ok = total_received == (long)NT * PER_THREAD && !total_bad && !total_storm_bad && !total_null;
    printf("%s\n", ok ? "threads_xfree: all checks passed" : "threads_xfree: FAILED");
    return ok ? 0 : 1;
}
