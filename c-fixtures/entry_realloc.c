/* realloc: NULL and 0 edge cases, contents kept across growth and shrinking, ENOMEM with the
 * old block left intact, errno preserved. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("realloc-null-is-malloc");
    errno = 1234;
    unsigned char *p = realloc(NULL, 100);
    CHECK(errno == 1234, "realloc(NULL, 100) changed errno to %d", errno);
    CHECK(p != NULL, "realloc(NULL, 100) returned NULL");
    CHECK(is_aligned(p, 16), "realloc(NULL, 100) not 16-byte aligned");
    if (p)
        fill(p, 100, 1);
    free(p);
    void *z = realloc(NULL, 0);
    CHECK(z != NULL, "realloc(NULL, 0) returned NULL");
    free(z);
    end_group();

    /* glibc: realloc(p, 0) frees p and returns NULL. */
    group("realloc-zero-frees");
    for (int i = 0; i < 100; i++) {
        void *q = malloc(64 + (size_t)i * 100);
        errno = 1234;
        void *r = realloc(q, 0);
        CHECK(r == NULL, "realloc(p, 0) returned a block");
        CHECK(errno == 1234, "realloc(p, 0) changed errno to %d", errno);
        free(r);
    }
    end_group();

    group("realloc-grow-keeps-contents");
    size_t n = 1;
    p = malloc(n);
    fill(p, n, 7);
    while (n < (size_t)8 << 20) {
        size_t m = n * 3 / 2 + 5;
        errno = 1234;
        unsigned char *q = realloc(p, m);
        CHECK(errno == 1234, "realloc(%zu -> %zu) changed errno to %d", n, m, errno);
        CHECK(q != NULL, "realloc(%zu -> %zu) returned NULL", n, m);
        if (!q)
            break;
        CHECK(is_aligned(q, 16), "realloc(%zu -> %zu) not 16-byte aligned", n, m);
        CHECK(verify(q, n, 7), "realloc(%zu -> %zu) lost contents", n, m);
        fill(q, m, 7);
        p = q;
        n = m;
    }
    end_group();

    group("realloc-shrink-keeps-contents");
    while (n > 1) {
        size_t m = n / 3 ? n / 3 : 1;
        unsigned char *q = realloc(p, m);
        CHECK(q != NULL, "realloc(%zu -> %zu) returned NULL", n, m);
        if (!q)
            break;
        CHECK(verify(q, m, 7), "realloc(%zu -> %zu) lost contents", n, m);
        p = q;
        n = m;
    }
    free(p);
    end_group();

    group("realloc-same-size-and-storm");
    unsigned char *blocks[64] = {0};
    size_t sizes[64] = {0};
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (seed >> 16) & 63;
        size_t m = (seed >> 4) % 3000;
        if ((seed & 7) == 0)
            m = sizes[k]; /* same size */
        if ((seed & 0xff) == 1)
            m = 200000 + m; /* past the mmap threshold */
        unsigned char *q = realloc(blocks[k], m ? m : 1);
        CHECK(q != NULL, "realloc storm returned NULL");
        if (!q)
            break;
        size_t keep = sizes[k] < m ? sizes[k] : m;
        CHECK(verify(q, keep, (unsigned)k), "realloc storm lost contents (%zu -> %zu)", sizes[k],
              m);
        fill(q, m ? m : 1, (unsigned)k);
        blocks[k] = q;
        sizes[k] = m ? m : 1;
    }
    for (int k = 0; k < 64; k++)
        free(blocks[k]);
    end_group();

    group("realloc-huge-enomem-keeps-block");
    p = malloc(1000);
    fill(p, 1000, 3);
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *q = realloc(p, huge_sizes[i]);
        int e = errno;
        CHECK(q == NULL, "realloc(p, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "realloc(p, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
        if (q)
            p = q;
        CHECK(verify(p, 1000, 3), "failed realloc(p, %zu) damaged the old block", huge_sizes[i]);
    }
    /* The old block is still a live, resizable block. */
    p = realloc(p, 5000);
    CHECK(p != NULL && verify(p, 1000, 3), "old block unusable after failed realloc");
    free(p);
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *q = realloc(NULL, huge_sizes[i]);
        int e = errno;
        CHECK(q == NULL, "realloc(NULL, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "realloc(NULL, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
    }
    end_group();

    group("realloc-of-calloc-and-memalign");
    unsigned char *c = calloc(10, 10);
    c = realloc(c, 1000);
    CHECK(c != NULL, "realloc of a calloc block returned NULL");
    int zero = 1;
    for (int i = 0; c && i < 100; i++)
        zero &= c[i] == 0;
    CHECK(zero, "realloc of a calloc block lost the zeroes");
    free(c);
    unsigned char *a = memalign(256, 300);
    fill(a, 300, 9);
    a = realloc(a, 100000);
    CHECK(a != NULL && verify(a, 300, 9), "realloc of a memalign block lost contents");
    a = realloc(a, 10);
    CHECK(a != NULL && verify(a, 10, 9), "shrinking a memalign block lost contents");
    free(a);
    end_group();

    return finish("entry_realloc");
}
