"""Checks that the README's commands share one build.

Usage: one_build.py DEMO BUILD TEST, each file the `--message-format=json` output of, in turn,
`cargo run --release --bin dmem -- demo`, `cargo build --release` and
`cargo test --release --no-run` (the demo's own output mixed in is skipped). Fails when the
build compiled anything, when the demo compiled a crate the build does not use (another
variant: other features or profile), or when the tests compiled again a crate the build had
built, rather than only test targets and the tests' own dependencies. Cargo resolves a crate's
features over the packages and targets each command selects, so a dependency added to one
package can make the next command build everything above it a second time; this says which.
"""

import json
import os
import re
import sys

# The hash cargo puts in the name of what it compiles, one per variant of a unit (features,
# dependencies, profile); the libraries and binaries it copies up to target/release have none.
HASH = re.compile(r"-([0-9a-f]{16})(?:\.|$)")


def artifacts(path):
    """The compiler-artifact messages of a cargo JSON stream."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith('{"reason":'):
                continue
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact":
                out.append(msg)
    return out


def key(msg):
    """A unit as the user sees it: package, target and kind, whatever its features."""
    return (msg["package_id"], msg["target"]["name"], tuple(msg["target"]["kind"]))


def hashes(msg):
    return {h for f in msg["filenames"] for h in HASH.findall(os.path.basename(f))}


def name(msg):
    pkg = msg["package_id"].rsplit("#", 1)[-1]
    return "%s (%s %s)" % (pkg, "/".join(msg["target"]["kind"]), msg["target"]["name"])


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    demo, build, test = (artifacts(p) for p in argv[1:])
    if not build:
        sys.exit("one_build: no artifacts in %s: not cargo's JSON output?" % argv[2])
    problems = []
    for m in build:
        if not m["fresh"]:
            problems.append("cargo build --release compiled %s again after the demo" % name(m))
    built_hashes = {}
    for m in build:
        built_hashes.setdefault(key(m), set()).update(hashes(m))
    for m in demo:
        if not hashes(m) <= built_hashes.get(key(m), set()):
            problems.append(
                "the demo compiled a variant of %s that cargo build --release does not use"
                % name(m)
            )
    built = set(built_hashes)
    for m in test:
        if m["profile"]["test"] or key(m) not in built:
            continue
        if not m["fresh"] or not hashes(m) <= built_hashes[key(m)]:
            problems.append(
                "cargo test --release uses another build of %s than cargo build --release" % name(m)
            )
    for p in problems:
        print("one_build: " + p, file=sys.stderr)
    if problems:
        sys.exit(
            "one_build: the README's commands do not share one build; compare "
            "`cargo tree -e features -i CRATE` with and without --workspace or -e dev"
        )
    compiled = sum(1 for m in test if not m["fresh"])
    print(
        "one_build: cargo build compiled none of its %d units; cargo test compiled %d of its own"
        % (len(build), compiled)
    )


if __name__ == "__main__":
    main(sys.argv)
