/* A vendor library that leaks one block at start-up: its constructor keeps a configuration
 * buffer only in a local, as vendor code that nobody can fix often does. The tests suppress it
 * by module (LeakSanitizer's leak:libleak_vendor) and by function (valgrind's fun:). */
#include <stdlib.h>
#include <string.h>

void *volatile vendor_sink;

__attribute__((noinline)) void vendor_load_config(void)
{
    char *config = malloc(77);
    memset(config, 'v', 76);
    config[76] = 0;
    vendor_sink = config;
    vendor_sink = 0;
}

__attribute__((constructor)) static void vendor_init(void)
{
    vendor_load_config();
}

int vendor_version(void)
{
    return 3;
}
