#!/bin/sh
# dmem serve's bench, in one run:
#   - one GET /debug/pprof/heap for a running process holding COUNT live blocks (default
#     1,000,000 from 64 call sites: c-fixtures/bench_hold.c), three times, and one GET
#     /metrics; with the server's peak RSS (target: the profile in at most 1 s);
#   - the two-thread storm (c-fixtures/bench_storm.c, ITERS iterations per thread, preloaded)
#     run alone and run while its profile is fetched from `dmem serve` every 10 s, interleaved
#     five times, medians (target: slowed by at most 2%); and the server's processor time per
#     profile, which is what a scrape takes from the target's cores.
# Needs curl.
#
#   bench/serve.sh [COUNT [ITERS]]
set -eu

count=${1:-1000000}
iters=${2:-100000000}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/build_paths.sh
dmem=$target_dir/release/dmem
lib=$target_dir/release/libdmem.so
work=$(mktemp -d "${TMPDIR:-/tmp}/dmem-serve.XXXXXX")
hold_pid="" serve_pid=""
cleanup() {
    [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# serve PID...: starts dmem serve on a free port; sets serve_pid and addr.
serve() {
    "$dmem" serve --listen 127.0.0.1:0 "$@" 2>"$work/serve.log" &
    serve_pid=$!
    while ! grep -q listening "$work/serve.log"; do sleep 0.05; done
    addr=$(sed -n 's|.*http://\([^/]*\)/.*|\1|p' "$work/serve.log" | head -n 1)
}

mkfifo "$work/in"
LD_PRELOAD="$lib" "$out_dir/fixtures/bench_hold" "$count" 1 <"$work/in" >"$work/hold.txt" &
hold_pid=$!
exec 3>"$work/in"
while ! grep -q ready "$work/hold.txt"; do sleep 0.1; done
serve "$hold_pid"
echo "a process holding $count live blocks:"
for i in 1 2 3; do
    curl -s -o "$work/heap.pb.gz" -w "  GET /debug/pprof/heap  %{time_total} s, %{size_download} bytes\n" \
        "http://$addr/debug/pprof/heap"
done
curl -s -o /dev/null -w "  GET /metrics           %{time_total} s\n" "http://$addr/metrics"
awk '/VmHWM/ { printf "  dmem serve peak RSS    %d MB\n", $2 / 1024 }' "/proc/$serve_pid/status"
kill "$serve_pid"
serve_pid=""
exec 3>&-
wait "$hold_pid" 2>/dev/null || true
hold_pid=""

# storm [scraped]: the storm's wall time in seconds, alone or fetched from every 10 s.
storm() {
    t0=$(date +%s.%N)
    LD_PRELOAD="$lib" "$out_dir/fixtures/bench_storm" "$iters" >/dev/null &
    storm_pid=$!
    # Both runs wait in the same loop, so the loop's own cost is in both; only one fetches.
    : >"$work/scrapes"
    if [ "${1:-}" = scraped ]; then
        serve "$storm_pid"
    fi
    while kill -0 "$storm_pid" 2>/dev/null; do
        i=0
        while [ $i -lt 100 ] && kill -0 "$storm_pid" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        if [ -n "$serve_pid" ] && kill -0 "$storm_pid" 2>/dev/null; then
            curl -s -o /dev/null "http://$addr/debug/pprof/heap?pid=$storm_pid" || true
            echo x >>"$work/scrapes"
        fi
    done
    wait "$storm_pid"
    t1=$(date +%s.%N)
    if [ -n "$serve_pid" ]; then
        # The server's processor time and the profiles it answered, for the cost per scrape.
        awk '{ print $14 + $15 }' "/proc/$serve_pid/stat" >>"$work/serve_ticks"
        grep -c . "$work/scrapes" >>"$work/serve_count" 2>/dev/null || echo 0 >>"$work/serve_count"
        kill "$serve_pid"
        serve_pid=""
    fi
    echo "$t0 $t1" | awk '{ printf "%.3f\n", $2 - $1 }'
}

echo "the storm ($iters iterations per thread), alone and fetched from every 10 s:"
: >"$work/alone"
: >"$work/scraped"
: >"$work/serve_ticks"
: >"$work/serve_count"
for i in 1 2 3 4 5; do
    storm >>"$work/alone"
    storm scraped >>"$work/scraped"
done
median() { sort -n "$1" | sed -n 3p; }
a=$(median "$work/alone")
s=$(median "$work/scraped")
echo "  alone    $(tr '\n' ' ' <"$work/alone")-> median $a s"
echo "  scraped  $(tr '\n' ' ' <"$work/scraped")-> median $s s"
echo "$a $s" | awk '{ printf "  scraped / alone: %.3f\n", $2 / $1 }'
paste -d' ' "$work/serve_ticks" "$work/serve_count" | awk -v hz="$(getconf CLK_TCK)" \
    '{ t += $1; n += $2 } END { if (n) printf "  dmem serve: %.0f ms of processor time per profile (%d profiles)\n", 1000 * t / hz / n, n }'
