/* Frees and allocations during thread teardown: pthread_key destructors that free the thread's
 * blocks, allocate new ones and set the key again (so glibc runs another destructor round),
 * a __thread pointer freed by a destructor, and the main thread freeing from atexit. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 12, ROUNDS = 20 };

static pthread_key_t key_free, key_realloc;
static __thread char *tls_buf;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long destructor_calls, bad;

struct payload {
    int rounds_left;
    char *text;
};

static void count(long calls, long wrong)
{
    pthread_mutex_lock(&lock);
    destructor_calls += calls;
    bad += wrong;
    pthread_mutex_unlock(&lock);
}

/* Frees everything the thread left, and once allocates again and re-arms the key. */
static void destroy_payload(void *v)
{
    struct payload *p = v;
    long wrong = strcmp(p->text, "payload") != 0;
    free(p->text);
    if (tls_buf) {
        wrong += tls_buf[0] != 'T';
        free(tls_buf);
        tls_buf = NULL;
    }
    if (p->rounds_left > 0) {
        struct payload *again = malloc(sizeof(*again));
        again->rounds_left = p->rounds_left - 1;
        again->text = strdup("payload");
        pthread_setspecific(key_free, again);
    }
    free(p);
    count(1, wrong);
}

static void destroy_realloc(void *v)
{
    char *s = realloc(v, 100000);
    long wrong = s == NULL || strcmp(s, "grow me") != 0;
    free(s);
    count(1, wrong);
}

static void *worker(void *arg)
{
    (void)arg;
    struct payload *p = malloc(sizeof(*p));
    p->rounds_left = 2; /* within PTHREAD_DESTRUCTOR_ITERATIONS */
    p->text = strdup("payload");
    pthread_setspecific(key_free, p);
    pthread_setspecific(key_realloc, strdup("grow me"));
    tls_buf = malloc(4096);
    tls_buf[0] = 'T';
    if ((intptr_t)arg % 2)
        pthread_exit(NULL);
    return NULL;
}

static char *at_exit_block;

static void free_at_exit(void)
{
    int ok = at_exit_block && strcmp(at_exit_block, "freed at exit") == 0;
    free(at_exit_block);
    /* Also allocate and free during exit processing. */
    char *late = malloc(1000);
    free(late);
    printf("atexit handler: %s\n", ok ? "ok" : "FAILED");
    fflush(stdout);
}

int main(void)
{
    pthread_key_create(&key_free, destroy_payload);
    pthread_key_create(&key_realloc, destroy_realloc);
    atexit(free_at_exit);
    at_exit_block = strdup("freed at exit");
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t t[NT];
        for (int i = 0; i < NT; i++)
            pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
        for (int i = 0; i < NT; i++)
            pthread_join(t[i], NULL);
    }
    /* Three rounds of destroy_payload and one of destroy_realloc per thread. */
    long want = (long)ROUNDS * NT * 4;
    printf("destructor calls %ld (want %ld), bad %ld\n", destructor_calls, want, bad);
    int ok = destructor_calls == want && bad == 0;
    printf("%s\n", ok ? "tls_teardown: all checks passed" : "tls_teardown: FAILED");
    fflush(stdout);
    return ok ? 0 : 1;
}
