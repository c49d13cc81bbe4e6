// A worker calls exit(3) while main waits in the call MODE names (poll, epoll, select, sleep,
// pause), which only a signal handler could end early. If it returns, main prints what it
// returned and exits 5. One 100-byte block is leaked before, so an exit report has something to
// say.
// Usage: invisible_wait MODE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

static void *volatile leaked;

static void *worker(void *arg) {
    usleep(200 * 1000);
    exit(3);
    return arg;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "poll";
    leaked = malloc(100);
    leaked = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    long r = -2;
    if (!strcmp(mode, "poll")) {
        r = poll(NULL, 0, -1);
    } else if (!strcmp(mode, "epoll")) {
        struct epoll_event ev;
        r = epoll_wait(epoll_create1(0), &ev, 1, -1);
    } else if (!strcmp(mode, "select")) {
        r = select(0, NULL, NULL, NULL, NULL);
    } else if (!strcmp(mode, "sleep")) {
        r = sleep(100);
    } else if (!strcmp(mode, "pause")) {
        r = pause();
    }
    printf("main's %s returned %ld (errno %d)\n", mode, r, errno);
    return 5;
}
