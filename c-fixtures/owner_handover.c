/* Blocks freed by threads other than the one that allocated them, in the cases where a list's
 * owner is not there to take them back: it has exited, it is idle, or it is still running when
 * the process exits. Each mode ends by leaking one block of a size no other block has, so the
 * exit report's summary says whether it saw the heap right.
 *
 *   churn    100,000 short threads, 16 alive at a time, each allocating blocks that two
 *            freeing threads free, often after their allocator exited; leaks 7001 bytes
 *   orphan   a thread allocates 5,000 blocks and exits; two threads free them, then eight new
 *            threads allocate and free on the lists left behind; leaks 7002 bytes
 *   idle     main allocates 20,000 blocks of 4,000 bytes and sleeps while another thread frees
 *            them; prints whether the memory went back to glibc's main arena meanwhile
 *            (mallinfo2), then leaks 7003 bytes
 *   running  four threads allocate and hand blocks to each other to free, and main returns
 *            while they run; leaks 7004 bytes
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile leaked;

/* Clears the stack below the caller, where a copy of the leaked pointer may be left. */
static __attribute__((noinline)) void scrub(void)
{
    volatile char pad[16384];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = 0;
}

static __attribute__((noinline)) void leak_only(size_t n)
{
    leaked = malloc(n);
    memset(leaked, 1, n);
    leaked = NULL;
}

static void leak(size_t n)
{
    leak_only(n);
    scrub();
}

static void check(void *p, size_t n, unsigned char v)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i += 61)
        if (b[i] != v) {
            fprintf(stderr, "block %p byte %zu is %u, not %u\n", p, i, b[i], v);
            abort();
        }
}

/* A bounded queue of blocks, for the churn's freeing threads. */
enum { QCAP = 1024 };
static struct {
    pthread_mutex_t lock;
    pthread_cond_t more, room;
    void *items[QCAP];
    size_t sizes[QCAP];
    int head, n;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER };

static void put(void *p, size_t n)
{
    pthread_mutex_lock(&q.lock);
    while (q.n == QCAP)
        pthread_cond_wait(&q.room, &q.lock);
    q.items[(q.head + q.n) % QCAP] = p;
    q.sizes[(q.head + q.n) % QCAP] = n;
    q.n++;
    pthread_cond_signal(&q.more);
    pthread_mutex_unlock(&q.lock);
}

static void *get(size_t *n)
{
    pthread_mutex_lock(&q.lock);
    while (q.n == 0)
        pthread_cond_wait(&q.more, &q.lock);
    void *p = q.items[q.head];
    *n = q.sizes[q.head];
    /* The slot forgets the block: a freed block's address left here would point into whatever
     * glibc later carves from that memory (the block leak() orphans, say), and hold it. */
    q.items[q.head] = NULL;
    q.head = (q.head + 1) % QCAP;
    q.n--;
    pthread_cond_signal(&q.room);
    pthread_mutex_unlock(&q.lock);
    return p;
}

static void *freer(void *arg)
{
    (void)arg;
    for (;;) {
        size_t n;
        void *p = get(&n);
        if (!p)
            return NULL;
        check(p, n, (unsigned char)n);
        free(p);
    }
}

static void *churner(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    for (int k = 0; k < 4; k++) {
        size_t n = 24 + (i * 7 + k) % 200;
        void *p = malloc(n);
        memset(p, (unsigned char)n, n);
        put(p, n);
    }
    /* One block freed by its own thread, on its own list. */
    void *volatile own = malloc(40);
    free(own);
    return NULL;
}

static void churn(void)
{
    enum { THREADS = 100000, AT_ONCE = 16 };
    pthread_t freers[2], t[AT_ONCE];
    for (int i = 0; i < 2; i++)
        pthread_create(&freers[i], NULL, freer, NULL);
    for (int i = 0; i < THREADS; i += AT_ONCE) {
        for (int k = 0; k < AT_ONCE; k++)
            if (pthread_create(&t[k], NULL, churner, (void *)(uintptr_t)(i + k)) != 0) {
                perror("pthread_create");
                abort();
            }
        for (int k = 0; k < AT_ONCE; k++)
            pthread_join(t[k], NULL);
    }
    for (int i = 0; i < 2; i++)
        put(NULL, 0);
    for (int i = 0; i < 2; i++)
        pthread_join(freers[i], NULL);
    printf("churn: %d threads\n", THREADS);
    leak(7001);
}

enum { ORPHANS = 5000 };
static unsigned char *orphans[ORPHANS];

static size_t orphan_size(int i) { return 16 + (size_t)(i * 13) % 500; }

static void *orphan_maker(void *arg)
{
    (void)arg;
    for (int i = 0; i < ORPHANS; i++) {
        orphans[i] = malloc(orphan_size(i));
        memset(orphans[i], (unsigned char)i, orphan_size(i));
    }
    return NULL;
}

static void *orphan_freer(void *arg)
{
    int parity = (int)(intptr_t)arg;
    for (int i = parity; i < ORPHANS; i += 2) {
        check(orphans[i], orphan_size(i), (unsigned char)i);
        /* Some grow first: a realloc of a block whose allocator is gone. */
        if (i % 10 == parity) {
            orphans[i] = realloc(orphans[i], orphan_size(i) * 3);
            check(orphans[i], orphan_size(i), (unsigned char)i);
        }
        free(orphans[i]);
        orphans[i] = NULL;
    }
    return NULL;
}

static void *settler(void *arg)
{
    (void)arg;
    void *mine[1000];
    for (int i = 0; i < 1000; i++) {
        mine[i] = malloc(8 + i % 300);
        memset(mine[i], 3, 8 + i % 300);
    }
    for (int i = 0; i < 1000; i++)
        free(mine[i]);
    return NULL;
}

static void orphan(void)
{
    pthread_t t[8];
    pthread_create(&t[0], NULL, orphan_maker, NULL);
    pthread_join(t[0], NULL);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, orphan_freer, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, settler, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    long left = 0;
    for (int i = 0; i < ORPHANS; i++)
        left += orphans[i] != NULL;
    printf("orphan: %d blocks freed, %ld left\n", ORPHANS, left);
    leak(7002);
}

enum { IDLE_BLOCKS = 20000, IDLE_SIZE = 4000 };
static void *idle_blocks[IDLE_BLOCKS];
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_done;

static void *idle_freer(void *arg)
{
    (void)arg;
    size_t before = mallinfo2().uordblks;
    for (int i = 0; i < IDLE_BLOCKS; i++) {
        check(idle_blocks[i], IDLE_SIZE, 7);
        free(idle_blocks[i]);
        /* A stale pointer would keep a later block at the same address reachable. */
        idle_blocks[i] = NULL;
    }
    size_t after = mallinfo2().uordblks;
    size_t given = (size_t)IDLE_BLOCKS * IDLE_SIZE;
    /* Most of it must be back while the allocating thread sleeps. */
    printf("idle: %s (%zu MB in use before the frees, %zu MB after)\n",
           after + given / 2 < before ? "memory returned while the owner slept" : "memory kept",
           before >> 20, after >> 20);
    pthread_mutex_lock(&idle_lock);
    idle_done = 1;
    pthread_cond_signal(&idle_cond);
    pthread_mutex_unlock(&idle_lock);
    return NULL;
}

static void idle(void)
{
    for (int i = 0; i < IDLE_BLOCKS; i++) {
        idle_blocks[i] = malloc(IDLE_SIZE);
        memset(idle_blocks[i], 7, IDLE_SIZE);
    }
    pthread_t t;
    pthread_create(&t, NULL, idle_freer, NULL);
    /* Asleep, allocating nothing, until the other thread is done. */
    pthread_mutex_lock(&idle_lock);
    while (!idle_done)
        pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    pthread_join(t, NULL);
    leak(7003);
}

enum { SLOTS = 64 };
static _Atomic(void *) slots[SLOTS];
static atomic_long handed;

static void *runner(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (;;) {
        size_t n = 32 + rand_r(&seed) % 1000;
        void *p = malloc(n);
        memset(p, 5, n);
        void *old = atomic_exchange(&slots[rand_r(&seed) % SLOTS], p);
        if (old) {
            free(old);
            atomic_fetch_add(&handed, 1);
        }
    }
    return NULL;
}

static void running(void)
{
    pthread_t t;
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, runner, (void *)(uintptr_t)(i + 1));
    while (atomic_load(&handed) < 200000)
        usleep(1000);
    printf("running: exiting with four threads still running\n");
    fflush(stdout);
    leak(7004);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "churn"))
        churn();
    else if (!strcmp(mode, "orphan"))
        orphan();
    else if (!strcmp(mode, "idle"))
        idle();
    else if (!strcmp(mode, "running"))
        running();
    else {
        fprintf(stderr, "usage: owner_handover churn|orphan|idle|running\n");
        return 2;
    }
    return 0;
}
