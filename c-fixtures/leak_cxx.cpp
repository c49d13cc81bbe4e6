// build: -O0
/* Ground truth for C++ types: 100,000 leaked objects of the polymorphic class A, whose `state`
 * member (offset 8, a u64) is 1 in 60,000 of them, 2 in 30,000 and 3 in 10,000; and, held by a
 * global array, 10 objects of class B and 5 of shop::Basket (derived from B).
 * `dmem types --leaks` must say A: 100000, and `dmem words --vtable A --offset 8 --type u64`
 * must give those three counts.
 */
#include <cstdint>
#include <cstdlib>

struct A {
    explicit A(unsigned long s) : state(s) {}
    virtual ~A() {}
    unsigned long state;
};

struct B {
    virtual ~B() {}
    long id = 7;
};

namespace shop {
struct Basket : B {
    long items[6] = {1, 2, 3, 4, 5, 6};
};
}  // namespace shop

B *kept[15];

__attribute__((noinline)) static A *make_a(unsigned long i)
{
    unsigned long r = i % 10;
    return new A(r < 6 ? 1 : r < 9 ? 2 : 3);
}

__attribute__((noinline)) static void leak_many_a()
{
    for (unsigned long i = 0; i < 100000; i++)
        make_a(i);
}

__attribute__((noinline)) static void keep_some()
{
    for (int i = 0; i < 10; i++)
        kept[i] = new B;
    for (int i = 10; i < 15; i++)
        kept[i] = new shop::Basket;
}

/* Overwrites the dead stack frames below main, where the builders left block addresses. */
__attribute__((noinline)) static void scrub_stack()
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main()
{
    leak_many_a();
    keep_some();
    scrub_stack();
    return 0;
}
