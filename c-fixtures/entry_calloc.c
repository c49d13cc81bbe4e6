/* calloc: zeroed memory (also when the memory is reused), overflow of n * size, ENOMEM. */
// build: -fno-builtin
#include "entry_common.h"

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int main(void)
{
    group("calloc-zeroed");
    for (size_t i = 0; i < N_ORDINARY; i++) {
        size_t n = ordinary_sizes[i];
        unsigned char *p = calloc(1, n);
        CHECK(p != NULL, "calloc(1, %zu) returned NULL", n);
        CHECK(is_aligned(p, 16), "calloc(1, %zu) not 16-byte aligned", n);
        if (p)
            CHECK(all_zero(p, n), "calloc(1, %zu) not zeroed", n);
        free(p);
    }
    end_group();

    /* Dirty a lot of memory and free it, so calloc has to clear reused blocks. */
    group("calloc-zeroed-after-reuse");
    for (int round = 0; round < 20; round++) {
        void *dirty[64];
        for (int i = 0; i < 64; i++) {
            size_t n = 16 + (size_t)i * 48 + (size_t)round * 8;
            dirty[i] = malloc(n);
            if (dirty[i])
                memset(dirty[i], 0xa5, n);
        }
        for (int i = 0; i < 64; i++)
            free(dirty[i]);
        for (int i = 0; i < 64; i++) {
            size_t n = 16 + (size_t)i * 48 + (size_t)round * 8;
            unsigned char *p = calloc(n / 8, 8);
            CHECK(p != NULL, "calloc(%zu, 8) returned NULL", n / 8);
            if (p)
                CHECK(all_zero(p, n / 8 * 8), "calloc(%zu, 8) reused dirty memory", n / 8);
            dirty[i] = p;
        }
        for (int i = 0; i < 64; i++)
            free(dirty[i]);
    }
    end_group();

    group("calloc-shapes");
    struct { size_t n, m; } shapes[] = {
        {0, 0}, {0, 16}, {16, 0}, {1, 1}, {3, 5}, {100, 7}, {7, 100}, {1000, 1000}, {65536, 2},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        errno = 1234;
        unsigned char *p = calloc(shapes[i].n, shapes[i].m);
        CHECK(errno == 1234, "calloc(%zu, %zu) changed errno to %d", shapes[i].n, shapes[i].m,
              errno);
        CHECK(p != NULL, "calloc(%zu, %zu) returned NULL", shapes[i].n, shapes[i].m);
        if (p)
            CHECK(all_zero(p, shapes[i].n * shapes[i].m), "calloc(%zu, %zu) not zeroed",
                  shapes[i].n, shapes[i].m);
        free(p);
    }
    end_group();

    group("calloc-overflow-enomem");
    struct { size_t n, m; } bad[] = {
        {SIZE_MAX, 2}, {2, SIZE_MAX}, {SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 32, (size_t)1 << 32},
        {((size_t)1 << 32) + 1, ((size_t)1 << 32) - 1}, {SIZE_MAX / 16 + 1, 16},
        {SIZE_MAX, SIZE_MAX}, {(size_t)1 << 40, (size_t)1 << 30},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        void *p = calloc(bad[i].n, bad[i].m);
        int e = errno;
        CHECK(p == NULL, "calloc(%zu, %zu) succeeded", bad[i].n, bad[i].m);
        CHECK(e == ENOMEM, "calloc(%zu, %zu): errno %d, want ENOMEM", bad[i].n, bad[i].m, e);
        free(p);
    }
    end_group();

    group("calloc-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = calloc(1, huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "calloc(1, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "calloc(1, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    return finish("entry_calloc");
}
