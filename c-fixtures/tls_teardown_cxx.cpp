// C++ thread_local objects whose destructors free (and allocate) memory as each thread exits,
// plus a static object destroyed after main returns.
// build: -std=c++17
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

static std::atomic<long> destroyed{0}, bad{0};

struct Cache {
    std::vector<std::string> names;
    std::map<int, std::unique_ptr<int[]>> arrays;
    char *raw = nullptr;
    int seed = 0;

    void fill(int s)
    {
        seed = s;
        for (int i = 0; i < 50; i++)
            names.push_back("name-" + std::to_string(seed * 100 + i) + std::string(i, 'x'));
        for (int i = 0; i < 20; i++) {
            arrays[i].reset(new int[100 + i]);
            arrays[i][0] = seed + i;
        }
        raw = static_cast<char *>(std::malloc(10000));
        raw[0] = 'R';
    }

    ~Cache()
    {
        if (!raw)
            return;
        long wrong = raw[0] != 'R';
        for (auto &kv : arrays)
            wrong += kv.second[0] != seed + kv.first;
        std::free(raw);
        // Allocating inside a thread_local destructor must work as well.
        std::string last = "done-" + std::to_string(names.size());
        names.clear();
        names.shrink_to_fit();
        wrong += last != "done-50";
        wrong += names.capacity() != 0;
        bad += wrong;
        destroyed++;
    }
};

thread_local Cache cache;
thread_local std::unique_ptr<std::vector<long>> numbers;

struct Global {
    std::string *s = new std::string(1000, 'g');
    ~Global()
    {
        bool ok = s->size() == 1000;
        delete s;
        std::printf("static destructor: %s\n", ok ? "ok" : "FAILED");
        std::fflush(stdout);
    }
} global;

int main()
{
    const int rounds = 20, nt = 8;
    for (int r = 0; r < rounds; r++) {
        std::vector<std::thread> threads;
        for (int i = 0; i < nt; i++)
            threads.emplace_back([r, i] {
                cache.fill(r * nt + i);
                numbers.reset(new std::vector<long>(1000 + i, r));
            });
        for (auto &t : threads)
            t.join();
    }
    long want = rounds * nt;
    std::printf("thread_local destructors %ld (want %ld), bad %ld\n", destroyed.load(), want,
                bad.load());
    bool ok = destroyed == want && bad == 0;
    std::printf("%s\n", ok ? "tls_teardown_cxx: all checks passed" : "tls_teardown_cxx: FAILED");
    std::fflush(stdout);
    return ok ? 0 : 1;
}
