/* memalign: every power-of-two alignment up to 64 KiB (and beyond) honoured, small alignments
 * still give 16-byte aligned blocks, usable and freeable, ENOMEM for impossible sizes. */
// build: -fno-builtin
#include "entry_common.h"

static const size_t sizes[] = {0, 1, 16, 100, 1000, 4096, 5000, 100000, 300000};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

int main(void)
{
    group("memalign-alignments");
    for (size_t align = 1; align <= ((size_t)1 << 20); align <<= 1) {
        void *keep[N_SIZES];
        for (size_t i = 0; i < N_SIZES; i++) {
            errno = 1234;
            keep[i] = memalign(align, sizes[i]);
            CHECK(errno == 1234, "memalign(%zu, %zu) changed errno to %d", align, sizes[i],
                  errno);
            CHECK(keep[i] != NULL, "memalign(%zu, %zu) returned NULL", align, sizes[i]);
            CHECK(is_aligned(keep[i], align < 16 ? 16 : align), "memalign(%zu, %zu) misaligned",
                  align, sizes[i]);
            if (keep[i])
                fill(keep[i], sizes[i], (unsigned)(align + i));
        }
        for (size_t i = 0; i < N_SIZES; i++) {
            if (keep[i])
                CHECK(verify(keep[i], sizes[i], (unsigned)(align + i)),
                      "memalign(%zu, %zu) contents changed", align, sizes[i]);
            free(keep[i]);
        }
    }
    end_group();

    /* Interleave aligned and ordinary blocks so a mix-up of their starts would show. */
    group("memalign-interleaved");
    enum { N = 600 };
    static void *b[N];
    for (int i = 0; i < N; i++) {
        size_t align = (size_t)32 << (i % 12); /* 32 .. 65536 */
        b[i] = (i % 3) ? memalign(align, (size_t)(i * 7 % 900)) : malloc((size_t)(i % 300));
        CHECK(b[i] != NULL, "allocation %d failed", i);
        if ((i % 3) && b[i])
            CHECK(is_aligned(b[i], align), "memalign(%zu) misaligned", align);
    }
    for (int i = 0; i < N; i += 2)
        free(b[i]);
    for (int i = 1; i < N; i += 2)
        free(b[i]);
    end_group();

    /* glibc rounds an alignment that is not a power of two up to the next one. */
    group("memalign-non-power-of-two");
    size_t odd[] = {24, 48, 96, 100, 3000};
    size_t next[] = {32, 64, 128, 128, 4096};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        void *p = memalign(odd[i], 10);
        CHECK(p != NULL, "memalign(%zu, 10) returned NULL", odd[i]);
        CHECK(is_aligned(p, next[i]), "memalign(%zu, 10) not %zu-aligned", odd[i], next[i]);
        free(p);
    }
    end_group();

    group("memalign-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = memalign(64, huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "memalign(64, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "memalign(64, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    return finish("entry_memalign");
}
