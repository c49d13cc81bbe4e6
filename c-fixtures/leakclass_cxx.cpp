// build: -O0
/* Leak classes, C++: a std::vector<Base*> reached from a global holds 20 polymorphic objects
 * (single inheritance, so each pointer is the object's start): 22 blocks still reachable (the
 * vector, its buffer and the objects). Another such vector is dropped with its buffer and 30
 * objects: 1 definitely lost (the vector), 31 indirectly lost. Both vectors live on the heap, so
 * no static destructor frees a buffer at exit, and both buffers are reserved up front so no
 * block is reallocated on the way.
 */
#include <vector>

struct Base {
    virtual ~Base() {}
    virtual long weight() const { return 1; }
    long id = 0;
};

struct Derived : Base {
    long weight() const override { return extra[0]; }
    long extra[4] = {1, 2, 3, 4};
};

std::vector<Base *> *held;

__attribute__((noinline)) static void fill(std::vector<Base *> &v, int n)
{
    v.reserve(n);
    for (int i = 0; i < n; i++)
        v.push_back(i % 2 ? static_cast<Base *>(new Derived) : new Base);
}

__attribute__((noinline)) static std::vector<Base *> *make_vector(int n)
{
    auto *v = new std::vector<Base *>;
    fill(*v, n);
    return v;
}

__attribute__((noinline)) static void scrub_stack()
{
    volatile char area[1 << 16];
    for (unsigned i = 0; i < sizeof area; i++)
        area[i] = 0;
}

int main()
{
    held = make_vector(20);
    make_vector(30);
    scrub_stack();
    return 0;
}
