// build: -O0 -D_GLIBCXX_USE_CXX11_ABI=0
/* Leak classes through memcheck's four heuristics: every block here is held only by an interior
 * pointer from a global, and each kind of pointer is one a heuristic accepts, so valgrind calls
 * the blocks still reachable ("of which reachable via heuristic"), not possibly lost.
 *
 * - stdstring: 4 long strings of the old libstdc++ ABI (copy-on-write), whose only pointer is
 *   to their characters, 24 bytes into the block after length, capacity and reference count
 *   (the string objects themselves are 4 blocks more, held by their start);
 * - length64: 6 buffers whose first 8 bytes hold the length of the rest, handed out at +8 (as
 *   sqlite's allocator does);
 * - newarray: 3 arrays `new T[n]` of a T with a destructor, which store n first and are
 *   pointed to at +8;
 * - multipleinheritance: 5 objects of a class with two polymorphic bases, held through the
 *   second base.
 *
 * Besides, 2 buffers held at +40, which no heuristic accepts: possibly lost. The stacks are
 * scrubbed so no dead frame holds a start pointer.
 */
#include <cstdlib>
#include <cstring>
#include <string>

struct First {
    virtual ~First() {}
    long a = 1;
};

struct Second {
    virtual ~Second() {}
    long b = 2;
};

struct Both : First, Second {
    long c = 3;
};

struct Counted {
    ~Counted() { value = 0; }
    long value = 7;
};

std::string *strings[4];
char *length_prefixed[6];
Counted *arrays[3];
Second *second_bases[5];
char *middles[2];

__attribute__((noinline)) static void build()
{
    for (int i = 0; i < 4; i++)
        strings[i] = new std::string(100 + i, 'a' + i);
    for (int i = 0; i < 6; i++) {
        size_t len = 64 + 8 * i;
        char *p = static_cast<char *>(malloc(8 + len));
        if (!p)
            exit(1);
        *reinterpret_cast<size_t *>(p) = len;
        memset(p + 8, 'x', len);
        length_prefixed[i] = p + 8;
    }
    for (int i = 0; i < 3; i++)
        arrays[i] = new Counted[2 + i];
    for (int i = 0; i < 5; i++)
        second_bases[i] = new Both;
    for (int i = 0; i < 2; i++) {
        char *p = static_cast<char *>(malloc(200));
        if (!p)
            exit(1);
        memset(p, 0, 200);
        middles[i] = p + 40;
    }
}

__attribute__((noinline)) static void scrub_stack()
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main()
{
    build();
    scrub_stack();
    /* Read the globals back, so no store above is dead. */
    long sum = 0;
    for (auto *s : strings)
        sum += s->size();
    for (auto *p : length_prefixed)
        sum += p[0];
    for (auto *a : arrays)
        sum += a[0].value;
    for (auto *b : second_bases)
        sum += b->b;
    for (auto *m : middles)
        sum += m[0];
    return sum == 0;
}
