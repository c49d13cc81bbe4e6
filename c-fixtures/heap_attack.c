// build: -fno-builtin -ldl
/* What an attacker with a heap overflow tries, run bare and under libdmem: each mode must end
 * in SIGABRT with the allocator's own message (or, bare, glibc's), never in a write where the
 * attacker chose, a SIGSEGV, or memory handed out twice.
 *
 *   heap_attack overflow-free      writes past block a through the allocator's data in front of
 *                                  block b (under libdmem: glibc's size word and the header's
 *                                  two list links), then frees b
 *   heap_attack overflow-realloc   the same with 0xff bytes, through the first frames too, then
 *                                  reallocs b
 *   heap_attack unlink-write       (under libdmem) forges b's list links so that unlinking b would
 *                                  write b's forged `prev` into `target`, then frees b; bare it
 *                                  forges the same 16 bytes in front of b
 *   heap_attack forged-base        (under libdmem) writes the address of a fake chunk in .bss
 *                                  over the word that locates an aligned block's backend block,
 *                                  frees the aligned block, then allocates; bare it writes the
 *                                  same 8 bytes
 *   heap_attack forged-header      (under libdmem) frees a pointer into .bss behind a header
 *                                  forged with the live magic as libdmem used to store it, in
 *                                  a fake chunk of the size a later malloc(40) takes
 *   heap_attack intact             does none of it and exits 0
 *
 * A SIGABRT handler prints what the attacker's target holds ("target untouched" or "target
 * written") and whether any later allocation came from .bss, then dies of SIGABRT as the
 * program would have. Whether libdmem is loaded is found from its descriptor's symbol, so that
 * the same bytes relative to the block are written in both runs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEADER 112
#define MAGIC_LIVE 0xd3e3a11cu

void *volatile held[4];
static volatile uint64_t target = 0x1111111111111111;
static uint64_t scratch[4];
/* A fake glibc chunk and a fake libdmem header, in .bss. */
static _Alignas(64) unsigned char fake[512];

static void say(const char *s)
{
    ssize_t r = write(1, s, strlen(s));
    (void)r;
}

static void on_abort(int sig)
{
    say(target == 0x1111111111111111 ? "target untouched\n" : "target written\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((noinline)) static char *block(size_t n)
{
    char *p = malloc(n);
    if (!p)
        abort();
    memset(p, 'x', n);
    return p;
}

/* Whether any of 64 new blocks lies in .bss's fake chunk. */
static int bss_returned(void)
{
    int hit = 0;
    for (int i = 0; i < 64; i++) {
        char *p = malloc(40);
        if (p >= (char *)fake && p < (char *)fake + sizeof fake)
            hit = 1;
        held[3] = p;
    }
    return hit;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "intact";
    int dmem = dlsym(RTLD_DEFAULT, "dmem_layout") != NULL;
    size_t header = dmem ? HEADER : 0;
    signal(SIGABRT, on_abort);
    char *a = block(24);
    char *b = block(24);
    held[0] = a;
    held[1] = b;
    /* The first byte of b's allocator data that the attack reaches: glibc's size word, 8 bytes
     * in front of what glibc returned, which is b's header under libdmem. */
    char *meta = b - header - 8;
    if (!strcmp(mode, "overflow-free")) {
        /* Through glibc's size word and 15 bytes of the header: its next link and most of prev. */
        memset(a + 24, 'A', (size_t)(meta - (a + 24)) + 8 + 15);
        free(b);
    } else if (!strcmp(mode, "overflow-realloc")) {
        memset(a + 24, 0xff, (size_t)(meta - (a + 24)) + 8 + 64);
        held[1] = realloc(b, 1000);
    } else if (!strcmp(mode, "unlink-write")) {
        /* An unchecked unlink writes prev into next->prev, at next + 8, and next into
         * prev->next. */
        uint64_t *links = (uint64_t *)(b - header);
        links[0] = (uint64_t)(uintptr_t)&target - 8;
        links[1] = (uint64_t)(uintptr_t)scratch;
        free(b);
    } else if (!strcmp(mode, "forged-base")) {
        /* A fake chunk in .bss of the size glibc gives malloc(40) (under libdmem, 40 bytes and
         * the header), with a sane next chunk behind it, as glibc's free wants before it takes
         * the chunk into its tcache. */
        uint64_t *chunk = (uint64_t *)(fake + 64);
        size_t size = dmem ? 0xa0 : 0x30;
        chunk[1] = size;
        chunk[size / 8 + 1] = 0x30;
        char *p = memalign(64, 100);
        if (!p)
            abort();
        held[2] = p;
        *(uint64_t *)(p - header - 8) = (uint64_t)(uintptr_t)(chunk + 2);
        free(p);
        say(bss_returned() ? "block in .bss\n" : "no block in .bss\n");
    } else if (!strcmp(mode, "forged-header")) {
        /* A header as libdmem wrote them before magics were sealed: links null, list 0, size 40,
         * the live magic; the block behind it, and glibc's chunk fields in front. */
        uint64_t *chunk = (uint64_t *)(fake + 64);
        chunk[1] = 0xa0;
        chunk[0xa0 / 8 + 1] = 0x30;
        unsigned char *h = fake + 80;
        memset(h, 0, HEADER);
        *(uint64_t *)(h + 96) = 40;
        *(uint32_t *)(h + 104) = 1;
        *(uint32_t *)(h + 108) = MAGIC_LIVE;
        free(h + header);
        say(bss_returned() ? "block in .bss\n" : "no block in .bss\n");
    } else if (strcmp(mode, "intact")) {
        fprintf(stderr, "heap_attack: unknown mode %s\n", mode);
        return 2;
    }
    say(target == 0x1111111111111111 ? "target untouched\n" : "target written\n");
    return 0;
}
