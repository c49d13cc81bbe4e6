#!/bin/sh
# Times `dmem summary` in gdb on a core holding COUNT live blocks (default 1,000,000 blocks of
# 700 bytes from four call stacks, about 830 MB of heap), with the release build of libdmem.
# The target is gdb + dmem summary within 5 s. Needs gdb, a C compiler and about twice the
# core's size in free disk space.
#
#   bench/gdb_summary.sh [COUNT [SIZE]]
exec "$(dirname "$0")/core_bench.sh" summary gdb_many "-O2 -fno-optimize-sibling-calls" "${1:-1000000}" "${2:-700}"
