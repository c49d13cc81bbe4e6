/* reallocarray: like realloc(p, n * m), but n * m overflowing fails with ENOMEM and leaves the
 * old block intact. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("reallocarray-null");
    errno = 1234;
    unsigned char *p = reallocarray(NULL, 10, 20);
    CHECK(errno == 1234, "reallocarray(NULL, 10, 20) changed errno to %d", errno);
    CHECK(p != NULL && is_aligned(p, 16), "reallocarray(NULL, 10, 20) failed");
    if (p)
        fill(p, 200, 5);
    end_group();

    group("reallocarray-grow-shrink");
    size_t n = 200;
    for (size_t m = 2; m < 100000; m = m * 2 + 1) {
        errno = 1234;
        unsigned char *q = reallocarray(p, m, 16);
        CHECK(errno == 1234, "reallocarray(p, %zu, 16) changed errno to %d", m, errno);
        CHECK(q != NULL, "reallocarray(p, %zu, 16) returned NULL", m);
        if (!q)
            break;
        size_t keep = n < m * 16 ? n : m * 16;
        CHECK(verify(q, keep, 5), "reallocarray(p, %zu, 16) lost contents", m);
        fill(q, m * 16, 5);
        p = q;
        n = m * 16;
    }
    p = reallocarray(p, 3, 7);
    CHECK(p != NULL && verify(p, 21, 5), "shrinking reallocarray lost contents");
    end_group();

    group("reallocarray-overflow-keeps-block");
    struct { size_t n, m; } bad[] = {
        {SIZE_MAX, 2}, {2, SIZE_MAX}, {SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 32, (size_t)1 << 32},
        {SIZE_MAX / 16 + 1, 16}, {SIZE_MAX, SIZE_MAX},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        void *q = reallocarray(p, bad[i].n, bad[i].m);
        int e = errno;
        CHECK(q == NULL, "reallocarray(p, %zu, %zu) succeeded", bad[i].n, bad[i].m);
        CHECK(e == ENOMEM, "reallocarray(p, %zu, %zu): errno %d, want ENOMEM", bad[i].n, bad[i].m,
              e);
        if (q)
            p = q;
        CHECK(verify(p, 21, 5), "failed reallocarray(p, %zu, %zu) damaged the block", bad[i].n,
              bad[i].m);
    }
    /* Too big without overflowing: also ENOMEM, block intact. */
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *q = reallocarray(p, 1, huge_sizes[i]);
        int e = errno;
        CHECK(q == NULL, "reallocarray(p, 1, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "reallocarray(p, 1, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
        if (q)
            p = q;
        CHECK(verify(p, 21, 5), "failed reallocarray(p, 1, %zu) damaged the block",
              huge_sizes[i]);
    }
    p = reallocarray(p, 100, 100);
    CHECK(p != NULL && verify(p, 21, 5), "block unusable after failed reallocarray");
    free(p);
    errno = 0;
    volatile size_t big = SIZE_MAX;
    void *q = reallocarray(NULL, big, 3);
    CHECK(q == NULL && errno == ENOMEM, "reallocarray(NULL, SIZE_MAX, 3) did not fail with ENOMEM");
    end_group();

    return finish("entry_reallocarray");
}
