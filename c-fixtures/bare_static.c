// build: -static -O0
/* A statically linked program run without libdmem: glibc's malloc is inside the executable,
 * and no libc.so is mapped for dmem to find main_arena in. It leaks one block and keeps one
 * (both written through, so the optimiser keeps them), then with `abort` aborts (a core from
 * the kernel or gdb), or with `wait` prints "ready" and sleeps until killed (a live process).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *kept;

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "abort";
    char *lost = malloc(100);
    memset(lost, 'x', 100);
    kept = malloc(200);
    memset(kept, 'y', 200);
    lost = NULL;
    if (!strcmp(mode, "wait")) {
        if (write(1, "ready\n", 6) != 6)
            return 1;
        for (;;)
            pause();
    }
    abort();
}
