/* dlopen of a library whose constructor allocates and joins a thread that allocates (see
 * libhang_ctor.c), repeatedly, from the main thread and from fresh threads whose first act is
 * the dlopen, so their first allocation happens inside the constructor under the load lock. */
#include "hang_common.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LOADS = 20, THREADS = 3 };

static char path[PATH_MAX + 32];

/* Loads, reads the constructor's report, unloads; the report, copied, or NULL on failure. */
static char *load_once(void)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return NULL;
    }
    const char *(*report)(void) = (const char *(*)(void))dlsym(h, "hang_ctor_report");
    char *copy = report ? strdup(report()) : NULL;
    dlclose(h);
    return copy;
}

static void *fresh(void *arg)
{
    (void)arg;
    return load_once();
}

int main(void)
{
    if (!next_to_program("libhang_ctor.so", path, sizeof(path)))
        return 1;

    int bad = 0;
    char *first = load_once();
    if (!first)
        return 1;
    for (int i = 1; i < LOADS; i++) {
        char *r = load_once();
        bad += !r || strcmp(r, first) != 0;
        free(r);
    }
    printf("main, %d loads: %s\n", LOADS, first);
    for (int i = 0; i < THREADS; i++) {
        pthread_t t;
        void *r;
        if (pthread_create(&t, NULL, fresh, NULL) != 0)
            return 1;
        pthread_join(t, &r);
        bad += !r || strcmp(r, first) != 0;
        printf("thread %d: %s\n", i, r ? (char *)r : "failed");
        free(r);
    }
    free(first);
    printf("%d report(s) differed\n", bad);
    return bad != 0;
}
