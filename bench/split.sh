#!/bin/sh
# Where recording's time goes: builds the library once more with the unwinding taken away (the
# bench-no-unwind feature, never in a library a user preloads) and runs it beside the full
# library, the header floor and no-log-allocs in one interleaved run.
# The differences between the rows are the split; see bench/README.md.
#
#   bench/split.sh               all three workloads, 5 runs each
#   bench/split.sh --runs 9      more runs
#   bench/split.sh --only python one workload
set -eu
cd "$(dirname "$0")/.."
. bench/build_paths.sh
runs=5
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "split.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
cargo build --release -p dmem --lib --quiet --features bench-no-unwind --target-dir "$target_dir/bench-no-unwind"
for workload in storm python cxxmap; do
    [ -z "$only" ] || [ "$only" = "$workload" ] || continue
    python3 bench/harness.py --lib "$target_dir/release/libdmem.so" \
        --storm "$out_dir/fixtures/bench_storm" --floor "$out_dir/fixtures/libheader_floor.so" \
        --cxxmap "$out_dir/fixtures/bench_cxxmap" --only "$workload" --runs "$runs" \
        --tools dmem,dmem-nostacks,header-floor \
        --also "dmem-no-unwind=$target_dir/bench-no-unwind/release/libdmem.so"
done
