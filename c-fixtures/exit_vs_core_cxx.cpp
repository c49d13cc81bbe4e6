// build: -O2
/* The C++ side of tests/exit_vs_core.rs: leaks through operator new and new[] from a template's
 * member inlined into a function in a namespace, a constructor, and a plain function, so that
 * demangled names, inlined frames and the allocation function read from the call (new, new[])
 * must come out the same at exit and from the core. What is left at exit:
 * - 4 objects of Pool<Item>::Slot (48 bytes) made by an inlined member: definitely lost;
 * - one array of 10 longs from new[]: definitely lost;
 * - a Widget (32 bytes), lost, whose constructor allocated a 128-byte buffer: indirectly lost;
 * - a Widget held from a global, and its buffer: still reachable.
 */
#include <cstring>
#include <new>

namespace shop {

struct Item {
    long id;
    long price;
};

template <typename T> struct Pool {
    struct Slot {
        T value;
        Slot *next;
        long spare[3];
    };
    /* Inlined into its caller at -O2. */
    static inline __attribute__((always_inline)) Slot *make(long id)
    {
        Slot *s = new Slot;
        s->value.id = id;
        s->value.price = 3 * id;
        s->next = nullptr;
        return s;
    }
};

__attribute__((noinline)) void stock(int n)
{
    for (int i = 0; i < n; i++)
        __asm__ volatile("" : : "r"(Pool<Item>::make(i)) : "memory");
}

struct Widget {
    __attribute__((noinline)) explicit Widget(long tag) : tag(tag), buffer(new char[128])
    {
        std::memset(buffer, int(tag), 128);
    }
    long tag;
    char *buffer;
    long more[2];
};

} // namespace shop

shop::Widget *kept;

__attribute__((noinline)) static long *numbers()
{
    long *a = new long[10];
    for (int i = 0; i < 10; i++)
        a[i] = i;
    return a;
}

__attribute__((noinline)) static void scrub_stack()
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main()
{
    shop::stock(4);
    __asm__ volatile("" : : "r"(numbers()) : "memory");
    __asm__ volatile("" : : "r"(new shop::Widget(7)) : "memory");
    kept = new shop::Widget(9);
    scrub_stack();
    return 0;
}
