# shellcheck shell=sh
# Sourced by the bench scripts: builds release, the library and launcher and the test fixtures
# (package dmem-fixtures), and sets `out_dir` (where build.rs put the fixtures, in `fixtures/`)
# and `target_dir` (where the library and the launcher are), which those scripts read.
# shellcheck disable=SC2034
out_dir=$(cargo build --release -p dmem -p dmem-launcher -p dmem-fixtures --message-format=json-render-diagnostics |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "build-script-executed" and "/dmem-fixtures-" in m.get("out_dir", ""):
        print(m["out_dir"])')
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
