#!/bin/sh
# The live reader's bench (`dmem top`): how long one read of 1,000,000 live blocks takes, and
# how much allocation throughput a busy process loses while it is read every second. See
# bench/live_read.py for the details and options (`--help`).
#
#   bench/live_read.sh              both measurements, about two minutes
#   bench/live_read.sh --rounds 5   more rounds, for a noisy machine
set -eu
cd "$(dirname "$0")/.."
. bench/build_paths.sh
exec python3 bench/live_read.py \
    --dmem "$target_dir/release/dmem" \
    --lib "$target_dir/release/libdmem.so" \
    --fixtures "$out_dir/fixtures" "$@"
