// build: -O2
/* A backend allocator for the tests whose `free` can be made to stop for good on one thread, as
 * a free that waits on the backend's lock or the kernel would: libdmem, preloaded in front of
 * it, calls it for blocks other threads handed back right after linking a new block, so a
 * thread stopped there holds that new block by libdmem's header alone. Everything else is
 * glibc's, by its __libc_ names.
 *
 * slow_free_arm(tid): the next free on thread `tid` waits forever (in pause, so a signal's
 * handler still runs). slow_free_waiting(): whether that free has begun waiting.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static volatile pid_t armed;
static volatile int waiting;

void slow_free_arm(pid_t tid) { armed = tid; }
int slow_free_waiting(void) { return waiting; }

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }

void free(void *p)
{
    if (armed && armed == gettid()) {
        waiting = 1;
        for (;;)
            pause();
    }
    __libc_free(p);
}
