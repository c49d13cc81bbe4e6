// build: -fno-builtin
/* A program that makes the page in front of one of its page-aligned blocks inaccessible, where
 * the allocator keeps what it knows of the block (glibc's chunk header; libdmem's header), and
 * then frees the block. Bare, glibc's free faults reading its chunk header; preloaded, libdmem's
 * free faults reading its own. Prints the block ("block 0x...") first.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *volatile held;

int main(void)
{
    long page = sysconf(_SC_PAGESIZE);
    char *p = memalign((size_t)page, (size_t)page);
    if (!p)
        return 1;
    memset(p, 'x', (size_t)page);
    held = p;
    printf("block %p\n", (void *)p);
    fflush(stdout);
    if (mprotect(p - page, (size_t)page, PROT_NONE) != 0) {
        perror("mprotect");
        return 1;
    }
    free(held);
    puts("freed");
    return 0;
}
