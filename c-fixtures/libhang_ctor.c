/* A library whose constructor and destructor allocate, ask for their thread's attributes, and
 * start a thread that allocates and is joined before they return. Loaded with dlopen, both run
 * while the loader holds its load lock; linked at build time, the constructor runs before main.
 * A stack walker that takes a loader lock (dladdr, say) in the started thread would wait for the
 * constructor, which waits for the thread. */
#include "hang_common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCKS = 64 };

static char report[256];
static char *kept;

/* A started thread's first act is pthread_getattr_np; then it allocates, grows and frees. */
static void *worker(void *arg)
{
    (void)arg;
    int probe;
    int ok = own_stack_holds(&probe, NULL);
    void *blocks[BLOCKS];
    size_t total = 0;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(16 + (size_t)i * 16);
        blocks[i] = realloc(blocks[i], 32 + (size_t)i * 16);
        total += 32 + (size_t)i * 16;
    }
    for (int i = 0; i < BLOCKS; i++)
        free(blocks[i]);
    return (void *)(intptr_t)(ok ? total : 0);
}

static size_t in_thread(void)
{
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 0;
    pthread_join(t, &r);
    return (size_t)(intptr_t)r;
}

__attribute__((constructor)) static void hang_ctor_init(void)
{
    int probe;
    int own = own_stack_holds(&probe, NULL);
    kept = strdup("kept from the constructor");
    size_t total = in_thread();
    snprintf(report, sizeof(report), "constructor: own stack %s, thread allocated %zu bytes, kept \"%s\"",
             own ? "yes" : "no", total, kept);
}

__attribute__((destructor)) static void hang_ctor_fini(void)
{
    /* Nobody reads the result any more; the point is a thread joined inside the destructor. */
    if (in_thread() == 0)
        abort();
    free(kept);
}

/* What the constructor did, for the program to print. */
const char *hang_ctor_report(void)
{
    return report;
}
