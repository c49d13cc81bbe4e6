// build: -O1
/* A bare program (run without libdmem) whose heap grows one step per SIGUSR1, for snapshots
 * and diffs of a heap read through glibc's: each step adds 100 `Session` objects to a list
 * kept from a global and leaks 10 buffers of 1000 bytes; 50 `Config` objects stay as made.
 *
 * Argument: a file the program rewrites after each step with the number of steps done (its
 * bytes, then a newline), so a test knows when the heap holds still. It prints "ready" and
 * waits for signals until killed. Nothing allocates between steps (no stdio streams).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct Base {
    virtual ~Base() {}
    virtual long f() const = 0;
};
struct Session : Base {
    long f() const override { return id; }
    long id = 0;
    Session *next = nullptr;
};
struct Config : Base {
    long f() const override { return v[0]; }
    long v[4] = {1, 2, 3, 4};
};

Config *configs[50];
Session *sessions;
static volatile sig_atomic_t asked;

static void on_usr1(int)
{
    asked = asked + 1;
}

// Keeps a pointer from being optimised away without keeping it reachable.
__attribute__((noinline)) static void touch(void *p)
{
    asm volatile("" : : "r"(p) : "memory");
}

__attribute__((noinline)) static void step(long n)
{
    for (int i = 0; i < 100; i++) {
        Session *s = new Session;
        s->id = n * 100 + i;
        s->next = sessions;
        sessions = s;
    }
    for (int i = 0; i < 10; i++) {
        char *b = (char *)malloc(1000);
        memset(b, 'x', 1000);
        touch(b);
    }
}

static void tell(const char *file, long n)
{
    char text[24];
    int len = 0;
    char digits[20];
    int k = 0;
    do {
        digits[k++] = '0' + n % 10;
        n /= 10;
    } while (n);
    while (k)
        text[len++] = digits[--k];
    text[len++] = '\n';
    // Written whole under another name, then renamed: a reader never sees half of it.
    char tmp[4096];
    size_t fl = strlen(file);
    if (fl + 5 > sizeof tmp)
        _exit(2);
    memcpy(tmp, file, fl);
    memcpy(tmp + fl, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, len) != len || close(fd) != 0 || rename(tmp, file) != 0)
        _exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    for (int i = 0; i < 50; i++)
        configs[i] = new Config;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, nullptr);
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &old);
    if (write(1, "ready\n", 6) != 6)
        return 1;
    long done = 0;
    for (;;) {
        while (asked == done)
            sigsuspend(&old);
        step(++done);
        tell(argv[1], done);
    }
}
