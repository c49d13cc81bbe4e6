#!/bin/sh
# The hot path's cost in instructions: builds release and runs bench/callgrind.py, which runs
# each single-threaded workload bare and under libdmem inside valgrind's callgrind and prints the
# instructions of each run, their ratio to bare and the instructions per allocation call above
# bare. Exact and free of the machine's load, unlike wall time; see bench/README.md.
#
#   bench/callgrind.sh                                   python and cxxmap
#   bench/callgrind.sh --only cxxmap                     one workload
#   bench/callgrind.sh --also before=/path/to/libdmem.so another build in the same table
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
-h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
if ! command -v valgrind >/dev/null; then
    echo "callgrind.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2
    exit 1
fi
. bench/build_paths.sh
exec python3 bench/callgrind.py --lib "$target_dir/release/libdmem.so" \
    --cxxmap "$out_dir/fixtures/bench_cxxmap" "$@"
