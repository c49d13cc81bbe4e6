// build: -O2 -fomit-frame-pointer -lnofp_leaf
/* A frame that does have a frame pointer among frames that do not: `realigned` aligns a local to
 * 64 bytes, for which GCC keeps %rbp as a frame pointer even under -fomit-frame-pointer, so its
 * CFA is found from %rbp while its neighbours' are found from %rsp.
 * main -> realigned -> nofp_leaf (libnofp_leaf.so) -> operator new[], three times from the same
 * place, leaking three blocks of 777 ints: the second and third walks can reuse the first. */
#include <stddef.h>
#include <stdio.h>

int *nofp_leaf(size_t n);

int *kept[3];

__attribute__((noinline)) int
realigned(int i)
{
    _Alignas(64) volatile char buf[64];
    buf[0] = (char)i;
    kept[i] = nofp_leaf(777);
    return kept[i][1] + buf[0];
}

int
main(void)
{
    int sum = 0;
    for (int i = 0; i < 3; i++)
        sum += realigned(i);
    printf("nofp_realign: %d\n", sum);
    return 0;
}
