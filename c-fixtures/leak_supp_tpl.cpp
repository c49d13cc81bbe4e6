// C++ leaks whose function names carry templates, '<', '>' and '&': for the XML report, whose
// names must come out escaped, and for valgrind's mangled names in suppressions.
#include <cstdio>
#include <map>
#include <string>
#include <utility>

void *volatile sink;

namespace store {
template <typename K, typename V> struct Registry {
    __attribute__((noinline)) static std::map<K, V> *make(const K &first)
    {
        auto *m = new std::map<K, V>;
        (*m)[first] = V();
        return m;
    }
};
} // namespace store

__attribute__((noinline)) void leak_registry()
{
    sink = store::Registry<std::string, std::pair<int, char>>::make(std::string(40, 'k'));
    sink = nullptr;
}

int main()
{
    leak_registry();
    std::puts("done");
    return 0;
}
