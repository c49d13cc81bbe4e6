/* Threads started from constructors, before main: this program's own constructor starts one
 * thread it joins there and one that main joins later, and it is linked against libhang_ctor,
 * whose constructor (run by the loader at start-up, before this one) starts and joins another.
 * Every one of them allocates, and the first act of each is pthread_getattr_np. */
// build: -lhang_ctor
#include "hang_common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hang_ctor_report(void);

/* Builds a line of text in a growing buffer and returns it. */
static void *worker(void *arg)
{
    int probe;
    int ok = own_stack_holds(&probe, NULL);
    const char *who = arg;
    char *s = NULL;
    size_t len = 0;
    for (int i = 0; i < 100; i++) {
        s = realloc(s, len + 8);
        len += (size_t)snprintf(s + len, 8, "%d,", i % 10);
    }
    char *line = malloc(64 + strlen(who));
    snprintf(line, 64 + strlen(who), "%s: own stack %s, %zu characters", who, ok ? "yes" : "no", len);
    free(s);
    return line;
}

static char *joined_in_ctor;
static pthread_t later;

__attribute__((constructor)) static void start_threads(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, "joined in the constructor") != 0)
        abort();
    pthread_join(t, (void **)&joined_in_ctor);
    if (pthread_create(&later, NULL, worker, "joined in main") != 0)
        abort();
}

int main(void)
{
    char *line;
    pthread_join(later, (void **)&line);
    printf("%s\n%s\nlibrary %s\n", joined_in_ctor, line, hang_ctor_report());
    int ok = strstr(joined_in_ctor, "own stack yes") && strstr(line, "own stack yes") &&
             strstr(hang_ctor_report(), "own stack yes");
    free(line);
    free(joined_in_ctor);
    return !ok;
}
