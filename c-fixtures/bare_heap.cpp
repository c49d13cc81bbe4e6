// build: -O1 -pthread
/* A program nobody prepared for dmem, run bare (no libdmem): glibc's heap in every state its
 * reader must tell apart, and leaks of known classes.
 *
 * Kept (still reachable from globals): 100 polymorphic objects of three classes in `kept`, 3
 * mmapped blocks and one more aligned to 1 MiB (memalign moves its chunk inside its mapping),
 * per thread 20 blocks of 24 bytes, and one block of a fifth thread.
 * Leaked: a list of 50 nodes (1 definitely lost, 49 indirectly), 30 `Beta` objects whose
 * pointers are dropped (30 definitely), an array holding 20 `Gamma` objects (1 definitely, 20
 * indirectly), one mmapped block and one aligned to 64 KiB (2 definitely), and per thread (3
 * threads) 10 blocks of 40 bytes (30 definitely). In all: 64 definitely lost, 69 indirectly lost.
 * Free but looking used to a chunk walk: 7 chunks of 48 bytes in the main thread's tcache, 3 of
 * 64 bytes in a fast bin (the tcache of that size full first), and per thread 5 of 24 bytes in
 * its tcache; free in the regular bins: a small-bin chunk, a large-bin chunk and an unsorted
 * one, each between blocks kept so nothing merges.
 * Arenas are capped at 4 (mallopt), so the fifth thread shares one: its tcache, whose lists stay
 * empty, is somewhere in that arena's heap rather than its first chunk.
 *
 * Argument: `abort` ends with abort() once the threads wait (a core from the kernel), `wait`
 * prints "ready" and sleeps until killed (a live process, or a core from gcore), `exit` returns
 * from main with the threads waiting (for valgrind's leak check).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct Shape {
    virtual ~Shape() {}
    virtual long area() const = 0;
    long id = 0;
};
struct Alpha : Shape {
    long area() const override { return 1; }
};
struct Beta : Shape {
    long area() const override { return w * 2; }
    long w = 3;
};
struct Gamma : Shape {
    long area() const override { return a[0] + a[5]; }
    long a[6] = {1, 2, 3, 4, 5, 6};
};

struct Node {
    Node *next;
    long payload[5];
};

Shape *kept[100];
void *kept_mapped[3];
void *kept_aligned;
void *late_kept;
void *kept_guard[16];
void *thread_kept[3][20];
static pthread_barrier_t armed, ready;
static pthread_mutex_t never = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

// Keeps a pointer from being optimised away without keeping it reachable.
__attribute__((noinline)) static void touch(void *p)
{
    asm volatile("" : : "r"(p) : "memory");
}

__attribute__((noinline)) static void leak_list(int n)
{
    Node *head = nullptr;
    for (int i = 0; i < n; i++) {
        Node *x = (Node *)malloc(sizeof(Node));
        x->next = head;
        x->payload[0] = i;
        head = x;
    }
    touch(head);
}

__attribute__((noinline)) static void leak_objects()
{
    for (int i = 0; i < 30; i++)
        touch(new Beta);
    Shape **arr = (Shape **)malloc(20 * sizeof(Shape *));
    for (int i = 0; i < 20; i++)
        arr[i] = new Gamma;
    touch(arr);
    touch(malloc(300000));
    touch(aligned_alloc(1 << 16, 150000));
}

__attribute__((noinline)) static void fill_free_lists()
{
    // Everything first, from the top chunk, each with a kept block after it so nothing merges;
    // then only frees, and one request that sorts the unsorted bin into the small and large
    // bins, before the fast bins fill (a request of a large size consolidates them).
    void *t48[7], *f64[10], *small[8];
    for (int i = 0; i < 7; i++)
        t48[i] = malloc(40);
    for (int i = 0; i < 10; i++)
        f64[i] = malloc(56);
    for (int i = 0; i < 8; i++) {
        small[i] = malloc(200);
        kept_guard[i] = malloc(24);
    }
    void *large = malloc(5000);
    kept_guard[8] = malloc(24);
    void *unsorted = malloc(3000);
    kept_guard[9] = malloc(24);
    // A malloc whose block is only freed is left out by the optimiser: each is passed on.
    for (int i = 0; i < 7; i++)
        touch(t48[i]);
    for (int i = 0; i < 10; i++)
        touch(f64[i]);
    for (int i = 0; i < 8; i++)
        touch(small[i]);
    touch(large);
    touch(unsorted);
    // The tcache of 48-byte chunks (asked 40): 7 frees.
    for (int i = 0; i < 7; i++)
        free(t48[i]);
    // 208-byte chunks: 7 to their tcache, the eighth to the unsorted bin, with the large one.
    for (int i = 0; i < 8; i++)
        free(small[i]);
    free(large);
    // A request none of them serves sorts them into a small and a large bin.
    kept_guard[10] = malloc(100000);
    free(unsorted); // stays in the unsorted bin
    // 64-byte chunks (asked 56): 7 to the tcache, 3 to a fast bin.
    for (int i = 0; i < 10; i++)
        free(f64[i]);
}

__attribute__((noinline)) static void scrub_stack()
{
    volatile char area[1 << 14];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

static void *worker(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < 20; i++)
        thread_kept[t][i] = malloc(24);
    // Each worker has its arena before the fifth thread starts.
    pthread_barrier_wait(&armed);
    void *f[5];
    for (int i = 0; i < 5; i++)
        f[i] = malloc(24);
    for (int i = 0; i < 5; i++)
        free(f[i]);
    for (int i = 0; i < 10; i++)
        touch(malloc(40));
    scrub_stack();
    pthread_barrier_wait(&ready);
    pthread_mutex_lock(&never);
    for (;;)
        pthread_cond_wait(&wake, &never);
    return nullptr;
}

// The fifth thread: past the cap on arenas, it shares one; it frees nothing.
static void *late(void *)
{
    late_kept = malloc(24);
    scrub_stack();
    pthread_barrier_wait(&ready);
    pthread_mutex_lock(&never);
    for (;;)
        pthread_cond_wait(&wake, &never);
    return nullptr;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "abort";
    mallopt(M_ARENA_MAX, 4);
    for (int i = 0; i < 100; i++) {
        switch (i % 3) {
        case 0: kept[i] = new Alpha; break;
        case 1: kept[i] = new Beta; break;
        default: kept[i] = new Gamma; break;
        }
    }
    for (int i = 0; i < 3; i++)
        kept_mapped[i] = malloc(200000 + 4096 * i);
    kept_aligned = aligned_alloc(1 << 20, 200000);
    leak_list(50);
    leak_objects();
    pthread_barrier_init(&armed, nullptr, 4);
    pthread_barrier_init(&ready, nullptr, 5);
    pthread_t th[4];
    for (long t = 0; t < 3; t++)
        pthread_create(&th[t], nullptr, worker, (void *)t);
    pthread_barrier_wait(&armed);
    pthread_create(&th[3], nullptr, late, nullptr);
    pthread_barrier_wait(&ready);
    // After the threads' start (pthread_create allocates) and with no allocation after it
    // (write, not stdio, whose buffer would be one), so the free lists stay as made.
    fill_free_lists();
    scrub_stack();
    if (!strcmp(mode, "wait")) {
        if (write(1, "ready\n", 6) != 6)
            return 1;
        for (;;)
            pause();
    }
    if (!strcmp(mode, "abort"))
        abort();
    return 0;
}
