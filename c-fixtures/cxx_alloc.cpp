// C++ allocation: new/delete, new[]/delete[], sized and nothrow forms, over-aligned types
// (C++17 aligned new), the new-handler and std::bad_alloc for impossible sizes, and
// string/vector/map churn across threads. Prints checksums and counts only.
// build: -std=c++17
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

static int failures;

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            std::printf("FAIL %s (line %d)\n", what, __LINE__);                                \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

static bool aligned(const void *p, std::size_t a)
{
    return (reinterpret_cast<std::uintptr_t>(p) & (a - 1)) == 0;
}

struct alignas(64) Line {
    char bytes[64];
};
struct alignas(4096) Page {
    char bytes[4096];
};
struct alignas(32768) Big {
    char bytes[100];
};

struct Node {
    virtual ~Node() = default;
    virtual long value() const { return 1; }
};
struct Leaf : Node {
    std::string name;
    explicit Leaf(int i) : name("leaf" + std::to_string(i)) {}
    long value() const override { return static_cast<long>(name.size()); }
};

static void plain_new_delete()
{
    for (int i = 0; i < 1000; i++) {
        int *p = new int(i);
        CHECK(*p == i && aligned(p, 16), "new int");
        delete p;
        char *a = new char[static_cast<std::size_t>(i) + 1];
        std::memset(a, 'x', static_cast<std::size_t>(i) + 1);
        CHECK(aligned(a, 16), "new char[]");
        delete[] a;
        Node *n = (i % 2) ? static_cast<Node *>(new Leaf(i)) : new Node;
        CHECK(n->value() >= 1, "virtual object");
        delete n;
        std::string *s = new (std::nothrow) std::string(static_cast<std::size_t>(i), 's');
        CHECK(s && s->size() == static_cast<std::size_t>(i), "nothrow new");
        delete s;
    }
    std::printf("new/delete: done\n");
}

static void aligned_new()
{
    for (int i = 0; i < 200; i++) {
        Line *l = new Line;
        Page *p = new Page;
        Big *b = new Big;
        Line *la = new Line[static_cast<std::size_t>(i) + 1];
        Page *pa = new Page[static_cast<std::size_t>(i % 4) + 1];
        Line *ln = new (std::nothrow) Line;
        CHECK(aligned(l, 64), "alignas(64) new");
        CHECK(aligned(p, 4096), "alignas(4096) new");
        CHECK(aligned(b, 32768), "alignas(32768) new");
        CHECK(aligned(la, 64), "alignas(64) new[]");
        CHECK(aligned(pa, 4096), "alignas(4096) new[]");
        CHECK(ln && aligned(ln, 64), "alignas(64) nothrow new");
        std::memset(p->bytes, 1, sizeof(p->bytes));
        std::memset(la, 2, sizeof(Line) * (static_cast<std::size_t>(i) + 1));
        delete l;
        delete p;
        delete b;
        delete[] la;
        delete[] pa;
        delete ln;
        void *raw = ::operator new(1000, std::align_val_t(256));
        CHECK(aligned(raw, 256), "operator new(size, align_val_t)");
        ::operator delete(raw, 1000, std::align_val_t(256));
    }
    std::vector<Page> pages(10);
    CHECK(aligned(pages.data(), 4096), "vector of over-aligned type");
    std::printf("aligned new: done\n");
}

static int handler_calls;

// A new-handler that gives up on its second call, as one that found nothing more to release.
static void give_up_on_second()
{
    if (++handler_calls == 2)
        std::set_new_handler(nullptr);
}

static void bad_alloc()
{
    int thrown = 0;
    // A failed new asks the handler, tries again, and throws once there is no handler.
    static volatile std::size_t impossible = SIZE_MAX / 2;
    std::set_new_handler(give_up_on_second);
    try {
        char *p = new char[impossible];
        std::printf("FAIL new of an impossible size returned %p\n", static_cast<void *>(p));
        failures++;
    } catch (const std::bad_alloc &) {
        CHECK(handler_calls == 2, "new-handler asked until it gave up");
    }
    // The nothrow forms ask the handler too, and return null when it gives up.
    handler_calls = 0;
    std::set_new_handler(give_up_on_second);
    void *q = ::operator new(impossible, std::nothrow);
    CHECK(q == nullptr && handler_calls == 2, "nothrow new asks the new-handler until it gives up");
    std::printf("new-handler asked %d times\n", handler_calls);
    for (std::size_t n : {SIZE_MAX / 2, SIZE_MAX - 64, std::size_t(1) << 60}) {
        try {
            char *p = new char[n];
            delete[] p;
        } catch (const std::bad_alloc &) {
            thrown++;
        }
        char *q = new (std::nothrow) char[n];
        CHECK(q == nullptr, "nothrow new of an impossible size");
        delete[] q;
    }
    std::printf("bad_alloc thrown %d times\n", thrown);
}

static unsigned long churn(int seed)
{
    unsigned long sum = 0;
    std::map<std::string, std::vector<int>> m;
    std::unordered_map<int, std::string> u;
    for (int i = 0; i < 3000; i++) {
        std::string key = "key" + std::to_string((i * 7919 + seed) % 500);
        auto &v = m[key];
        v.push_back(i);
        if (v.size() > 20)
            v.erase(v.begin(), v.begin() + 10);
        u[i % 300] = key + std::string(static_cast<std::size_t>(i % 50), '.');
        if (i % 100 == 99)
            m.erase(m.begin());
    }
    for (auto &kv : m) {
        sum += kv.first.size();
        for (int x : kv.second)
            sum += static_cast<unsigned long>(x);
    }
    for (auto &kv : u)
        sum += kv.second.size();
    std::vector<std::unique_ptr<Node>> nodes;
    for (int i = 0; i < 500; i++)
        nodes.emplace_back(i % 3 ? new Leaf(i) : new Node);
    for (auto &n : nodes)
        sum += static_cast<unsigned long>(n->value());
    return sum;
}

static void containers_across_threads()
{
    std::vector<unsigned long> sums(8);
    std::vector<std::thread> threads;
    std::mutex lock;
    std::vector<std::shared_ptr<std::string>> handed;
    for (int t = 0; t < 8; t++)
        threads.emplace_back([t, &sums, &lock, &handed] {
            sums[static_cast<std::size_t>(t)] = churn(t);
            // Objects made here are destroyed by whichever thread drops the last reference.
            auto s = std::make_shared<std::string>(1000 + t, 'h');
            std::lock_guard<std::mutex> g(lock);
            handed.push_back(s);
        });
    for (auto &t : threads)
        t.join();
    unsigned long total = 0;
    for (unsigned long s : sums)
        total += s;
    std::size_t lens = 0;
    for (auto &s : handed)
        lens += s->size();
    handed.clear();
    std::printf("container checksum %lu, handed-over bytes %zu\n", total, lens);
}

int main()
{
    plain_new_delete();
    aligned_new();
    bad_alloc();
    containers_across_threads();
    std::printf("%s\n", failures ? "cxx_alloc: FAILED" : "cxx_alloc: all checks passed");
    return failures ? 1 : 0;
}
