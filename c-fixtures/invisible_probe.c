// Prints what a program sees of its own process, for a test to compare a bare run with a
// preloaded one: its open descriptors, the number its next open gets, every signal's
// disposition as sigaction reports it, its threads, its environment (less LD_PRELOAD and
// DMEM_OPTS, which differ by design) and errno across malloc and free.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static void list_dir(const char *what, const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return;
    printf("%s:", what);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            printf(" %s", e->d_name);
    printf("\n");
    closedir(d);
}

int main(void) {
    list_dir("descriptors", "/proc/self/fd");
    int fd = open("/dev/null", O_RDONLY);
    printf("next open: %d\n", fd);
    close(fd);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) != 0)
            continue;
        const char *kind = sa.sa_handler == SIG_DFL ? "default" : sa.sa_handler == SIG_IGN ? "ignored" : "a handler";
        printf("signal %d: %s, flags %#x, mask %#lx\n", sig, kind, (unsigned)sa.sa_flags,
               sa.sa_mask.__val[0]);
    }
    int threads = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));)
        threads += e->d_name[0] != '.';
    if (d)
        closedir(d);
    printf("threads: %d\n", threads);
    for (char **v = environ; *v; v++)
        if (strncmp(*v, "LD_PRELOAD=", 11) && strncmp(*v, "DMEM_OPTS=", 10))
            printf("env %s\n", *v);
    errno = 1234;
    void *volatile p = malloc(100);
    free(p);
    printf("errno after malloc and free: %d\n", errno);
    return 0;
}
