#!/bin/sh
# Instructions per allocation and per free, counted by callgrind: builds release, then runs each
# workload, scaled down, once bare and once under each tool, and prints the instructions of the
# run, of each allocation and free, and libdmem's costliest functions, side by side. Counts do
# not move with the machine's load; see bench/README.md and bench/instructions.py (`--help`).
#
#   bench/instructions.sh                     every workload, a few minutes
#   bench/instructions.sh --only python       one workload (storm, python or cxxmap)
#   bench/instructions.sh --budget python=N   another budget (instructions per allocation and free)
#   bench/instructions.sh --also before=/path/to/libdmem.so     another build beside this one
#   bench/instructions.sh --also counts=target/release/libdmem.so@count-allocs   an option's cost
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
-h | --help) exec python3 bench/instructions.py --help ;;
esac
. bench/build_paths.sh
exec python3 bench/instructions.py \
    --lib "$target_dir/release/libdmem.so" \
    --storm "$out_dir/fixtures/bench_storm" \
    --floor "$out_dir/fixtures/libheader_floor.so" \
    --cxxmap "$out_dir/fixtures/bench_cxxmap" "$@"
