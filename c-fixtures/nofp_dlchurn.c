// build: -O2 -fomit-frame-pointer -rdynamic
/* Stacks through modules that are loaded, unloaded and loaded again, checked while running.
 *
 * Each round loads libnofp_plugin.so, allocates through it, unloads it; loads libnofp_plugin2.so
 * (same code, different frame size), which the loader usually puts where the first one was;
 * then loads the first one again, which now has to go elsewhere. After every allocation the
 * fixture reads the stack libdmem recorded in the block's header (found through the exported
 * layout descriptor) and names its frames with dladdr while the module is still loaded: they
 * must be plugin_inner, plugin_entry (in the expected module), churn_round and main.
 *
 * usage: nofp_dlchurn FIXTURE_DIR [ROUNDS]
 * Prints "dlchurn: N checked, M wrong" and exits 1 if any stack was wrong.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t *layout; /* dmem_layout: magic, version, count, then named entries */
static uint64_t header_size, off_frames;

/* A field of the descriptor by name: from version 3 entries are a 24-byte NUL-padded name and
 * a 64-bit value (analysis/src/descriptor.rs); -1 when absent. */
static uint64_t
field(const char *name)
{
    if (layout[1] < 3)
        return (uint64_t)-1;
    for (uint64_t i = 0; i < layout[2]; i++) {
        const uint64_t *e = layout + 3 + 4 * i;
        if (strncmp((const char *)e, name, 24) == 0)
            return e[3];
    }
    return (uint64_t)-1;
}
static long checked, wrong;
static uintptr_t bases[2][2];

static void
check(void *p, const char *module)
{
    static const char *want[] = {"plugin_inner", "plugin_entry", "churn_round", "main"};
    const uintptr_t *frames = (const uintptr_t *)((char *)p - header_size + off_frames);
    checked++;
    for (int i = 0; i < 4; i++) {
        Dl_info info;
        const char *name = "??", *file = "??";
        /* One byte back from the return address is inside the call. */
        if (frames[i] && dladdr((void *)(frames[i] - 1), &info)) {
            name = info.dli_sname ? info.dli_sname : "??";
            file = info.dli_fname ? info.dli_fname : "??";
        }
        int ok = strcmp(name, want[i]) == 0;
        if (i < 2) {
            const char *slash = strrchr(file, '/');
            ok = ok && strcmp(slash ? slash + 1 : file, module) == 0;
        }
        if (!ok) {
            wrong++;
            printf("wrong frame %d of a block from %s: %#lx %s in %s (want %s)\n", i, module,
                   (unsigned long)frames[i], name, file, want[i]);
            return;
        }
    }
}

__attribute__((noinline)) int
churn_round(void *handle, const char *module, size_t size)
{
    void *(*entry)(size_t) = (void *(*)(size_t))dlsym(handle, "plugin_entry");
    if (!entry) {
        printf("dlsym: %s\n", dlerror());
        exit(2);
    }
    void *p = entry(size);
    check(p, module);
    free(p);
    return 0;
}

static void *
load(const char *dir, const char *module, int slot, int which)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, module);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        exit(2);
    }
    struct link_map *map;
    if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0)
        bases[slot][which] = map->l_addr;
    return h;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR [ROUNDS]\n", argv[0]);
        return 2;
    }
    layout = dlsym(RTLD_DEFAULT, "dmem_layout");
    if (!layout) {
        printf("libdmem is not loaded\n");
        return 2;
    }
    header_size = field("header_size");
    off_frames = field("off_frames");
    if (header_size == (uint64_t)-1 || off_frames == (uint64_t)-1) {
        printf("dmem_layout has no header_size or off_frames\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 50;
    long reused = 0, moved = 0;
    for (int r = 0; r < rounds; r++) {
        void *a = load(argv[1], "libnofp_plugin.so", 0, 0);
        churn_round(a, "libnofp_plugin.so", 100 + r);
        dlclose(a);
        void *b = load(argv[1], "libnofp_plugin2.so", 1, 0);
        churn_round(b, "libnofp_plugin2.so", 200 + r);
        void *a2 = load(argv[1], "libnofp_plugin.so", 0, 1);
        churn_round(a2, "libnofp_plugin.so", 300 + r);
        churn_round(b, "libnofp_plugin2.so", 400 + r);
        reused += bases[1][0] == bases[0][0];
        moved += bases[0][1] != bases[0][0];
        dlclose(a2);
        dlclose(b);
    }
    printf("dlchurn: %ld checked, %ld wrong; second module at the first one's address in %ld of %d "
           "rounds, first module reloaded elsewhere in %ld\n",
           checked, wrong, reused, rounds, moved);
    return wrong ? 1 : 0;
}
