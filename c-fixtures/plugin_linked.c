/* Linked against the fixture library, whose constructor allocates before main runs, and whose
 * destructor frees after main returns. */
// build: -ldmemfix_plugin
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *plugin_banner(void);
char *plugin_make(size_t n, int c);
size_t plugin_take(char *p);
unsigned long plugin_churn(int rounds);

int main(void)
{
    int bad = strcmp(plugin_banner(), "dmemfix plugin loaded") != 0;
    char *p = plugin_make(5000, 'q');
    bad += strlen(p) != 5000;
    bad += plugin_take(p) != 5000;
    unsigned long sum = plugin_churn(200);
    printf("checksum %lu, bad %d\n", sum, bad);
    printf("%s\n", bad ? "plugin_linked: FAILED" : "plugin_linked: all checks passed");
    return bad ? 1 : 0;
}
