// build: -O2
// The bench's floor for any tool that puts a 112-byte header in front of every block: a preload
// that only does that. Every block gets the header's room and nothing is written, linked or
// unwound, so what it costs over the bare run is what the layout alone costs (bigger blocks,
// other size classes, objects spread over more cache lines), not anything libdmem does.
//
// It calls glibc's allocator by its __libc_ names, so it is the floor for the glibc backend.
// The lead is HEADER bytes, or the smallest multiple of an alignment above 16 that holds it; it
// is stored in the word before the user pointer so free finds the backend's block.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define HEADER 112

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
size_t malloc_usable_size(void *);

static size_t lead_for(size_t align) {
    return align <= 16 ? HEADER : (HEADER + align - 1) / align * align;
}

static void *publish(char *base, size_t lead) {
    if (!base)
        return NULL;
    ((size_t *)(base + lead))[-1] = lead;
    return base + lead;
}

static char *base_of(void *p) {
    return (char *)p - ((size_t *)p)[-1];
}

void *malloc(size_t n) {
    if (n > SIZE_MAX - HEADER) {
        errno = ENOMEM;
        return NULL;
    }
    return publish(__libc_malloc(n + HEADER), HEADER);
}

void *calloc(size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n) || n > SIZE_MAX - HEADER) {
        errno = ENOMEM;
        return NULL;
    }
    return publish(__libc_calloc(1, n + HEADER), HEADER);
}

void free(void *p) {
    if (p)
        __libc_free(base_of(p));
}

static void *aligned(size_t align, size_t n) {
    size_t lead = lead_for(align);
    if (n > SIZE_MAX - lead) {
        errno = ENOMEM;
        return NULL;
    }
    return publish(__libc_memalign(align, n + lead), lead);
}

void *realloc(void *p, size_t n) {
    if (!p)
        return malloc(n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    if (((size_t *)p)[-1] != HEADER) {
        // An aligned block: moved by hand, so the new one has the ordinary lead.
        void *q = malloc(n);
        if (q) {
            size_t old = malloc_usable_size(p);
            memcpy(q, p, old < n ? old : n);
            free(p);
        }
        return q;
    }
    if (n > SIZE_MAX - HEADER) {
        errno = ENOMEM;
        return NULL;
    }
    return publish(__libc_realloc(base_of(p), n + HEADER), HEADER);
}

void *reallocarray(void *p, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

void *memalign(size_t align, size_t n) {
    return aligned(align, n);
}

void *aligned_alloc(size_t align, size_t n) {
    return aligned(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align == 0 || align % sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    int saved = errno;
    void *p = aligned(align, n);
    errno = saved;
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t n) {
    return aligned(sysconf(_SC_PAGESIZE), n);
}

void *pvalloc(size_t n) {
    size_t page = sysconf(_SC_PAGESIZE);
    return aligned(page, (n + page - 1) & ~(page - 1));
}

// glibc's own answer for the backend block, less the lead.
size_t malloc_usable_size(void *p) {
    static size_t (*real)(void *);
    if (!p)
        return 0;
    if (!real)
        real = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    char *base = base_of(p);
    return real(base) - ((char *)p - base);
}
