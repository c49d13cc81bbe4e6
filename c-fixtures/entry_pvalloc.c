/* pvalloc: page-aligned blocks whose size is rounded up to whole pages (so the whole last page
 * is the caller's to write), ENOMEM for impossible sizes, including those whose rounding wraps. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    group("pvalloc-whole-pages");
    size_t sizes[] = {1, 100, 4095, 4096, 4097, 10000, 200000};
    void *keep[sizeof(sizes) / sizeof(sizes[0])];
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t rounded = (sizes[i] + page - 1) & ~(page - 1);
        errno = 1234;
        keep[i] = pvalloc(sizes[i]);
        CHECK(errno == 1234, "pvalloc(%zu) changed errno to %d", sizes[i], errno);
        CHECK(keep[i] != NULL, "pvalloc(%zu) returned NULL", sizes[i]);
        CHECK(is_aligned(keep[i], page), "pvalloc(%zu) not page aligned", sizes[i]);
        if (keep[i]) {
            CHECK(malloc_usable_size(keep[i]) >= rounded, "pvalloc(%zu) usable size below %zu",
                  sizes[i], rounded);
            fill(keep[i], rounded, (unsigned)i);
        }
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t rounded = (sizes[i] + page - 1) & ~(page - 1);
        if (keep[i])
            CHECK(verify(keep[i], rounded, (unsigned)i), "pvalloc(%zu) contents changed",
                  sizes[i]);
        free(keep[i]);
    }
    end_group();

    group("pvalloc-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = pvalloc(huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "pvalloc(%zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "pvalloc(%zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    return finish("entry_pvalloc");
}
