// build: -O0
/* Roots beyond the exiting thread's own: a worker thread holds a block only in a local variable
 * of its stack, and the main thread holds another only in a thread-local variable. The worker
 * is blocked in read() when the main thread exits, so a core of the process (all threads) shows
 * both blocks in use. The addresses are also kept XORed in globals so a debugger can name them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define HIDE 0x5a5a5a5a5a5a5a5aUL

__thread void *mine;
uintptr_t on_worker_stack_x, in_tls_x;
static int ready[2], never[2];

static void *worker(void *arg)
{
    volatile uintptr_t keep = (uintptr_t)malloc(48);
    char c;
    (void)arg;
    on_worker_stack_x = keep ^ HIDE;
    if (write(ready[1], "r", 1) != 1)
        exit(1);
    for (;;)
        if (read(never[0], &c, 1) <= 0)
            pause();
    return NULL;
}

int main(void)
{
    pthread_t t;
    char c;
    if (pipe(ready) || pipe(never))
        return 1;
    mine = malloc(32);
    in_tls_x = (uintptr_t)mine ^ HIDE;
    if (pthread_create(&t, NULL, worker, NULL))
        return 1;
    if (read(ready[0], &c, 1) != 1)
        return 1;
    return 0;
}
