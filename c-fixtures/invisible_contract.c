// What a program can read of glibc's malloc contract beyond its checks: the usable size of small
// blocks, errno after a posix_memalign that cannot be served, and how much address space a
// 1 GiB-aligned memalign takes. Printed for a test to compare a bare run with a preloaded one.
// build: -fno-builtin
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long vm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmSize:", 7))
            kib = atol(line + 7);
    if (f)
        fclose(f);
    return kib;
}

int main(void) {
    for (size_t n = 0; n <= 48; n += 4) {
        void *volatile p = malloc(n);
        printf("malloc_usable_size(malloc(%zu)) = %zu\n", n, malloc_usable_size(p));
        free(p);
    }
    void *p = &p;
    errno = 1234;
    int r = posix_memalign(&p, 64, SIZE_MAX / 2);
    printf("posix_memalign(64, SIZE_MAX / 2) = %d, errno %d\n", r, errno);
    long before = vm_kib();
    void *volatile big = memalign((size_t)1 << 30, 100);
    long after = vm_kib();
    printf("memalign(1 GiB, 100) %s, took %ld MiB of address space\n", big ? "succeeded" : "failed",
           (after - before) / 1024);
    free(big);
    return 0;
}
