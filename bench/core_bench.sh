#!/bin/sh
# The shared part of the core-analysis benches: builds the release library and FIXTURE, makes a
# core of FIXTURE COUNT SIZE under abort-shutdown (or gcore where cores go to a crash handler),
# then times gdb opening it alone, gdb opening it and running `dmem SUBCOMMAND`, the command by
# itself as timed inside gdb, and the CPU time of the second.
#
#   bench/core_bench.sh SUBCOMMAND FIXTURE CFLAGS [COUNT [SIZE]]
set -eu

sub=$1 fixture=$2 cflags=$3
count=${4:-1000000}
size=${5:-700}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dmem-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

cd "$root"
cargo build --release --quiet
"$root/bench/make_core.sh" "$work" "$fixture" "$cflags" "$count" "$size" core
core=$work/core
cd "$work"

now() { date +%s.%N; }
elapsed() { echo "$1 $2" | awk '{ printf "%.2f", $2 - $1 }'; }

# Once untimed, so every timed run finds the core in the page cache alike.
gdb -batch -nx -q "./$fixture" "$core" >/dev/null 2>&1

t0=$(now)
gdb -batch -nx -q "./$fixture" "$core" >/dev/null 2>&1
# On a busy machine wall time says little; GNU time, if installed, adds the CPU time used.
timer=""
[ -x /usr/bin/time ] && timer="/usr/bin/time -o $work/cpu.txt -f %U+%S"
t1=$(now)
$timer gdb -batch -nx -q "./$fixture" "$core" -ex "source $root/gdb/dmem.py" \
    -ex 'python import time; _t = time.time()' -ex "dmem $sub" \
    -ex 'python print("dmem '"$sub"' alone: %.2f s" % (time.time() - _t))' >"$work/out.txt" 2>&1
t2=$(now)

grep "^total:" "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
echo "gdb opening the core: $(elapsed "$t0" "$t1") s"
echo "gdb + dmem $sub: $(elapsed "$t1" "$t2") s"
grep "^dmem $sub alone" "$work/out.txt"
[ -s "$work/cpu.txt" ] && echo "gdb + dmem $sub, CPU time: $(awk -F+ '{ printf "%.2f", $1 + $2 }' "$work/cpu.txt") s"
exit 0
