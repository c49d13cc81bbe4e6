/* valloc: page-aligned blocks of the requested size, ENOMEM for impossible sizes. */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    group("valloc-page-aligned");
    size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 10000, 200000, 1 << 20};
    void *keep[sizeof(sizes) / sizeof(sizes[0])];
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        errno = 1234;
        keep[i] = valloc(sizes[i]);
        CHECK(errno == 1234, "valloc(%zu) changed errno to %d", sizes[i], errno);
        CHECK(keep[i] != NULL, "valloc(%zu) returned NULL", sizes[i]);
        CHECK(is_aligned(keep[i], page), "valloc(%zu) not page aligned", sizes[i]);
        if (keep[i])
            fill(keep[i], sizes[i], (unsigned)i);
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (keep[i])
            CHECK(verify(keep[i], sizes[i], (unsigned)i), "valloc(%zu) contents changed",
                  sizes[i]);
        free(keep[i]);
    }
    end_group();

    group("valloc-huge-enomem");
    for (size_t i = 0; i < N_HUGE; i++) {
        errno = 0;
        void *p = valloc(huge_sizes[i]);
        int e = errno;
        CHECK(p == NULL, "valloc(%zu) succeeded", huge_sizes[i]);
        CHECK(e == ENOMEM, "valloc(%zu): errno %d, want ENOMEM", huge_sizes[i], e);
        free(p);
    }
    end_group();

    return finish("entry_valloc");
}
