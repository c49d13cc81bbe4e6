// The signal dispositions a program sets and reads back through every call glibc has for them,
// printed for a test to compare a bare run with a preloaded one. MODE api prints what each call
// returns for SIGINT, SIGTERM, SIGHUP and SIGSEGV; ignored sets SIGTERM to SIG_IGN and raises
// it (a program that ignores a signal lives on); handled raises SIGTERM at a handler of the
// program's, which prints and returns; rethrow raises SIGTERM at a handler that puts the default
// back and raises it again, as crash handlers do. One 100-byte block is leaked first.
// Usage: invisible_signals MODE
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile leaked;

static void handler(int sig) {
    static const char line[] = "handled\n";
    if (write(1, line, sizeof line - 1) < 0)
        _exit(1);
    (void)sig;
}

static void rethrow(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

static const char *kind(sighandler_t h) {
    if (h == SIG_DFL)
        return "SIG_DFL";
    if (h == SIG_IGN)
        return "SIG_IGN";
    if (h == SIG_ERR)
        return "SIG_ERR";
    if (h == SIG_HOLD)
        return "SIG_HOLD";
    if (h == handler)
        return "handler";
    return "something else";
}

static void query(int sig, const char *after) {
    struct sigaction sa;
    memset(&sa, 0xa5, sizeof sa);
    int r = sigaction(sig, NULL, &sa);
    printf("  after %s: sigaction %d: %s, flags %#x, mask %#lx, restorer %s\n", after, r,
           kind(sa.sa_handler), (unsigned)sa.sa_flags, sa.sa_mask.__val[0],
           sa.sa_restorer ? "set" : "null");
}

static void api(int sig) {
    printf("signal %d\n", sig);
    query(sig, "start");
    printf("  signal(handler) returned %s\n", kind(signal(sig, handler)));
    query(sig, "signal(handler)");
    printf("  signal(SIG_DFL) returned %s\n", kind(signal(sig, SIG_DFL)));
    query(sig, "signal(SIG_DFL)");
    printf("  sigset(handler) returned %s\n", kind(sigset(sig, handler)));
    printf("  sigset(SIG_HOLD) returned %s\n", kind(sigset(sig, SIG_HOLD)));
    printf("  sigset(SIG_DFL) returned %s\n", kind(sigset(sig, SIG_DFL)));
    query(sig, "sigset(SIG_DFL)");
    printf("  sysv_signal(SIG_IGN) returned %s\n", kind(sysv_signal(sig, SIG_IGN)));
    printf("  bsd_signal(SIG_DFL) returned %s\n", kind(bsd_signal(sig, SIG_DFL)));
    printf("  siginterrupt(1) returned %d\n", siginterrupt(sig, 1));
    query(sig, "siginterrupt(1)");
    printf("  siginterrupt(0) returned %d\n", siginterrupt(sig, 0));
    query(sig, "siginterrupt(0)");
    printf("  sigignore returned %d\n", sigignore(sig));
    query(sig, "sigignore");
    struct sigaction dfl, old;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    dfl.sa_flags = SA_RESETHAND;
    sigaddset(&dfl.sa_mask, SIGUSR1);
    printf("  sigaction(SIG_DFL) returned %d, old %s\n", sigaction(sig, &dfl, &old), kind(old.sa_handler));
    query(sig, "sigaction(SIG_DFL, SA_RESETHAND, {SIGUSR1})");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "api";
    leaked = malloc(100);
    leaked = NULL;
    if (!strcmp(mode, "api")) {
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGSEGV};
        for (int i = 0; i < 4; i++)
            api(sigs[i]);
    } else if (!strcmp(mode, "ignored")) {
        signal(SIGTERM, SIG_IGN);
        raise(SIGTERM);
        printf("lived on\n");
    } else if (!strcmp(mode, "handled")) {
        signal(SIGTERM, handler);
        raise(SIGTERM);
        printf("lived on\n");
    } else if (!strcmp(mode, "rethrow")) {
        signal(SIGTERM, rethrow);
        raise(SIGTERM);
        printf("lived on\n");
    }
    fflush(stdout);
    return 0;
}
