#!/bin/sh
# Times `dmem leaks` in gdb on a core holding COUNT live blocks (default 1,000,000 blocks of 600
# bytes, about 730 MB of heap), made with the release build of libdmem. The heap is shaped like
# a server's (see c-fixtures/leak_many.c): 70% of the blocks reachable through a table and
# linked lists, 30% leaked, in small structures and alone. The figure to compare is gdb + dmem
# leaks: within 2x of VMware chap's 2.6 s on the same machine, so at most 5.2 s.
#
#   bench/gdb_leaks.sh [COUNT [SIZE]]
exec "$(dirname "$0")/core_bench.sh" leaks leak_many "-O0" "${1:-1000000}" "${2:-600}"
