// build: -O2 -fomit-frame-pointer -lnofp_leaf
/* main -> caller -> nofp_leaf (in libnofp_leaf.so) -> operator new[] -> malloc, everything built
 * without frame pointers. The block of 1234 ints is leaked, so with abort-shutdown the core
 * holds it and its stack. */
#include <cstddef>
#include <cstdio>

extern "C" int *nofp_leaf(std::size_t n);

int *kept;

__attribute__((noinline)) int
caller()
{
    kept = nofp_leaf(1234);
    return kept[1];
}

int
main()
{
    int r = caller();
    std::printf("nofp_chain: %d\n", r);
    return 0;
}
