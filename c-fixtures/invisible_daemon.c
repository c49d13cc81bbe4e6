// Starts a process in the background the way daemons do, prints "started" and returns. The
// background process writes its pid to PIDFILE once it has let go of its caller's descriptors,
// then waits (at most 120 s) for the file RELEASE to exist. MODE: daemon (fork, then daemon(0,
// 0)), setsid (fork, setsid, dup2 /dev/null onto 0, 1 and 2), close (fork, close 0, 1 and 2 and
// open /dev/null three times), atexit (as daemon, from an exit handler, while the process exits),
// fclose-daemon and fclose-setsid (fclose(stderr) first, as a program on its way out does, then
// as daemon or setsid).
// Usage: invisible_daemon MODE PIDFILE RELEASE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void background(const char *pidfile, const char *release) {
    FILE *f = fopen(pidfile, "w");
    if (!f)
        _exit(1);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    for (int i = 0; i < 1200 && access(release, F_OK) != 0; i++)
        usleep(100 * 1000);
    exit(0);
}

static char **args;

static void start_from_exit(void) {
    pid_t pid = fork();
    if (pid == 0) {
        if (daemon(0, 0) != 0)
            _exit(1);
        background(args[2], args[3]);
    }
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "atexit")) {
        args = argv;
        atexit(start_from_exit);
        printf("started\n");
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        if (!strncmp(mode, "fclose-", 7)) {
            fclose(stderr);
            mode += 7;
        }
        if (!strcmp(mode, "daemon")) {
            if (daemon(0, 0) != 0)
                _exit(1);
        } else if (!strcmp(mode, "setsid")) {
            int null = open("/dev/null", O_RDWR);
            if (setsid() < 0 || null < 0)
                _exit(1);
            for (int fd = 0; fd < 3; fd++)
                dup2(null, fd);
            close(null);
        } else {
            for (int fd = 0; fd < 3; fd++)
                close(fd);
            for (int fd = 0; fd < 3; fd++)
                if (open("/dev/null", O_RDWR) != fd)
                    _exit(1);
        }
        background(argv[2], argv[3]);
    }
    // daemon's first child returns as soon as the daemon is forked.
    if (strstr(mode, "daemon"))
        waitpid(pid, NULL, 0);
    printf("started\n");
    return 0;
}
