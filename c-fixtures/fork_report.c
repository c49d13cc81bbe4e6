// A process tree for the report files: the parent leaks 100 bytes, then forks a child that leaks
// 200 more and calls exit, a child that leaks 300 more and calls _exit, and a child that execs
// this program again as "exec-child", which leaks 500 bytes of its own; the parent waits for all
// three, then returns. Each report's definitely lost bytes say whose it is: 100, 300, 400, 500.
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void leak(size_t n) {
    void *p = malloc(n);
    memset(p, 1, n);
    // Out of this frame only through an opaque asm, then forgotten.
    __asm__ volatile("" : : "r"(p) : "memory");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "exec-child")) {
        leak(500);
        return 0;
    }
    leak(100);
    pid_t a = fork();
    if (a == 0) {
        leak(200);
        exit(0);
    }
    waitpid(a, 0, 0);
    pid_t b = fork();
    if (b == 0) {
        leak(300);
        _exit(0);
    }
    waitpid(b, 0, 0);
    pid_t c = fork();
    if (c == 0) {
        execl("/proc/self/exe", argv[0], "exec-child", (char *)0);
        _exit(127);
    }
    int st;
    waitpid(c, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
