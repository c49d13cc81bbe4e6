// build: -O2 -fomit-frame-pointer
/* A C++ workload for the bench: several threads build and drop std::map<std::string, ...>
 * objects, the way a server parses requests into maps and throws them away.
 *
 * Every node and every string longer than the small-string buffer is an operator new from deep
 * inside libstdc++ (_Rb_tree::_M_emplace_unique, basic_string::_M_create), which Debian builds
 * without frame pointers, so every recorded stack is walked through unwind tables. Some maps
 * outlive their round and are dropped by the next thread, so frees cross threads too.
 *
 * usage: bench_cxxmap [ROUNDS_PER_THREAD [THREADS]]   (default 40000 rounds, 4 threads)
 */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Record {
    std::string name;
    std::vector<int> values;
};

using Table = std::map<std::string, Record>;

// One slot per thread through which a table is handed to the next thread, which frees it.
constexpr int MAX_THREADS = 64;
std::atomic<Table *> handoff[MAX_THREADS];

uint64_t next(uint64_t &s)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

__attribute__((noinline)) Table *build(uint64_t &rng)
{
    auto *t = new Table;
    int n = 8 + static_cast<int>(next(rng) % 40);
    for (int i = 0; i < n; i++) {
        uint64_t r = next(rng);
        // Keys from 5 to 60 characters: some fit the small-string buffer, most do not.
        std::string key = "field-" + std::to_string(r % 100000) + std::string(r % 48, 'k');
        Record rec{std::string(16 + r % 40, 'v'), std::vector<int>(1 + r % 12, static_cast<int>(i))};
        (*t)[std::move(key)] = std::move(rec);
    }
    return t;
}

__attribute__((noinline)) size_t use(const Table &t)
{
    size_t sum = 0;
    for (const auto &kv : t)
        sum += kv.first.size() + kv.second.name.size() + kv.second.values.size();
    return sum;
}

void worker(int id, int threads, long rounds, size_t *out)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(id + 1);
    size_t sum = 0;
    for (long k = 0; k < rounds; k++) {
        Table *t = build(rng);
        sum += use(*t);
        if (k % 8 == 0) {
            // Hand this one to the next thread and free whatever was handed to us.
            delete handoff[(id + 1) % threads].exchange(t);
            delete handoff[id].exchange(nullptr);
        } else {
            delete t;
        }
    }
    *out = sum;
}

} // namespace

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? std::atol(argv[1]) : 40000;
    int threads = argc > 2 ? std::atoi(argv[2]) : 4;
    if (threads < 1 || threads > MAX_THREADS) {
        std::fprintf(stderr, "bench_cxxmap: THREADS must be 1 to %d\n", MAX_THREADS);
        return 2;
    }
    std::vector<size_t> sums(threads);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; i++)
        pool.emplace_back(worker, i, threads, rounds, &sums[i]);
    for (auto &t : pool)
        t.join();
    for (auto &slot : handoff)
        delete slot.exchange(nullptr);
    size_t total = 0;
    for (size_t s : sums)
        total += s;
    std::printf("cxxmap: %ld rounds x %d threads, checksum %zu\n", rounds, threads, total);
    return 0;
}
