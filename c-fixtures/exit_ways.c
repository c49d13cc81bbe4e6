// Ends in the way argv[1] names, after building a heap whose leak classes are known: a 3-node
// list nothing points to (1 block definitely lost, 2 indirectly lost, 3 x 32 bytes) and a 64-byte
// block held by a global (still reachable). Ways: return, exit, _exit, _Exit, quick_exit,
// pthread_exit (main leaves first, the last worker's end ends the process), raise-term,
// wait (prints "ready", then waits for a signal), own-handler (a SIGTERM handler of its own that
// exits 7), segv, vfork (a vfork child that calls _exit, then return), spawn (posix_spawn of
// /bin/true, then return), storm (threads malloc and free until a signal ends the process),
// closefds FILE (as a daemon does: closes every descriptor, reopens 0, 1 and 2 on /dev/null,
// writes a line to FILE opened on the descriptors 700 to 710, then returns), newfile FILE (opens
// FILE, which takes the lowest free descriptor, writes a line to it, then returns).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct node {
    struct node *next;
    char pad[24];
};

// volatile: the stores cannot be dropped, so the blocks exist whatever the optimiser sees.
static void *volatile held;

__attribute__((noinline)) static void build(void) {
    struct node *head = 0;
    for (int i = 0; i < 3; i++) {
        struct node *n = malloc(sizeof *n);
        memset(n->pad, i, sizeof n->pad);
        n->next = head;
        head = n;
    }
    // The list's head leaves this frame only through an opaque asm, then is forgotten.
    __asm__ volatile("" : : "r"(head) : "memory");
    held = malloc(64);
}

// Zeroes the dead stack below main, where the calls into malloc left block addresses: the exit
// paths' frames reuse that stack, and a stale slot they do not overwrite would otherwise count as
// a reference, differently in valgrind's run (its own malloc's frames) and ours.
__attribute__((noinline)) static void scrub(void) {
    volatile char area[16384];
    memset((char *)area, 0, sizeof area);
    __asm__ volatile("" : : "r"(area) : "memory");
}

static void say(const char *s) {
    ssize_t r = write(1, s, strlen(s));
    (void)r;
}

static void *worker(void *arg) {
    usleep(100 * 1000);
    return arg;
}

static void on_term(int sig) {
    (void)sig;
    _exit(7);
}

static void *churn(void *arg) {
    void *keep[64] = {0};
    for (unsigned i = 0;; i++) {
        unsigned k = i % 64;
        free(keep[k]);
        keep[k] = malloc(16 + i % 200);
    }
    return arg;
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "return";
    if (!strcmp(how, "own-handler"))
        signal(SIGTERM, on_term);
    build();
    scrub();
    if (!strcmp(how, "exit"))
        exit(3);
    if (!strcmp(how, "_exit"))
        _exit(4);
    if (!strcmp(how, "_Exit"))
        _Exit(5);
    if (!strcmp(how, "quick_exit"))
        quick_exit(6);
    if (!strcmp(how, "pthread_exit")) {
        pthread_t t;
        pthread_create(&t, 0, worker, 0);
        pthread_exit(0);
    }
    if (!strcmp(how, "raise-term"))
        raise(SIGTERM);
    if (!strcmp(how, "segv"))
        *(volatile int *)argv[0] = *(volatile int *)16;
    if (!strcmp(how, "wait") || !strcmp(how, "own-handler")) {
        say("ready\n");
        for (;;)
            pause();
    }
    if (!strcmp(how, "storm")) {
        pthread_t t;
        for (int i = 0; i < 3; i++)
            pthread_create(&t, 0, churn, 0);
        say("ready\n");
        churn(0);
    }
    if (!strcmp(how, "closefds") && argc > 2) {
        for (int fd = 0; fd < 1024; fd++)
            close(fd);
        open("/dev/null", O_RDONLY);
        open("/dev/null", O_WRONLY);
        open("/dev/null", O_WRONLY);
        int f = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (int fd = 700; fd <= 710; fd++)
            dup2(f, fd);
        const char line[] = "the program's own line\n";
        if (write(700, line, sizeof line - 1) < 0)
            return 1;
    }
    if (!strcmp(how, "newfile") && argc > 2) {
        int f = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const char line[] = "the program's own line\n";
        if (f < 0 || write(f, line, sizeof line - 1) < 0)
            return 1;
        free(malloc(10));
    }
    if (!strcmp(how, "vfork")) {
        pid_t pid = vfork();
        if (pid == 0)
            _exit(9);
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 9)
            return 1;
    }
    if (!strcmp(how, "spawn")) {
        pid_t pid;
        char *args[] = {"true", 0};
        if (posix_spawn(&pid, "/bin/true", 0, 0, args, 0) != 0)
            return 1;
        int st;
        waitpid(pid, &st, 0);
    }
    return 2;
}
