#!/usr/bin/env bash
# Installs what the tests and the lints need and a fresh Debian machine lacks, then returns; the
# README's test command runs it first. Nothing is installed when everything is there already.
set -euo pipefail

# PACKAGE, or PACKAGE:PROGRAM when the program may come from elsewhere (Node from NodeSource or
# nvm, a JDK unpacked by hand): then the program on PATH is enough, and Debian's package is only
# installed when it is absent.
packages=(gdb gcc g++ binutils libjemalloc2 libgoogle-perftools4 libmimalloc2.0 python3
    python3-venv python3-protobuf python3-pyflakes shellcheck valgrind:valgrind default-jdk-headless:javac
    nodejs:node sqlite3:sqlite3 openssl:openssl jq:jq vim:vim openssh-client:ssh-keygen xz-utils:xz
    git:git perl:perl apt:apt-cache curl:curl golang-go:go prometheus:prometheus gawk:gawk tcl:tclsh
    make:make strace:strace gnupg:gpg chromium:chromium debuginfod:debuginfod libc6-dbg groff-base:troff)
missing=()
for entry in "${packages[@]}"; do
    p=${entry%%:*}
    prog=${entry#"$p"}
    prog=${prog#:}
    if [ -n "$prog" ] && command -v "$prog" >/dev/null; then
        continue
    fi
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
# Package lists are fetched once per run, before the first install.
updated=no
install() {
    echo "installing: $*"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    if [ "$updated" = no ]; then
        "${sudo[@]}" apt-get update
        updated=yes
    fi
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "$@"
}
if [ ${#missing[@]} -gt 0 ]; then
    install "${missing[@]}"
fi

# CPython's own test suite (tests/invisible.rs runs its test_subprocess preloaded), for the
# python3 on PATH, unless it has it already.
if ! python3 -c 'import test.test_subprocess' 2>/dev/null; then
    install "libpython3.$(python3 -c 'import sys; print(sys.version_info.minor)')-testsuite"
fi

# The lints: rustfmt and clippy come with rustup's default profile; add them where they do not.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
fi

# ValgrindCI, a CI viewer of valgrind's XML that the XML test reads dmem's with: from PyPI, into a
# virtual environment of its own under target/ (Debian's python3 takes no packages from pip
# outside one), where tests/suppressions.rs looks for it.
venv="$(cd "$(dirname "$0")/.." && pwd)/target/ci-venv"
if [ ! -x "$venv/bin/valgrind-ci" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check valgrindci==0.3.0
fi
