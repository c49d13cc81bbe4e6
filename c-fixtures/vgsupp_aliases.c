/* Leaks whose stacks valgrind and a symboliser name differently: through glibc functions that
 * have several symbols at one address (strdup is also __strdup and __GI___strdup; fopen is
 * _IO_new_fopen and fopen@@GLIBC_2.2.5), and from a constructor that runs before main (its
 * stack ends in libc's call_init, not under main). Each leaked block is definitely lost, its
 * FILE's buffer indirectly: their pointers are overwritten. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

__attribute__((constructor)) static void early(void)
{
    char *p = malloc(24);
    memset(p, 'e', 24);
    sink = p;
    sink = 0;
}

__attribute__((noinline)) static void names(void)
{
    for (int i = 0; i < 3; i++) {
        sink = strdup("a name held by nothing");
    }
    sink = 0;
}

__attribute__((noinline)) static void files(void)
{
    /* fopen's FILE and, once read, its buffer: lost with the pointer to the FILE. */
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        char line[64];
        if (fgets(line, sizeof line, f))
            sink = line;
    }
    sink = f;
    sink = 0;
}

int main(void)
{
    names();
    files();
    return 0;
}
