// build: -O2 -fomit-frame-pointer -DFRAME_BYTES=4096
/* libnofp_plugin.c with a larger frame; see there. */
#include "libnofp_plugin.c"
