#!/bin/sh
# Makes a core of a fixture for the core-analysis benches: builds c-fixtures/FIXTURE.c into WORK
# (once) and runs it with COUNT and SIZE through the launcher, `dmem run -o abort-shutdown`, with
# the release libdmem.so copied into WORK. The launcher decides who writes the core (the kernel,
# or gdb's gcore where core_pattern pipes cores to a crash handler); the core it reports is moved
# to WORK/NAME. Needs `cargo build --release` first.
#
#   bench/make_core.sh WORK FIXTURE CFLAGS COUNT SIZE NAME
set -eu

work=$1 fixture=$2 cflags=$3 count=$4 size=$5 name=$6
root=$(cd "$(dirname "$0")/.." && pwd)
# CFLAGS is a list of flags: split on purpose.
# shellcheck disable=SC2086
[ -x "$work/$fixture" ] || ${CC:-cc} $cflags -g -o "$work/$fixture" "$root/c-fixtures/$fixture.c"
# A private copy, so a rebuild while the benchmark runs cannot mismatch the core.
[ -f "$work/libdmem.so" ] || cp "$root/target/release/libdmem.so" "$work/libdmem.so"

echo "making a core with $count live blocks of $size bytes..."
cd "$work"
# The launcher names the core on its standard error, after the program's own output.
core=$(DMEM_LIB="$work/libdmem.so" "$root/target/release/dmem" run -o abort-shutdown \
    --core-dir "$work" -- "./$fixture" "$count" "$size" 2>&1 >/dev/null |
    sed -n 's/^dmem: core file: //p' | tail -n1) || true
# The program aborts on purpose, so the status above is not the test: the core it names is.
if [ -z "$core" ] || [ ! -f "$core" ]; then
    echo "dmem run reported no core" >&2
    exit 1
fi
mv "$core" "$work/$name"
echo "core: $(du -m "$work/$name" | cut -f1) MB"
