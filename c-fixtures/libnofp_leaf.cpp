// build: -O2 -fomit-frame-pointer
/* The leaf of the frame-pointer-less chain (seed 003's example): a function in a shared library
 * that allocates with new[], which goes through libstdc++'s operator new, itself built without
 * frame pointers on Debian. */
#include <cstddef>

extern "C" __attribute__((noinline)) int *
nofp_leaf(std::size_t n)
{
    int *p = new int[n];
    for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<int>(i);
    return p;
}
