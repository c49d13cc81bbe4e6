// errno across every allocation call that succeeds: each must leave it as the program set it.
// Prints how many calls changed it, and exits 1 if any did.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    int changed = 0;
    for (int i = 0; i < 2000; i++) {
        void *volatile p, *volatile q;
        errno = 1234;
        p = malloc(10 + i % 300);
        changed += errno != 1234;
        errno = 1235;
        q = calloc(3, 10 + i % 100);
        changed += errno != 1235;
        errno = 1236;
        p = realloc(p, 20 + i % 500);
        changed += errno != 1236;
        errno = 1237;
        free(q);
        changed += errno != 1237;
        errno = 1238;
        if (posix_memalign((void **)&q, 64, 100) == 0)
            free(q);
        changed += errno != 1238;
        errno = 1239;
        free(p);
        changed += errno != 1239;
    }
    printf("calls that changed errno: %d\n", changed);
    return changed != 0;
}
