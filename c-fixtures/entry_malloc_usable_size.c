/* malloc_usable_size: 0 for NULL, at least the requested size for every kind of block, and all
 * of it writable without harming neighbouring blocks (a size that counted an interposer's header
 * would let the writes below run into the next block). */
// build: -fno-builtin
#include "entry_common.h"

enum { N = 400 };
static unsigned char *b[N];
static size_t usable[N];

static void *alloc_kind(int i, size_t n)
{
    void *p = NULL;
    switch (i % 6) {
    case 0: return malloc(n);
    case 1: return calloc(1, n);
    case 2: return memalign((size_t)32 << (i % 8), n);
    case 3: return posix_memalign(&p, 64, n) == 0 ? p : NULL;
    case 4: return aligned_alloc(256, n);
    default: return realloc(malloc(n / 2 + 1), n);
    }
}

int main(void)
{
    group("malloc_usable_size-null");
    errno = 1234;
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) != 0");
    CHECK(errno == 1234, "malloc_usable_size(NULL) changed errno to %d", errno);
    end_group();

    group("malloc_usable_size-at-least-requested");
    for (size_t i = 0; i < N_ORDINARY; i++) {
        void *p = malloc(ordinary_sizes[i]);
        errno = 1234;
        size_t u = malloc_usable_size(p);
        CHECK(errno == 1234, "malloc_usable_size changed errno to %d", errno);
        CHECK(u >= ordinary_sizes[i], "malloc_usable_size %zu < requested %zu", u,
              ordinary_sizes[i]);
        free(p);
    }
    end_group();

    group("malloc_usable_size-writable");
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)(i * 53 % 3000) + (i % 50 == 0 ? 150000 : 0);
        b[i] = alloc_kind(i, n);
        CHECK(b[i] != NULL, "allocation %d (%zu bytes) failed", i, n);
        usable[i] = malloc_usable_size(b[i]);
        CHECK(usable[i] >= n, "kind %d: usable %zu < requested %zu", i % 6, usable[i], n);
        if (b[i])
            fill(b[i], usable[i], (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        if (b[i])
            CHECK(verify(b[i], usable[i], (unsigned)i),
                  "block %d: writing its usable size damaged another block", i);
        CHECK(malloc_usable_size(b[i]) == usable[i], "usable size of block %d changed", i);
    }
    /* Growing within the usable size keeps everything written. */
    for (int i = 0; i < N; i++) {
        if (!b[i])
            continue;
        unsigned char *q = realloc(b[i], usable[i] + 1);
        CHECK(q != NULL && verify(q, usable[i], (unsigned)i), "realloc past usable size lost data");
        if (q)
            b[i] = q;
        free(b[i]);
    }
    end_group();

    return finish("entry_malloc_usable_size");
}
