/* free: NULL is a no-op, blocks from every entry point go back through free, in any order,
 * errno preserved (including for large blocks that are unmapped). */
// build: -fno-builtin
#include "entry_common.h"

int main(void)
{
    group("free-null");
    errno = 1234;
    free(NULL);
    CHECK(errno == 1234, "free(NULL) changed errno to %d", errno);
    end_group();

    group("free-every-kind");
    void *p[12];
    void *pm = NULL;
    p[0] = malloc(10);
    p[1] = calloc(3, 30);
    p[2] = realloc(NULL, 50);
    p[3] = memalign(64, 70);
    p[4] = aligned_alloc(128, 256);
    p[5] = valloc(100);
    p[6] = pvalloc(100);
    p[7] = reallocarray(NULL, 10, 10);
    p[8] = malloc(1 << 20);
    p[9] = memalign(4096, 1 << 20);
    p[10] = calloc(1, 300000);
    CHECK(posix_memalign(&pm, 32, 40) == 0, "posix_memalign failed");
    p[11] = pm;
    for (int i = 0; i < 12; i++) {
        CHECK(p[i] != NULL, "allocation %d failed", i);
        errno = 1234;
        free(p[i]);
        CHECK(errno == 1234, "free of allocation %d changed errno to %d", i, errno);
    }
    end_group();

    group("free-orders");
    enum { N = 3000 };
    static void *b[N];
    for (int order = 0; order < 3; order++) {
        for (int i = 0; i < N; i++)
            b[i] = malloc((size_t)(i % 97) * 13 + (i % 500 == 0 ? 200000 : 0));
        for (int i = 0; i < N; i++) {
            int k = order == 0 ? i : order == 1 ? N - 1 - i : (int)((i * 1009L) % N);
            errno = 1234;
            free(b[k]);
            CHECK(errno == 1234, "free changed errno to %d", errno);
        }
    }
    end_group();

    return finish("entry_free");
}
