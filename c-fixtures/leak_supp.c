/* Leaks for the suppression tests: the vendor library's one block at start-up, and the
 * program's own from two functions: parse_args leaks two 40-byte blocks (calloc), make_cache
 * one 200-byte block (malloc). A block held in a global stays reachable. With the argument
 * "wait" it says "ready" after leaking and waits to be killed, for the tests of a running
 * process. */
// build: -lleak_vendor
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int vendor_version(void);

void *volatile sink;
void *held;

__attribute__((noinline)) void parse_args(int n)
{
    for (int i = 0; i < n; i++) {
        char *arg = calloc(1, 40);
        strcpy(arg, "argument");
        sink = arg;
    }
    sink = 0;
}

__attribute__((noinline)) void make_cache(void)
{
    char *cache = malloc(200);
    memset(cache, 'c', 200);
    sink = cache;
    sink = 0;
}

int main(int argc, char **argv)
{
    held = malloc(64);
    parse_args(2);
    make_cache();
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    printf("vendor %d\n", vendor_version());
    return 0;
}
