/* posix_memalign: EINVAL for an alignment that is not a power of two or not a multiple of
 * sizeof(void *), without touching errno; alignments 8 .. 64 KiB honoured; ENOMEM returned for
 * impossible sizes, with errno ENOMEM as glibc leaves it. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("posix_memalign-einval");
    size_t bad[] = {0, 1, 2, 4, 12, 24, 48, 100, 3000, 65535, 65537, SIZE_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        void *p = (void *)&bad; /* not NULL, to see it left alone */
        errno = 1234;
        int r = posix_memalign(&p, bad[i], 64);
        CHECK(r == EINVAL, "posix_memalign(align %zu) returned %d, want EINVAL", bad[i], r);
        CHECK(errno == 1234, "posix_memalign(align %zu) changed errno to %d", bad[i], errno);
        CHECK(p == (void *)&bad, "posix_memalign(align %zu) wrote the result on failure", bad[i]);
    }
    end_group();

    group("posix_memalign-alignments");
    size_t sizes[] = {0, 1, 24, 100, 4096, 10000, 200000};
    for (size_t align = sizeof(void *); align <= 65536; align <<= 1) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            void *p = NULL;
            errno = 1234;
            int r = posix_memalign(&p, align, sizes[i]);
            CHECK(errno == 1234, "posix_memalign(%zu, %zu) changed errno to %d", align, sizes[i],
                  errno);
            CHECK(r == 0, "posix_memalign(%zu, %zu) returned %d", align, sizes[i], r);
            CHECK(p != NULL, "posix_memalign(%zu, %zu) gave NULL", align, sizes[i]);
            CHECK(is_aligned(p, align < 16 ? 16 : align), "posix_memalign(%zu, %zu) misaligned",
                  align, sizes[i]);
            if (p) {
                fill(p, sizes[i], (unsigned)align);
                CHECK(malloc_usable_size(p) >= sizes[i], "usable size below request");
                p = realloc(p, sizes[i] + 100);
                CHECK(p != NULL && verify(p, sizes[i], (unsigned)align),
                      "realloc of posix_memalign(%zu, %zu) lost contents", align, sizes[i]);
            }
            free(p);
        }
    }
    end_group();

    group("posix_memalign-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        void *p = NULL;
        errno = 1234;
        int r = posix_memalign(&p, 64, huge_sizes[i]);
        CHECK(r == ENOMEM, "posix_memalign(64, %zu) returned %d, want ENOMEM", huge_sizes[i], r);
        /* glibc's malloc underneath sets errno too. */
        CHECK(errno == ENOMEM, "posix_memalign(64, %zu) left errno %d, want ENOMEM", huge_sizes[i],
              errno);
        if (r == 0)
            free(p);
    }
    end_group();

    return finish("entry_posix_memalign");
}
