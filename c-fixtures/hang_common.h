/* Helpers shared by the hang_* fixtures and libhang_ctor. */
#ifndef HANG_COMMON_H
#define HANG_COMMON_H

#define _GNU_SOURCE
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

/* Whether pthread_getattr_np on the calling thread describes a stack holding `probe` (the
 * address of one of the caller's locals); the stack's size goes to `size` if it is not NULL. */
static inline int own_stack_holds(const void *probe, size_t *size)
{
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return 0;
    void *addr = NULL;
    size_t len = 0;
    int ok = pthread_attr_getstack(&attr, &addr, &len) == 0 && (uintptr_t)probe >= (uintptr_t)addr &&
             (uintptr_t)probe < (uintptr_t)addr + len;
    pthread_attr_destroy(&attr);
    if (size)
        *size = len;
    return ok;
}

/* The path of `name` in this program's directory, where the build puts the fixture libraries;
 * 0 when /proc/self/exe cannot be read. */
static inline int next_to_program(const char *name, char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0)
        return 0;
    exe[n] = '\0';
    snprintf(out, len, "%s/%s", dirname(exe), name);
    return 1;
}

#endif
