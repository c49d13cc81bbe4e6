/* Allocation on stacks a stack walker cannot know from the thread's attributes:
 *
 * - threads switching among makecontext/swapcontext contexts whose stacks come from malloc and
 *   from mmap, making their first allocation on such a stack, then allocating on their own;
 * - a signal handler on a sigaltstack (from malloc on the main thread, from mmap on a fresh
 *   thread whose first allocation is in the handler), raised synchronously with raise();
 * - threads whose stacks were given with pthread_attr_setstack (from mmap and from
 *   posix_memalign).
 *
 * Some blocks made on each kind of stack are kept to the end, each kind with its own size, and
 * the program prints one `kept SIZE COUNT FUNCTION` line per kind, counted as they were made,
 * naming the function that allocated them, which a recorded stack of each must contain. All other output is fixed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

enum {
    STACK = 256 * 1024,
    CTX_THREADS = 2,
    CONTEXTS = 4, /* per thread: even ones on malloc'd stacks, odd ones on mmap'd */
    ROUNDS = 50,
    KEEP_EVERY = 10,
    SIG_ROUNDS = 10,
    SETSTACK_KEEP = 8,
};

/* The kinds of kept blocks: each has its own size and the function that allocates it. */
enum { CTX_HEAP, CTX_MMAP, HOME, SIG_HEAP, SIG_MMAP, SET_MMAP, SET_HEAP, KINDS };

static const struct {
    size_t size;
    const char *function;
} kinds[KINDS] = {
    [CTX_HEAP] = {1111, "ctx_body"},     [CTX_MMAP] = {1222, "ctx_body"},
    [HOME] = {1333, "ctx_home"},         [SIG_HEAP] = {1444, "on_signal"},
    [SIG_MMAP] = {1555, "on_signal"},    [SET_MMAP] = {1666, "setstack_body"},
    [SET_HEAP] = {1777, "setstack_body"},
};

/* Not static, so the compiler cannot drop the stores (and then the allocations) as unread. */
void *kept[1024];
static atomic_int nkept, counts[KINDS];

/* Allocates a block of the kind and keeps it to the end. */
__attribute__((always_inline)) static inline void keep(int kind)
{
    kept[atomic_fetch_add(&nkept, 1)] = malloc(kinds[kind].size);
    atomic_fetch_add(&counts[kind], 1);
}

/* Allocates, grows and frees a few blocks, so every entry point runs on the current stack. */
__attribute__((noinline)) static unsigned churn(unsigned seed)
{
    char *a = malloc(24 + seed % 200);
    char *b = calloc(3, 40 + seed % 50);
    a = realloc(a, 300 + seed % 700);
    memset(a, (int)seed, 300);
    unsigned sum = (unsigned char)a[299] + (unsigned char)b[0];
    free(a);
    free(b);
    return sum;
}

static void *stack_from(int heap)
{
    if (heap)
        return malloc(STACK);
    void *p = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* ---- contexts */

struct ctx_thread {
    ucontext_t home;
    ucontext_t ctx[CONTEXTS];
    void *stacks[CONTEXTS];
    unsigned sum;
};

static __thread struct ctx_thread *current;

/* The body of every context: allocate, keep some, and hand back to the thread's own stack. */
__attribute__((noinline)) static void ctx_body(int index)
{
    struct ctx_thread *t = current;
    int kind = index % 2 == 0 ? CTX_HEAP : CTX_MMAP;
    for (int r = 0; r < ROUNDS; r++) {
        t->sum += churn((unsigned)(r * CONTEXTS + index));
        if (r % KEEP_EVERY == 0)
            keep(kind);
        swapcontext(&t->ctx[index], &t->home);
    }
}

/* Runs the contexts round-robin from the thread's own stack; the first allocation of this
 * thread happens on a context's stack. */
__attribute__((noinline)) static void *ctx_home(void *arg)
{
    struct ctx_thread *t = arg;
    current = t;
    for (int i = 0; i < CONTEXTS; i++) {
        getcontext(&t->ctx[i]);
        t->ctx[i].uc_stack.ss_sp = t->stacks[i];
        t->ctx[i].uc_stack.ss_size = STACK;
        t->ctx[i].uc_link = &t->home;
        makecontext(&t->ctx[i], (void (*)(void))ctx_body, 1, i);
    }
    /* Each context yields ROUNDS times, and then returns to uc_link. */
    for (int r = 0; r <= ROUNDS; r++)
        for (int i = 0; i < CONTEXTS; i++)
            swapcontext(&t->home, &t->ctx[i]);
    /* Back on the thread's own stack, which must still be recorded as such. */
    keep(HOME);
    t->sum += churn(7);
    return NULL;
}

static unsigned contexts(void)
{
    static struct ctx_thread threads[CTX_THREADS];
    pthread_t id[CTX_THREADS];
    for (int n = 0; n < CTX_THREADS; n++) {
        for (int i = 0; i < CONTEXTS; i++)
            if (!(threads[n].stacks[i] = stack_from(i % 2 == 0)))
                return 0;
        if (pthread_create(&id[n], NULL, ctx_home, &threads[n]) != 0)
            return 0;
    }
    unsigned sum = 0;
    for (int n = 0; n < CTX_THREADS; n++) {
        pthread_join(id[n], NULL);
        sum += threads[n].sum;
        for (int i = 0; i < CONTEXTS; i++) {
            if (i % 2 == 0)
                free(threads[n].stacks[i]);
            else
                munmap(threads[n].stacks[i], STACK);
        }
    }
    return sum;
}

/* ---- signal handler on an alternate stack */

static __thread int sig_kind;
static __thread char *alt_lo;
static atomic_int on_alt;

__attribute__((noinline)) static void on_signal(int sig)
{
    (void)sig;
    char probe;
    if (&probe >= alt_lo && &probe < alt_lo + STACK)
        atomic_fetch_add(&on_alt, 1);
    keep(sig_kind);
    churn(3);
}

/* Installs `stack` as the calling thread's alternate stack and raises the signal on it. */
static void raise_on(void *stack, int kind)
{
    stack_t ss = {.ss_sp = stack, .ss_size = STACK, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    alt_lo = stack;
    sig_kind = kind;
    for (int i = 0; i < SIG_ROUNDS; i++)
        raise(SIGUSR1);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
}

static void *sig_thread(void *stack)
{
    raise_on(stack, SIG_MMAP);
    return NULL;
}

static int signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);

    void *heap = stack_from(1);
    raise_on(heap, SIG_HEAP);
    free(heap);

    void *mapped = stack_from(0);
    pthread_t t;
    if (!mapped || pthread_create(&t, NULL, sig_thread, mapped) != 0)
        return -1;
    pthread_join(t, NULL);
    munmap(mapped, STACK);
    return atomic_load(&on_alt);
}

/* ---- threads on stacks given with pthread_attr_setstack */

struct given {
    void *stack;
    int kind;
    int attr_matches;
};

__attribute__((noinline)) static void *setstack_body(void *arg)
{
    struct given *g = arg;
    for (int i = 0; i < SETSTACK_KEEP; i++) {
        keep(g->kind);
        churn((unsigned)i);
    }
    /* Only after the allocations: a thread whose first act is this call is hang_getattr's case. */
    pthread_attr_t attr;
    void *addr = NULL;
    size_t len = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &len);
        pthread_attr_destroy(&attr);
    }
    g->attr_matches = addr == g->stack && len == STACK;
    return NULL;
}

static int setstack(void)
{
    struct given g[2] = {{stack_from(0), SET_MMAP, 0}, {NULL, SET_HEAP, 0}};
    if (!g[0].stack || posix_memalign(&g[1].stack, 4096, STACK) != 0)
        return 0;
    int matches = 0;
    for (int i = 0; i < 2; i++) {
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        pthread_attr_setstack(&attr, g[i].stack, STACK);
        if (pthread_create(&t, &attr, setstack_body, &g[i]) != 0)
            return 0;
        pthread_attr_destroy(&attr);
        pthread_join(t, NULL);
        matches += g[i].attr_matches;
    }
    munmap(g[0].stack, STACK);
    free(g[1].stack);
    return matches;
}

int main(void)
{
    unsigned sum = contexts();
    printf("contexts: checksum %u\n", sum);
    int alt = signals();
    printf("signals: %d of %d handlers ran on the alternate stack\n", alt, 2 * SIG_ROUNDS);
    int matches = setstack();
    printf("setstack: %d of 2 threads see their given stack\n", matches);

    for (int k = 0; k < KINDS; k++)
        printf("kept %zu %d %s\n", kinds[k].size, atomic_load(&counts[k]), kinds[k].function);
    return !(sum != 0 && alt == 2 * SIG_ROUNDS && matches == 2);
}
