/* Leaks five 300-byte blocks, then breaks libdmem's list on purpose, as a heap overflow would,
 * before exiting (the tests run it with DMEM_OPTS=abort-shutdown for a core). It writes into the
 * 112-byte header in front of a block, whose first word is the next pointer and whose word at
 * offset 108 is the magic (libdmem's layout v1). The blocks were allocated in a row by one
 * thread, so the list runs from the newest: b4, b3, b2, b1, b0.
 *
 *   gdb_corrupt unmapped   b2's next points into unmapped memory
 *   gdb_corrupt cycle      b1's next points back to b3
 *   gdb_corrupt magic      b3's magic is overwritten
 *
 * It prints the header address of every block ("hdr K 0x...") for the test to look for, to
 * stdout and to the file named by the second argument, if any ("-" for none). A third argument
 * "crash" has it end by SIGSEGV instead, as a program whose overflow went on to crash it.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 112

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "unmapped";
    char *b[5];
    for (int i = 0; i < 5; i++) {
        b[i] = malloc(300);
        memset(b[i], 'x', 300);
    }
    FILE *report = argc > 2 && strcmp(argv[2], "-") != 0 ? fopen(argv[2], "w") : NULL;
    for (int i = 0; i < 5; i++) {
        printf("hdr %d %p\n", i, (void *)(b[i] - HEADER));
        if (report)
            fprintf(report, "hdr %d %p\n", i, (void *)(b[i] - HEADER));
    }
    fflush(stdout);
    if (report)
        fclose(report);
    if (strcmp(mode, "unmapped") == 0) {
        uint64_t bogus = 0x10000; /* the first page above the NULL guard is never mapped */
        memcpy(b[2] - HEADER, &bogus, sizeof bogus);
    } else if (strcmp(mode, "cycle") == 0) {
        uint64_t back = (uint64_t)(uintptr_t)(b[3] - HEADER);
        memcpy(b[1] - HEADER, &back, sizeof back);
    } else if (strcmp(mode, "magic") == 0) {
        uint32_t junk = 0x41414141;
        memcpy(b[3] - HEADER + 108, &junk, sizeof junk);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (argc > 3 && strcmp(argv[3], "crash") == 0)
        raise(SIGSEGV);
    return 0;
}
