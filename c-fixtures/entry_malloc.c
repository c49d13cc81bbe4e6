/* malloc: 16-byte alignment, usable contents, ENOMEM for impossible sizes, errno preserved. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("malloc-alignment-and-contents");
    void *blocks[N_ORDINARY];
    for (size_t i = 0; i < N_ORDINARY; i++) {
        size_t n = ordinary_sizes[i];
        blocks[i] = malloc(n);
        CHECK(blocks[i] != NULL, "malloc(%zu) returned NULL", n);
        CHECK(is_aligned(blocks[i], 16), "malloc(%zu) not 16-byte aligned", n);
        if (blocks[i])
            fill(blocks[i], n, (unsigned)i);
    }
    for (size_t i = 0; i < N_ORDINARY; i++) {
        if (blocks[i])
            CHECK(verify(blocks[i], ordinary_sizes[i], (unsigned)i),
                  "malloc(%zu) contents changed", ordinary_sizes[i]);
        free(blocks[i]);
    }
    end_group();

    group("malloc-zero-is-unique");
    void *a = malloc(0), *b = malloc(0);
    CHECK(a != NULL && b != NULL, "malloc(0) returned NULL");
    CHECK(a != b, "two malloc(0) calls returned the same pointer");
    free(a);
    free(b);
    end_group();

    group("malloc-distinct-live-blocks");
    enum { N = 2000 };
    static unsigned char *live[N];
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37 % 700);
        live[i] = malloc(n);
        CHECK(live[i] != NULL, "malloc(%zu) returned NULL", n);
        if (live[i])
            memset(live[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37 % 700);
        int ok = 1;
        for (size_t j = 0; live[i] && j < n; j++)
            ok &= live[i][j] == (unsigned char)(i & 0xff);
        CHECK(ok, "block %d of %zu bytes was overwritten by another block", i, n);
    }
    for (int i = 0; i < N; i += 2)
        free(live[i]);
    for (int i = 1; i < N; i += 2)
        free(live[i]);
    end_group();

    group("malloc-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = malloc(huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "malloc(%zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "malloc(%zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    group("malloc-errno-preserved");
    for (size_t i = 0; i < N_ORDINARY; i++) {
        errno = 1234;
        void *p = malloc(ordinary_sizes[i]);
        CHECK(errno == 1234, "malloc(%zu) changed errno to %d", ordinary_sizes[i], errno);
        errno = 1234;
        free(p);
        CHECK(errno == 1234, "free after malloc(%zu) changed errno to %d", ordinary_sizes[i],
              errno);
    }
    end_group();

    return finish("entry_malloc");
}
