#!/bin/sh
# The analysis engine's bench: the launcher on a core of COUNT live blocks of SIZE bytes (default
# 1,000,000 of 600, about 570 MB of blocks, shaped like a server's heap: see
# c-fixtures/leak_many.c), side by side in one run with VMware's chap on the same program's
# uninstrumented core, and `dmem leaks PID` on a running process holding COUNT blocks.
#
# Rows, each with wall time and the peak RSS of the command (GNU time, when installed), and the
# peak of its anonymous memory, what it allocated itself (bench/peak_anon.py, in a second run):
#   dmem summary PROG CORE        target: at most 0.5 s
#   dmem leaks PROG CORE          target: at most a quarter of chap's time, and no more memory
#                                 of its own (peak anon) than the core's size
#   gdb + dmem leaks              gdb opening the core and its `dmem leaks` (which calls the
#                                 launcher): the engine plus gdb's own start-up
#   cat bare core                 reading the uninstrumented core once (gdb's gcore at exit_group)
#   dmem leaks (bare core)        the same core read through glibc's heap, without lists
#                                 (target: within 3x of reading it once, at most a quarter of chap)
#   chap: count leaked            on the uninstrumented core
#   chap vs dmem                  chap's count used, free and leaked beside dmem's, on that core
#                                 and on a core of c-fixtures/bare_heap.cpp: "equal" or "differ"
#   dmem leaks PID                the pause it prints (target: at most 1 s), and the wall time
#
# chap is not packaged: build it from https://github.com/vmware/chap outside this repository and
# point CHAP at the binary (or put `chap` on PATH); without it the chap row says so in one line.
# Needs gdb and a C compiler, and about twice one core's size in free disk space.
#
#   bench/engine.sh [COUNT [SIZE]]
set -eu

count=${1:-1000000}
size=${2:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/build_paths.sh
dmem=$target_dir/release/dmem
work=$(mktemp -d "${TMPDIR:-/tmp}/dmem-engine.XXXXXX")
hold_pid=""
cleanup() {
    [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

"$root/bench/make_core.sh" "$work" leak_many "-O0" "$count" "$size" dmem.core
# The same program and arguments without the library, stopped at its exit_group with its heap
# whole, for chap.
(cd "$work" && gdb -batch -nx -q -ex 'catch syscall exit_group' -ex run -ex "gcore $work/bare" \
    --args ./leak_many "$count" "$size" >/dev/null 2>&1)
[ -f "$work/bare" ] || { echo "gdb could not write the uninstrumented core" >&2; exit 1; }

# Each core read once untimed, so every timed run finds it in the page cache alike.
cat "$work/dmem.core" "$work/bare" >/dev/null

# row NAME COMMAND...: runs the command, prints wall time and peak RSS, then runs it again
# untimed under bench/peak_anon.py for the peak of its anonymous memory (what it allocated
# itself: most of a core command's RSS is the core's own pages, mapped from the file).
row() {
    name=$1
    shift
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -o "$work/time.txt" -f '%e %M' "$@" >"$work/out.txt" 2>"$work/err.txt" || {
            cat "$work/err.txt" >&2
            exit 1
        }
        line=$(awk -v n="$name" '{ printf "%-24s %6.2f s   peak RSS %5d MB", n, $1, $2 / 1024 }' "$work/time.txt")
    else
        t0=$(date +%s.%N)
        "$@" >"$work/out.txt" 2>"$work/err.txt"
        t1=$(date +%s.%N)
        line=$(echo "$t0 $t1" | awk -v n="$name" '{ printf "%-24s %6.2f s", n, $2 - $1 }')
    fi
    if command -v python3 >/dev/null &&
        python3 "$root/bench/peak_anon.py" "$work/anon.txt" "$@" >/dev/null 2>&1; then
        line="$line$(awk '{ printf "   peak anon %5d MB", $1 / 1024 }' "$work/anon.txt")"
    fi
    echo "$line"
}

echo "core: $count blocks of $size bytes"
row "dmem summary" "$dmem" summary "$work/leak_many" "$work/dmem.core"
row "dmem leaks" "$dmem" leaks "$work/leak_many" "$work/dmem.core"
grep '^total:' "$work/out.txt"
row "gdb + dmem leaks" gdb -batch -nx -q "$work/leak_many" "$work/dmem.core" \
    -ex "source $root/gdb/dmem.py" -ex "dmem leaks"

# The uninstrumented core, read through glibc's heap (no lists there), beside reading the core
# once: the limit to aim at is three times that.
row "cat bare core" cat "$work/bare"
row "dmem leaks (bare core)" "$dmem" leaks "$work/leak_many" "$work/bare"
grep '^total:' "$work/out.txt"

# compare LABEL PROG CORE: chap's count used, count free and count leaked beside dmem's on
# the same bare core (used: the blocks of `dmem summary`; free: the free chunks of its note on
# glibc's heap, tcache and fast-bin chunks among them; leaked: definitely plus indirectly lost,
# since chap counts a block referenced anywhere inside, not only at its start, as referenced,
# so valgrind's possibly lost are not leaked to it). chap counts what glibc holds in a tcache,
# and each thread's tcache itself, as used, and each arena's top chunk as free, where dmem
# counts the first free and the others not at all: the verdict is on chap's counts moved by
# those (which dmem's note gives), and says "equal" or where they differ.
compare() {
    label=$1 prog=$2 core=$3
    printf 'count used\ncount free\ncount leaked\n' | "$chap" "$core" 2>/dev/null |
        sed -n 's/^\([0-9,]*\) allocations\{0,1\} use.*/\1/p' | tr -d , | tr '\n' ' ' >"$work/chap.counts"
    "$dmem" summary "$prog" "$core" >"$work/sum.txt" 2>/dev/null
    "$dmem" leaks --json "$prog" "$core" >"$work/leaks.json" 2>/dev/null
    python3 - "$label" "$work/chap.counts" "$work/sum.txt" "$work/leaks.json" <<'PY'
import json, re, sys
label, counts, summary, leaks = sys.argv[1:]
chap = [int(n) for n in open(counts).read().split()]
text = open(summary).read()
note = next(l for l in text.splitlines() if "read without libdmem" in l)
num = lambda pattern: int(re.search(pattern, note).group(1))
arenas, free = num(r"(\d+) arenas? and"), num(r"of which (\d+) free")
in_tcaches, tcaches = num(r"(\d+) in tcaches"), num(r"and (\d+) threads?'s? tcaches?")
used = int(re.search(r"^total: \d+ bytes in (\d+) blocks?", text, re.M).group(1))
v = json.load(open(leaks))
leaked = v["definitely_lost"]["blocks"] + v["indirectly_lost"]["blocks"]
def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")
if len(chap) != 3:
    print(f"{label:<24} chap gave {len(chap)} counts, not 3")
    sys.exit()
moved = [chap[0] - in_tcaches - tcaches, chap[1] + in_tcaches - arenas, chap[2]]
verdict = ", ".join(
    f"{name} " + ("equal" if c == d else f"differ by {c - d:+}")
    for name, c, d in zip(["used", "free", "leaked"], moved, [used, free, leaked])
)
print(f"{label:<24} used {chap[0]} / {used}, free {chap[1]} / {free}, leaked {chap[2]} / {leaked} "
      f"(chap / dmem); with chap's {plural(in_tcaches, 'chunk')} in tcaches and "
      f"{plural(tcaches, 'tcache')} as dmem counts them and its {plural(arenas, 'top chunk')} "
      f"left out: {verdict}")
PY
}

chap=${CHAP:-$(command -v chap || true)}
if [ -n "$chap" ] && [ -x "$chap" ]; then
    echo "count leaked" >"$work/chap.in"
    row "chap: count leaked" sh -c "\"$chap\" \"$work/bare\" <\"$work/chap.in\""
    grep -i 'allocations' "$work/out.txt" | head -n 1
    compare "chap vs dmem" "$work/leak_many" "$work/bare"
    # The test's bare C++ program (four arenas, tcaches, fast and regular bins, mapped and
    # memalign'd chunks, polymorphic types), stopped by gdb at its abort.
    cp "$out_dir/fixtures/bare_heap" "$work/bare_heap"
    (cd "$work" && gdb -batch -nx -q -ex run -ex "gcore $work/bare_heap.core" \
        --args ./bare_heap abort >/dev/null 2>&1)
    compare "  on bare_heap" "$work/bare_heap" "$work/bare_heap.core"
else
    echo "chap: not found (build it from github.com/vmware/chap and set CHAP=/path/to/chap)"
fi

# A running process holding COUNT blocks on one thread, read while it runs.
mkfifo "$work/in"
LD_PRELOAD="$target_dir/release/libdmem.so" "$out_dir/fixtures/bench_hold" "$count" 1 \
    <"$work/in" >"$work/hold.txt" &
hold_pid=$!
exec 3>"$work/in"
while ! grep -q ready "$work/hold.txt"; do sleep 0.1; done
row "dmem leaks PID" "$dmem" leaks "$hold_pid"
sed -n 's/^dmem: .* was stopped for \([0-9.]*\) ms.*/  the process was stopped for \1 ms/p' "$work/err.txt"
exec 3>&-
wait "$hold_pid" 2>/dev/null || true
hold_pid=""
