// build: -O0
/* Leak classes where the program made memory unreadable (the exit report must read it as a
 * debugger does, never fault, and not take what it cannot read for a root):
 *
 * - a private mapping of a 2-page file, the file then truncated to 1 page: a load from the
 *   second page raises SIGBUS. Its first page holds a block's start (still reachable); its
 *   second page held another's (definitely lost: nothing can read that word);
 * - a page of .bss made PROT_NONE: the block it points to is definitely lost; a pointer on the
 *   next .bss page, still readable, keeps its block reachable;
 * - an anonymous page made PROT_NONE, holding the only pointer to a block: definitely lost;
 * - a 10 MiB block held by a global, one page inside it made PROT_NONE: the block is still
 *   reachable, the block pointed to from the protected page definitely lost and the one
 *   pointed to from a readable part of it still reachable.
 *
 * valgrind: 4 definitely lost (4 x 48 bytes), 4 still reachable (10 MiB + 3 x 48 bytes).
 * It prints "done" and exits 0, as it must preloaded too. With the argument `ready` it prints
 * "ready" instead and waits to be killed, for a look at the running process.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096
#define BIG (10 << 20)

static char bss_pages[2 * PAGE] __attribute__((aligned(PAGE)));
void *big_block;

static void *block(void)
{
    void *p = malloc(48);
    if (!p)
        exit(1);
    memset(p, 0, 48);
    return p;
}

/* Stores `p` at `at` through a volatile pointer, so the store survives the optimiser. */
static void put(void *at, void *p)
{
    *(void *volatile *)at = p;
}

static void truncated_file(void)
{
    char path[] = "/tmp/leakedge_unreadable.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, 2 * PAGE) != 0)
        exit(2);
    unlink(path);
    char *m = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        exit(3);
    put(m, block());
    put(m + PAGE, block());
    /* The pages past the new end of file leave the mapping: a load there raises SIGBUS. */
    if (ftruncate(fd, PAGE) != 0)
        exit(4);
    close(fd);
}

static void protected_bss(void)
{
    put(bss_pages, block());
    put(bss_pages + PAGE, block());
    if (mprotect(bss_pages, PAGE, PROT_NONE) != 0)
        exit(5);
}

/* Two pages, the lower one protected: the kernel places the mapping right below the file's, and
 * the upper page, empty, keeps the file's mapping from sitting right above an unreadable page
 * (the shape of a thread's stack above its guard page, which is no root). */
static void protected_mapping(void)
{
    char *m = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        exit(6);
    put(m, block());
    if (mprotect(m, PAGE, PROT_NONE) != 0)
        exit(7);
}

static void protected_in_block(void)
{
    char *b = malloc(BIG);
    if (!b)
        exit(8);
    memset(b, 0, BIG);
    big_block = b;
    char *page = (char *)(((unsigned long)b + BIG / 2) & ~(unsigned long)(PAGE - 1));
    put(page, block());
    put(page + 2 * PAGE, block());
    if (mprotect(page, PAGE, PROT_NONE) != 0)
        exit(9);
}

int main(int argc, char **argv)
{
    truncated_file();
    protected_bss();
    protected_mapping();
    protected_in_block();
    if (argc > 1 && strcmp(argv[1], "ready") == 0) {
        /* write(), not stdio: its buffer would be one more block than a bare run leaves. */
        if (write(1, "ready\n", 6) != 6)
            exit(1);
        for (;;)
            pause();
    }
    printf("done\n");
    return 0;
}
