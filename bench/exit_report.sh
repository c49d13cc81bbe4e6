#!/usr/bin/env bash
# The exit report's cost on a big heap: c-fixtures/leak_many.c with COUNT blocks (default
# 1,000,000) of 600 bytes, run bare, under `leak-report`, under `abort-shutdown` (the lists taken
# and the dead stack cleared before the abort) and under both; core writing is switched off with
# `ulimit -c 0`, so a row is the library's work, not the disk's. Each build named with
# --also runs beside this one, interleaved round by round, so every figure of one table comes
# from the same minutes of a shared machine. Wall time in seconds, best of ROUNDS (default 3),
# and the ratio to the bare run.
#
#   bench/exit_report.sh [COUNT] [--rounds N] [--also NAME=/path/to/libdmem.so]...
set -eu
cd "$(dirname "$0")/.."
count=1000000 rounds=3 also=""
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help)
        sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    --rounds) rounds=$2 && shift 2 ;;
    --also) also="$also $2" && shift 2 ;;
    [0-9]*) count=$1 && shift ;;
    *) echo "exit_report.sh: unknown argument $1 (see --help)" >&2 && exit 2 ;;
    esac
done
. bench/build_paths.sh
prog=$out_dir/fixtures/leak_many
libs="this=$target_dir/release/libdmem.so$also"
for l in $libs; do
    [ -f "${l#*=}" ] || { echo "exit_report.sh: no library at ${l#*=}" >&2 && exit 2; }
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# One timed run: its wall time in seconds goes to the results file under KEY.
timed() {
    key=$1 && shift
    start=$(date +%s.%N)
    # The outer redirection keeps the shell's own "Aborted" line out of the table.
    { (ulimit -c 0 && "$@") >/dev/null 2>&1; } 2>/dev/null || true
    end=$(date +%s.%N)
    awk -v k="$key" -v s="$start" -v e="$end" 'BEGIN { print k, e - s }' >>"$results"
}

echo "leak_many $count blocks of 600 bytes, $rounds rounds, best of each:"
for _ in $(seq "$rounds"); do
    timed bare "$prog" "$count" 600
    for l in $libs; do
        for opts in leak-report abort-shutdown leak-report,abort-shutdown; do
            timed "${l%%=*}:$opts" env DMEM_OPTS="$opts" LD_PRELOAD="${l#*=}" "$prog" "$count" 600
        done
    done
done
sort -k1,1 -k2,2n "$results" | awk '
    !($1 in best) { best[$1] = $2; order[n++] = $1 }
    END {
        for (i = 0; i < n; i++) {
            k = order[i]
            printf "%-28s %7.2f s   %5.1fx bare\n", k, best[k], best[k] / best["bare"]
        }
    }'
