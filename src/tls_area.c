/*
 * The thread's area of libdmem state, in static TLS.
 *
 * Rust on a stable compiler can only declare thread-locals of the general-dynamic model, which a
 * shared library reaches through a call to __tls_get_addr on every access. Declared here with the
 * initial-exec model, the area sits at one fixed offset from the thread pointer in every thread,
 * so tls.rs finds it once through dmem_tls_area() and afterwards with no call at all. The model
 * also marks the library as needing static TLS, so a dlopen that could not give it some fails
 * instead of handing out an area at a different offset.
 */
#include <stddef.h>

#define DMEM_TLS_BYTES 4096

static __thread _Alignas(64) unsigned char area[DMEM_TLS_BYTES]
    __attribute__((tls_model("initial-exec")));

__attribute__((visibility("hidden"))) void *dmem_tls_area(void) { return area; }

__attribute__((visibility("hidden"))) size_t dmem_tls_bytes(void) { return sizeof area; }
