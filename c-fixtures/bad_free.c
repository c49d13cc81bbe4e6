/* Frees of pointers that were never handed out, or were already freed, selected by argv[1]:
 *   double        free the same block twice
 *   stack         free a pointer to a local variable
 *   static        free a pointer into a static buffer of garbage bytes
 *   interior      free a pointer into the middle of a live block
 *   realloc-stack realloc of a pointer to a local variable
 *   realloc-freed realloc of a block already freed
 * The pointer is printed on stdout first, so a test can look for it in the complaint. Under an
 * allocator that checks, the process aborts at the bad call; if it is told to ignore bad frees,
 * it carries on and prints "survived" after using the heap some more. */
// build: -fno-builtin -Wno-free-nonheap-object
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char garbage[8192];

static void announce(const char *what, void *p)
{
    printf("%s %p\n", what, p);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    char local[256];
    /* Set up stdio's buffer before the bad call, so nothing allocates in between. */
    printf("mode %s\n", mode);
    fflush(stdout);
    memset(local, 0x5a, sizeof(local));
    memset(garbage, 0xa7, sizeof(garbage));

    if (strcmp(mode, "double") == 0) {
        char *p = malloc(200);
        strcpy(p, "twice");
        announce("double free of", p);
        free(p);
        free(p);
    } else if (strcmp(mode, "stack") == 0) {
        announce("free of stack pointer", local + 128);
        free(local + 128);
    } else if (strcmp(mode, "static") == 0) {
        announce("free of static pointer", garbage + 4096);
        free(garbage + 4096);
    } else if (strcmp(mode, "interior") == 0) {
        char *p = malloc(4096);
        memset(p, 0x33, 4096);
        announce("free of interior pointer", p + 1024);
        free(p + 1024);
        free(p);
    } else if (strcmp(mode, "realloc-stack") == 0) {
        announce("realloc of stack pointer", local + 128);
        void *r = realloc(local + 128, 1000);
        (void)r; /* whatever came back cannot be used safely */
    } else if (strcmp(mode, "realloc-freed") == 0) {
        char *p = malloc(300);
        announce("realloc of freed block", p);
        free(p);
        void *r = realloc(p, 1000);
        (void)r;
    } else {
        printf("unknown mode\n");
        return 2;
    }

    /* Still alive: the heap must still work. */
    void *blocks[100];
    for (int i = 0; i < 100; i++)
        blocks[i] = malloc((size_t)i * 10 + 1);
    for (int i = 0; i < 100; i++)
        free(blocks[i]);
    printf("survived\n");
    return 0;
}
