/* Shared checking helpers for the entry_* fixtures.
 *
 * Each fixture checks glibc's documented behaviour itself and prints one line per check group,
 * "ok NAME" or "FAIL NAME: why". Nothing printed depends on addresses, so the output of a bare
 * run and of a preloaded run can be compared byte for byte. The exit status is 0 only if every
 * check passed.
 */
#ifndef ENTRY_COMMON_H
#define ENTRY_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static int group_failed;
static const char *group_name;

static void group(const char *name)
{
    group_name = name;
    group_failed = 0;
}

static void end_group(void)
{
    if (!group_failed)
        printf("ok %s\n", group_name);
    fflush(stdout);
}

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("FAIL %s: line %d: ", group_name, __LINE__);                            \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            fflush(stdout);                                                                \
            group_failed = 1;                                                              \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

/* Sizes no allocator can satisfy, including the ones just below SIZE_MAX where adding a
 * header or rounding up for alignment would wrap around. */
static const size_t huge_sizes[] = {
    SIZE_MAX,           SIZE_MAX - 1,        SIZE_MAX - 15,       SIZE_MAX - 16,
    SIZE_MAX - 64,      SIZE_MAX - 111,      SIZE_MAX - 112,      SIZE_MAX - 113,
    SIZE_MAX - 128,     SIZE_MAX - 4095,     SIZE_MAX - 4096,     SIZE_MAX - 65536,
    SIZE_MAX / 2,       SIZE_MAX / 2 + 1,    (size_t)PTRDIFF_MAX, (size_t)1 << 62,
    (size_t)1 << 56,    (size_t)1 << 50,
};
#define N_HUGE (sizeof(huge_sizes) / sizeof(huge_sizes[0]))

/* Sizes around the usual size-class, page and mmap-threshold boundaries. */
static const size_t ordinary_sizes[] = {
    0,    1,    7,    8,    15,   16,    17,    24,    31,    32,     33,     48,
    63,   64,   100,  112,  127,  128,   255,   256,   511,   512,    1000,   1024,
    2047, 2048, 4000, 4095, 4096, 4097,  8191,  8192,  65535, 65536,  100000, 131071,
    131072, 131073, 262144, 1048576, 4194304,
};
#define N_ORDINARY (sizeof(ordinary_sizes) / sizeof(ordinary_sizes[0]))

static int is_aligned(const void *p, size_t align)
{
    return ((uintptr_t)p & (align - 1)) == 0;
}

/* Fills a block with a pattern derived from a seed, and checks it later. */
static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)(seed * 31u + i * 7u + (i >> 8));
}

static int verify(const void *p, size_t n, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)(seed * 31u + i * 7u + (i >> 8)))
            return 0;
    return 1;
}

static int finish(const char *fixture)
{
    if (failures)
        printf("%s: %d check(s) FAILED\n", fixture, failures);
    else
        printf("%s: all checks passed\n", fixture);
    fflush(stdout);
    return failures ? 1 : 0;
}

#endif
