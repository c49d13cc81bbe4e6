/* aligned_alloc: power-of-two alignments up to 64 KiB and beyond honoured, sizes that are not a
 * multiple of the alignment accepted (as glibc does), ENOMEM for impossible sizes. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("aligned_alloc-alignments");
    size_t sizes[] = {1, 64, 100, 4096, 5000, 70000, 300000};
    for (size_t align = 1; align <= ((size_t)1 << 18); align <<= 1) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            errno = 1234;
            void *p = aligned_alloc(align, sizes[i]);
            CHECK(errno == 1234, "aligned_alloc(%zu, %zu) changed errno to %d", align, sizes[i],
                  errno);
            CHECK(p != NULL, "aligned_alloc(%zu, %zu) returned NULL", align, sizes[i]);
            CHECK(is_aligned(p, align < 16 ? 16 : align), "aligned_alloc(%zu, %zu) misaligned",
                  align, sizes[i]);
            if (p) {
                fill(p, sizes[i], (unsigned)i);
                CHECK(verify(p, sizes[i], (unsigned)i), "aligned_alloc block not usable");
            }
            free(p);
        }
    }
    end_group();

    group("aligned_alloc-many-live");
    enum { N = 500 };
    static void *b[N];
    for (int i = 0; i < N; i++) {
        size_t align = (size_t)32 << (i % 12);
        b[i] = aligned_alloc(align, (size_t)(1 + i * 13 % 2000));
        CHECK(b[i] != NULL && is_aligned(b[i], align), "aligned_alloc(%zu) failed", align);
        if (b[i])
            fill(b[i], (size_t)(1 + i * 13 % 2000), (unsigned)i);
    }
    for (int i = N - 1; i >= 0; i--) {
        if (b[i])
            CHECK(verify(b[i], (size_t)(1 + i * 13 % 2000), (unsigned)i),
                  "aligned block %d overwritten", i);
        free(b[i]);
    }
    end_group();

    group("aligned_alloc-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = aligned_alloc(4096, huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "aligned_alloc(4096, %zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "aligned_alloc(4096, %zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    return finish("entry_aligned_alloc");
}
