/* A shared library that allocates: in its constructor (so malloc may first be called from a
 * library constructor, before main), in its functions, and in its destructor. It is loaded
 * both with dlopen/dlclose repeatedly and as an ordinary link-time dependency. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *banner;
static void **table;
static size_t table_len;

__attribute__((constructor)) static void plugin_init(void)
{
    banner = strdup("dmemfix plugin loaded");
    table_len = 64;
    table = calloc(table_len, sizeof(*table));
    for (size_t i = 0; i < table_len; i++)
        table[i] = malloc(16 + i * 8);
}

__attribute__((destructor)) static void plugin_fini(void)
{
    for (size_t i = 0; i < table_len; i++)
        free(table[i]);
    free(table);
    free(banner);
    banner = NULL;
}

const char *plugin_banner(void)
{
    return banner;
}

/* A block for the caller to free. */
char *plugin_make(size_t n, int c)
{
    char *p = malloc(n + 1);
    if (p) {
        memset(p, c, n);
        p[n] = '\0';
    }
    return p;
}

/* Frees a block the caller allocated. Returns its length as a check. */
size_t plugin_take(char *p)
{
    size_t n = strlen(p);
    free(p);
    return n;
}

/* Allocation churn inside the library: realloc, calloc, aligned blocks. Returns a checksum. */
unsigned long plugin_churn(int rounds)
{
    unsigned long sum = 0;
    char *buf = NULL;
    for (int i = 0; i < rounds; i++) {
        buf = realloc(buf, 100 + (size_t)i * 50);
        memset(buf, 'a' + i % 26, 100 + (size_t)i * 50);
        sum += (unsigned char)buf[i];
        int *z = calloc(10, sizeof(int));
        sum += z[i % 10];
        free(z);
        void *a = memalign(512, 100);
        free(a);
    }
    free(buf);
    return sum;
}
