/* dlopen and dlclose a library that allocates in its constructor, its functions and its
 * destructor, many times; blocks cross the library boundary in both directions, and one block
 * made by the library outlives the library's unloading. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LOADS = 150 };

int main(void)
{
    /* The library is built next to this program. */
    char exe[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0) {
        printf("readlink failed\n");
        return 1;
    }
    exe[n] = '\0';
    snprintf(path, sizeof(path), "%s/libdmemfix_plugin.so", dirname(exe));

    int bad = 0;
    unsigned long sum = 0;
    char *survivor = NULL;
    for (int i = 0; i < LOADS; i++) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("dlopen failed: %s\n", dlerror());
            return 1;
        }
        const char *(*banner)(void) = (const char *(*)(void))dlsym(h, "plugin_banner");
        char *(*make)(size_t, int) = (char *(*)(size_t, int))dlsym(h, "plugin_make");
        size_t (*take)(char *) = (size_t(*)(char *))dlsym(h, "plugin_take");
        unsigned long (*churn)(int) = (unsigned long (*)(int))dlsym(h, "plugin_churn");
        if (!banner || !make || !take || !churn) {
            printf("dlsym failed\n");
            return 1;
        }
        bad += strcmp(banner(), "dmemfix plugin loaded") != 0;
        char *p = make(100 + (size_t)i, 'a' + i % 26);
        bad += p == NULL || strlen(p) != 100 + (size_t)i;
        free(p);
        char *mine = malloc(300);
        memset(mine, 'z', 299);
        mine[299] = '\0';
        bad += take(mine) != 299;
        sum += churn(20);
        free(survivor);
        survivor = make(1000, 's');
        if (dlclose(h) != 0) {
            printf("dlclose failed: %s\n", dlerror());
            return 1;
        }
        bad += survivor == NULL || survivor[999] != 's';
    }
    free(survivor);
    printf("loads %d, checksum %lu, bad %d\n", LOADS, sum, bad);
    printf("%s\n", bad ? "dlopen_loop: FAILED" : "dlopen_loop: all checks passed");
    return bad ? 1 : 0;
}
