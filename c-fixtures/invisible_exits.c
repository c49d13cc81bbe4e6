// N threads call exit(4) at the same moment (a barrier releases them together); with "main",
// main returns 3 at that moment too instead of waiting. One 100-byte block is leaked before.
// Usage: invisible_exits N [main]
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_barrier_t go;
static void *volatile leaked;

static void *worker(void *arg) {
    pthread_barrier_wait(&go);
    exit(4);
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    int with_main = argc > 2 && !strcmp(argv[2], "main");
    leaked = malloc(100);
    leaked = NULL;
    pthread_barrier_init(&go, NULL, n + with_main);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL))
            return 1;
    }
    if (with_main) {
        pthread_barrier_wait(&go);
        return 3;
    }
    for (;;)
        pause();
}
