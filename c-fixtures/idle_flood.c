// A client that holds N idle connections to 127.0.0.1:PORT for as long as it runs: each one the
// server closes or answers (503, say) is opened again after a short pause, so the connections
// never run out however the server times them. It sends nothing. It prints "ready" once N
// connections have been opened, then runs until killed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int open_one(int port) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: idle_flood PORT N\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    struct pollfd *fds = calloc((size_t)n, sizeof *fds);
    if (!fds)
        return 1;
    for (int i = 0; i < n; i++) {
        fds[i].fd = open_one(port);
        fds[i].events = POLLIN;
    }
    printf("ready\n");
    fflush(stdout);
    struct timespec pause = {0, 20 * 1000 * 1000};
    for (;;) {
        poll(fds, (nfds_t)n, 200);
        int reopened = 0;
        for (int i = 0; i < n; i++) {
            char buf[512];
            if (fds[i].fd >= 0 && !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            // Whatever came (an answer, or the end of the connection) is read and the
            // connection opened anew.
            if (fds[i].fd >= 0) {
                while (recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
                    ;
                close(fds[i].fd);
            }
            fds[i].fd = open_one(port);
            fds[i].revents = 0;
            reopened++;
        }
        if (reopened)
            nanosleep(&pause, NULL);
    }
}
