// build: -O1
/* One thread, one of each: malloc, calloc, memalign, realloc and free, after `steps()`, where a
 * debugger sets a watchpoint on the thread's list and stops inside each list update. A block of
 * 8 bytes stays live throughout, so the debugger can read which list is the thread's from its
 * header. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>

void *volatile anchor;
void *volatile slot[3];

__attribute__((noinline)) void steps(void) { __asm__ volatile(""); }

int main(void) {
    anchor = malloc(8);
    steps();
    slot[0] = malloc(40);
    slot[1] = calloc(1, 50);
    slot[2] = memalign(64, 60);
    slot[0] = realloc(slot[0], 4000);
    free(slot[1]);
    free(slot[2]);
    free(slot[0]);
    free(anchor);
    steps();
    return 0;
}
