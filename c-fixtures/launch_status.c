/* Ends the way its arguments say, for the launcher's exit-status tests: "exit N" returns N from
 * main, "signal N" raises signal N. Either way it first prints a line and leaks one block. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
main(int argc, char **argv)
{
    char *kept = malloc(4096);
    memset(kept, 'x', 4096);
    printf("launch_status %s %s\n", argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : "");
    fflush(stdout);
    if (argc > 2 && strcmp(argv[1], "signal") == 0)
        raise(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "exit") == 0)
        return atoi(argv[2]);
    return 0;
}
