#!/bin/sh
# Times the launcher on cores with COUNT live blocks (default 1,000,000, from four call stacks,
# about 840 MB of heap): `dmem snapshot PROG CORE -o FILE` writing a gzipped pprof profile
# (target: at most 3 s), and `dmem diff` of two such cores, the second's blocks SIZE2 bytes
# instead of SIZE so every stack changed (target: at most 6 s). Reads the cores directly, no
# gdb. Needs a C compiler and about three times one core's size in free disk space.
#
#   bench/snapshot_bench.sh [COUNT [SIZE [SIZE2]]]
set -eu

count=${1:-1000000}
size=${2:-700}
size2=${3:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dmem-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

cd "$root"
cargo build --release --quiet
cp target/release/dmem "$work/dmem"
cflags="-O2 -fno-optimize-sibling-calls"
bench/make_core.sh "$work" gdb_many "$cflags" "$count" "$size" core.base
bench/make_core.sh "$work" gdb_many "$cflags" "$count" "$size2" core.new
cd "$work"

# GNU time, if installed, gives wall and CPU time; otherwise the shell's clock gives wall time.
timed() {
    what=$1
    shift
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -o "$work/time.txt" -f "%e %U %S" "$@" >/dev/null
        awk -v what="$what" '{ printf "%s: %.2f s wall, %.2f s CPU\n", what, $1, $2 + $3 }' "$work/time.txt"
    else
        t0=$(date +%s.%N)
        "$@" >/dev/null
        t1=$(date +%s.%N)
        echo "$t0 $t1" | awk -v what="$what" '{ printf "%s: %.2f s wall\n", what, $2 - $1 }'
    fi
}

# Once untimed, so every timed run finds the cores in the page cache alike.
./dmem snapshot ./gdb_many core.base -o /dev/null 2>/dev/null
./dmem snapshot ./gdb_many core.new -o /dev/null 2>/dev/null

timed "dmem snapshot (pprof) of $count blocks" ./dmem snapshot ./gdb_many core.base -o snap.pb.gz
echo "profile: $(wc -c <snap.pb.gz) bytes"
timed "dmem diff of two cores of $count blocks" ./dmem diff ./gdb_many core.base ./gdb_many core.new
timed "dmem diff of two cores, with --pprof" ./dmem diff ./gdb_many core.base ./gdb_many core.new --pprof diff.pb.gz
timed "dmem diff of a saved profile and a core" ./dmem diff snap.pb.gz ./gdb_many core.new
