#!/bin/sh
# The overhead bench: builds the release library, then runs each workload bare and under each
# installed tool several times and prints the median wall-clock (and CPU) time against the bare
# run. See bench/harness.py for the workloads, the tools and the options (`--help`).
#
#   bench/run.sh                 the default comparison, a few minutes
#   bench/run.sh --runs 9        more runs per measurement, for a noisy machine
set -eu
cd "$(dirname "$0")/.."
# The harness takes bench_storm, bench_cxxmap and libheader_floor.so from the fixtures build.rs
# made.
. bench/build_paths.sh
exec python3 bench/harness.py \
    --lib "$target_dir/release/libdmem.so" \
    --storm "$out_dir/fixtures/bench_storm" \
    --floor "$out_dir/fixtures/libheader_floor.so" \
    --cxxmap "$out_dir/fixtures/bench_cxxmap" "$@"
