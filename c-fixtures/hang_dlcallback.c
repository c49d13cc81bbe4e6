/* Allocation from inside a dl_iterate_phdr callback, where the loader holds its lock of the list
 * of loaded objects: an allocator whose stack walker takes that lock again, or any lock the
 * loader takes after it, deadlocks here. Threads make their very first allocation inside the
 * callback while another thread loads and unloads a library, which takes the same lock to
 * change the list.
 *
 *   hang_dlcallback main     the main thread only
 *   hang_dlcallback threads  fresh threads, and a thread doing dlopen/dlclose meanwhile
 *
 * What it prints does not depend on which other objects are loaded (a preloaded allocator is). */
#include "hang_common.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 40 };

struct seen {
    char **names;
    size_t len, cap;
    int libc;
};

/* Copies the object's name and program headers into fresh blocks, growing the list with
 * realloc: every kind of allocation, made while the loader's lock is held. */
static int visit(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct seen *s = data;
    if (s->len == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 2;
        s->names = realloc(s->names, s->cap * sizeof(*s->names));
    }
    s->names[s->len++] = strdup(info->dlpi_name);
    ElfW(Phdr) *copy = calloc(info->dlpi_phnum, sizeof(*copy));
    memcpy(copy, info->dlpi_phdr, info->dlpi_phnum * sizeof(*copy));
    int loads = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        loads += copy[i].p_type == PT_LOAD;
    free(copy);
    if (strstr(info->dlpi_name, "/libc.so.6") && loads > 0)
        s->libc++;
    return 0;
}

/* One full iteration; 1 if libc was seen exactly once. */
static int iterate(void)
{
    struct seen s = {0};
    dl_iterate_phdr(visit, &s);
    for (size_t i = 0; i < s.len; i++)
        free(s.names[i]);
    free(s.names);
    return s.libc == 1;
}

static char plugin[PATH_MAX + 32];
static atomic_int stop;

static void *loader(void *arg)
{
    (void)arg;
    long loads = 0;
    /* At least once, however late this thread gets to run. */
    do {
        void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            return (void *)-1;
        dlclose(h);
        loads++;
    } while (!atomic_load(&stop));
    return (void *)loads;
}

static void *fresh(void *arg)
{
    (void)arg;
    int good = 0;
    for (int i = 0; i < ROUNDS; i++)
        good += iterate();
    return (void *)(intptr_t)good;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "main") == 0) {
        int good = 0;
        for (int i = 0; i < ROUNDS; i++)
            good += iterate();
        printf("main: libc seen once in %d of %d iterations\n", good, ROUNDS);
        return good != ROUNDS;
    }
    if (strcmp(mode, "threads") != 0) {
        fprintf(stderr, "usage: hang_dlcallback main|threads\n");
        return 2;
    }
    if (!next_to_program("libdmemfix_plugin.so", plugin, sizeof(plugin)))
        return 1;

    pthread_t load, t[THREADS];
    if (pthread_create(&load, NULL, loader, NULL) != 0)
        return 1;
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, fresh, NULL) != 0)
            return 1;
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *good;
        pthread_join(t[i], &good);
        printf("thread %d: libc seen once in %ld of %d iterations\n", i, (long)(intptr_t)good, ROUNDS);
        bad += (intptr_t)good != ROUNDS;
    }
    atomic_store(&stop, 1);
    void *loads;
    pthread_join(load, &loads);
    printf("loader: %s\n", (intptr_t)loads > 0 ? "loaded and unloaded the plugin" : "failed");
    return bad != 0 || (intptr_t)loads <= 0;
}
