#!/usr/bin/env bash
# The README's two commands timed from a fresh clone: `cargo run --release --bin dmem -- demo`
# from nothing, then the build half of the second command (`cargo build --release`, then
# `cargo test --release --no-run`, the compiling `cargo test --release` does before it runs the
# tests). Each step prints its wall time and the crates cargo compiled in it: after the demo the
# build should compile nothing, and the tests only the test targets, the C fixtures and the
# tests' own dependencies. The crates come from the registry cache (`cargo fetch` first, not
# timed), so the times are compilation alone. See bench/README.md ("A fresh clone's build").
#
#   bench/cold_build.sh            the committed HEAD
#   bench/cold_build.sh REV        another commit, e.g. to time a change against its parent
#   KEEP=1 bench/cold_build.sh     leaves the clone and its target directory, and says where
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$(git rev-parse --verify "${1:-HEAD}^{commit}")
work=$(mktemp -d "${TMPDIR:-/tmp}/dmem-cold.XXXXXX")
cleanup() {
    if [ -n "${KEEP:-}" ]; then
        echo "kept: $work/dmem"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
git clone -q --no-checkout . "$work/dmem"
cd "$work/dmem"
git checkout -q "$rev"
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR
cargo fetch -q

echo "commit $(git log -1 --format='%h %s' | cut -c1-80)"
echo "$(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# step NAME COMMAND...: runs the command, its output kept aside, and prints its wall time, the
# processor time of everything it ran (user and system; on a loaded machine the wall time
# stretches, this much less), and the crates it compiled.
step() {
    local name=$1
    shift
    local TIMEFORMAT='%R %U %S' times
    if ! times=$({ time "$@" >"$work/$name.out" 2>"$work/$name.err"; } 2>&1); then
        echo "$name: '$*' failed:" >&2
        tail -n 20 "$work/$name.err" >&2
        exit 1
    fi
    local crates wall user sys
    crates=$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' "$work/$name.err" | sort | tr '\n' ' ')
    read -r wall user sys <<<"$times"
    printf '%-6s %6.1f s wall %6.1f s cpu  %3d compiled: %s\n' "$name" "$wall" \
        "$(awk "BEGIN { print $user + $sys }")" "$(wc -w <<<"$crates")" "${crates:-nothing}"
}

step demo cargo run --release --bin dmem -- demo
step build cargo build --release
step test cargo test --release --no-run
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
