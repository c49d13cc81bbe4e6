#!/bin/sh
# The exit report of CPython without suppressions and with 1,000 patterns; see
# bench/suppressions.py (`--help`). BASE_LIB=path/to/libdmem.so adds a library without
# suppression support as the baseline of "nothing paid without suppressions".
#
#   bench/suppressions.sh [--rounds N]
set -eu
cd "$(dirname "$0")/.."
. bench/build_paths.sh
exec python3 bench/suppressions.py --lib "$target_dir/release/libdmem.so" ${BASE_LIB:+--base-lib "$BASE_LIB"} "$@"
