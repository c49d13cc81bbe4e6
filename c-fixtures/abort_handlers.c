// A program with a SIGABRT handler of its own, of the kind argv[1] names, that leaks one 4321-byte
// block and then leaves as argv[2] says: "return" from main, or "abort" (its own abort()).
// Handlers: "alloc" (allocates and writes a line, then returns, as a crash reporter does),
// "block" (waits forever), "exit" (calls _exit(7)), "longjmp" (jumps back into main, which then
// exits 9). The library's abort at exit (abort-shutdown) must leave a core whichever it is; the
// program's own abort() must still run its handler, as bare.
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sigjmp_buf back;
static const char *kind;
// volatile: the handler's block and the leak's address are stored where the compiler must keep
// them.
static void *volatile kept;

static void on_abort(int sig) {
    (void)sig;
    if (strcmp(kind, "alloc") == 0) {
        char *msg = malloc(64);
        snprintf(msg, 64, "handler: SIGABRT\n");
        write(2, msg, strlen(msg));
        kept = msg;
    } else if (strcmp(kind, "block") == 0) {
        for (;;)
            pause();
    } else if (strcmp(kind, "exit") == 0) {
        _exit(7);
    } else if (strcmp(kind, "longjmp") == 0) {
        siglongjmp(back, 1);
    }
}

__attribute__((noinline)) static void leak(void) {
    char *p = malloc(4321);
    memset(p, 1, 4321);
    // The pointer leaves through an opaque asm and is forgotten: the block is definitely lost.
    __asm__ volatile("" : : "r"(p) : "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    kind = argv[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_abort;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGABRT, &sa, 0);
    if (sigsetjmp(back, 1))
        return 9;
    leak();
    if (strcmp(argv[2], "abort") == 0)
        abort();
    return 0;
}
