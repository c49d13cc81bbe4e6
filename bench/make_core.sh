#!/bin/sh
# Makes a core of a fixture for the core-analysis benches: builds c-fixtures/FIXTURE.c into WORK
# (once), runs it with COUNT and SIZE under the release libdmem.so copied into WORK with
# abort-shutdown, and moves the core it leaves to WORK/NAME. Where core_pattern pipes cores to a
# crash handler, gdb stops the program at its abort and writes the core with gcore instead.
#
#   bench/make_core.sh WORK FIXTURE CFLAGS COUNT SIZE NAME
set -eu

work=$1 fixture=$2 cflags=$3 count=$4 size=$5 name=$6
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$work/$fixture" ] || ${CC:-cc} $cflags -g -o "$work/$fixture" "$root/c-fixtures/$fixture.c"
# A private copy, so a rebuild while the benchmark runs cannot mismatch the core.
[ -f "$work/libdmem.so" ] || cp "$root/target/release/libdmem.so" "$work/libdmem.so"

echo "making a core with $count live blocks of $size bytes..."
cd "$work"
rm -f "$work"/core "$work"/core.[0-9]*
if head -c1 /proc/sys/kernel/core_pattern | grep -q '|'; then
    gdb -batch -nx -q -ex "set environment LD_PRELOAD=$work/libdmem.so" \
        -ex "set environment DMEM_OPTS=abort-shutdown" -ex run -ex "gcore $work/core" \
        -ex kill --args "./$fixture" "$count" "$size" >/dev/null 2>&1
else
    (ulimit -c unlimited; DMEM_OPTS=abort-shutdown LD_PRELOAD="$work/libdmem.so" \
        "./$fixture" "$count" "$size") >/dev/null 2>&1 || true
fi
core=$(ls "$work"/core "$work"/core.[0-9]* 2>/dev/null | head -n1)
[ -n "$core" ] || { echo "no core was written (core_pattern: $(cat /proc/sys/kernel/core_pattern))" >&2; exit 1; }
mv "$core" "$work/$name"
echo "core: $(du -m "$work/$name" | cut -f1) MB"
