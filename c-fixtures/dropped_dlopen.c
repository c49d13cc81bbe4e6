/* A process of one user with a file mapped that this user may not read: started as root, it
 * dlopens LIBRARY (a path that may be a symlink), then takes user UID's ids in full (real,
 * effective, saved; groups cleared), makes itself dumpable again, as a service does that a
 * privileged parent hands files to, and holds COUNT blocks of SIZE bytes from the library's
 * `hoard`.
 *
 *   dropped_dlopen LIBRARY UID COUNT SIZE
 *
 * Prints "ready" once it holds them, then sleeps until killed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static void *volatile held[4096];

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: dropped_dlopen LIBRARY UID COUNT SIZE\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        return 1;
    }
    void *(*hoard)(size_t) = (void *(*)(size_t))dlsym(h, "hoard");
    if (!hoard) {
        printf("no hoard in %s\n", argv[1]);
        return 1;
    }
    uid_t uid = (uid_t)atol(argv[2]);
    if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) {
        printf("cannot become user %u\n", (unsigned)uid);
        return 1;
    }
    /* Changing ids made it non-dumpable; a service that wants to be debugged says it is. */
    prctl(PR_SET_DUMPABLE, 1);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    long count = atol(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    if (count < 0 || count > 4096)
        return 2;
    for (long i = 0; i < count; i++)
        held[i] = hoard(size);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
