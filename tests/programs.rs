//! Real installed programs run with libdmem preloaded (alone and over each backend allocator):
//! exit status, stdout and whatever files the run leaves behind must be identical to the bare
//! run. A program that is not installed is skipped, saying so.

mod common;
#[path = "common/run.rs"]
mod run;

use run::{assert_none, bare, mismatch, run_limited, status_text, with_dmem, LIMIT};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One program run. It runs in a fresh directory prepared by `setup`, at the same path for the
/// bare and the preloaded run, so outputs that name paths still compare equal.
struct Case {
    name: &'static str,
    /// Programs that must be installed, the first being the one run.
    needs: &'static [&'static str],
    args: &'static [&'static str],
    setup: fn(&Path),
    /// What the run left behind, compared as well (e.g. the output of a program it compiled).
    result: fn(&Path) -> String,
}

fn nothing(_: &Path) {}
fn no_result(_: &Path) -> String {
    String::new()
}

const BASH_SCRIPT: &str = r#"
s=""
for i in $(seq 1 60); do
    x=$( (echo "$i"; echo sub) | tr a-z A-Z )
    s="$s$x"
done
echo "${#s}"
declare -A m
for i in {1..2000}; do m[k$i]=$((i * i)); done
echo "${#m[@]} ${m[k1999]}"
words=()
for i in {1..1500}; do words+=("w$((i % 97))"); done
printf '%s\n' "${words[@]}" | sort | uniq -c | sort -rn | head -3
( cd /; pwd ) ; f() { local v="$1$1"; echo "${v:0:10}"; } ; f abcdefgh
"#;

const PYTHON_SCRIPT: &str = r#"
import collections, json
d = {}
for i in range(60000):
    d["k%d" % (i % 5000)] = [i] * (i % 7)
    if i % 3 == 0:
        d.pop("k%d" % ((i * 7) % 5000), None)
lst = [str(i) * (i % 13) for i in range(20000)]
lst.sort(key=lambda s: (len(s), s))
c = collections.Counter(len(s) for s in lst)
text = json.dumps({k: len(v) for k, v in sorted(d.items())})
print(len(d), sum(len(v) for v in d.values()), len(text), sorted(c.items())[:5])
print(sum(hash(s) % 7 for s in ["a", "b"]) >= 0, len(set(lst)))
"#;

const PERL_SCRIPT: &str = r#"
my %h;
for my $i (1..200000) { $h{"k" . ($i % 7000)} .= chr(65 + $i % 26); delete $h{"k" . ($i * 7 % 7000)} if $i % 5 == 0; }
my @k = sort keys %h;
my $total = 0; $total += length($h{$_}) for @k;
my @parts = map { join(",", reverse split //, $_) } @k[0..99];
print scalar(@k), " $total ", length(join("", @parts)), "\n";
my $s = "x" x 100000; $s =~ s/x{3}/yz/g; print length($s), "\n";
"#;

/// The git session: a repository made, changed and inspected, with fixed names and dates so
/// every run prints the same commit ids.
const GIT_SCRIPT: &str = r#"
set -e
export HOME="$PWD" GIT_CONFIG_NOSYSTEM=1 TZ=UTC
export GIT_AUTHOR_NAME=Tester GIT_AUTHOR_EMAIL=tester@example.com GIT_AUTHOR_DATE="2020-01-10T12:00:00Z"
export GIT_COMMITTER_NAME=Tester GIT_COMMITTER_EMAIL=tester@example.com GIT_COMMITTER_DATE="2020-01-10T12:00:00Z"
git init -q repo
cd repo
git checkout -q -b main
printf 'hello\n' > a.txt
seq 1 2000 > numbers.txt
mkdir dir && printf 'nested\n' > dir/b.txt
git add .
git commit -q -m first
printf 'world\n' >> a.txt
seq 1000 3000 > numbers.txt
git commit -q -am second
git log --stat
git diff --stat HEAD~1
git cat-file -p HEAD
git ls-tree -r HEAD
git fsck --no-progress --strict
"#;

fn write_sort_input(dir: &Path) {
    let mut text = String::new();
    let mut x: u64 = 1;
    for i in 0..150_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        writeln!(text, "word{} {} {}", (x >> 33) % 10_000, (x >> 20) % 1000, i % 7).unwrap();
    }
    std::fs::write(dir.join("data.txt"), text).unwrap();
}

const HELLO_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item { int key; char name[16]; };
static int cmp(const void *a, const void *b) { return ((const struct item *)a)->key - ((const struct item *)b)->key; }
int main(void) {
    struct item v[100];
    for (int i = 0; i < 100; i++) { v[i].key = (i * 37) % 101; snprintf(v[i].name, sizeof v[i].name, "item%d", i); }
    qsort(v, 100, sizeof v[0], cmp);
    for (int i = 0; i < 100; i += 20) printf("%d %s\n", v[i].key, v[i].name);
    return 0;
}
"#;

fn write_hello(dir: &Path) {
    std::fs::write(dir.join("hello.c"), HELLO_C).unwrap();
}

/// What gcc produced: the program's output when run (bare), and its bytes.
fn hello_result(dir: &Path) -> String {
    let exe = dir.join("hello");
    let Ok(bytes) = std::fs::read(&exe) else {
        return "no program produced".into();
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let out = run_limited(&mut bare(&exe, &[]), LIMIT);
    format!(
        "{} bytes, hash {:x}, {}: {}",
        bytes.len(),
        h.finish(),
        status_text(&out.status),
        common::text(&out.stdout)
    )
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "ls",
            needs: &["ls"],
            args: &["-la", "/usr/lib"],
            setup: nothing,
            result: no_result,
        },
        Case {
            name: "bash",
            needs: &["bash", "seq", "tr", "sort", "uniq", "head"],
            args: &["-c", BASH_SCRIPT],
            setup: nothing,
            result: no_result,
        },
        Case {
            name: "python3",
            needs: &["python3"],
            args: &["-c", PYTHON_SCRIPT],
            setup: nothing,
            result: no_result,
        },
        Case {
            name: "perl",
            needs: &["perl"],
            args: &["-e", PERL_SCRIPT],
            setup: nothing,
            result: no_result,
        },
        Case {
            name: "sort",
            needs: &["sort"],
            // A small buffer makes sort spill to temporary files and merge them, with threads.
            args: &[
                "-S",
                "256K",
                "--parallel=2",
                "-T",
                ".",
                "-k2,2n",
                "-k1,1",
                "-k3,3r",
                "data.txt",
            ],
            setup: write_sort_input,
            result: no_result,
        },
        Case {
            name: "gcc",
            needs: &["gcc"],
            args: &["-O2", "-Wall", "-o", "hello", "hello.c"],
            setup: write_hello,
            result: hello_result,
        },
        Case {
            name: "git",
            needs: &["bash", "git", "seq"],
            args: &["-c", GIT_SCRIPT],
            setup: nothing,
            result: no_result,
        },
    ]
}

/// The program to run: Debian's python3 when there is one, whatever PATH finds otherwise.
fn find(tool: &str) -> Option<PathBuf> {
    let system = Path::new("/usr/bin").join(tool);
    if system.is_file() {
        return Some(system);
    }
    common::which(tool)
}

fn run_case(
    case: &Case,
    dir: &Path,
    preload: Option<(&str, Option<&Path>)>,
) -> (std::process::Output, String) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    (case.setup)(dir);
    let prog = find(case.needs[0]).unwrap();
    let mut cmd: Command = match preload {
        None => bare(&prog, case.args),
        Some((opts, backend)) => with_dmem(&prog, case.args, opts, backend),
    };
    cmd.current_dir(dir)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .env("PYTHONMALLOC", "malloc");
    let out = run_limited(&mut cmd, LIMIT);
    let result = (case.result)(dir);
    (out, result)
}

/// Runs every installed program bare and preloaded with `opts` over `backend`.
fn compare_programs(tag: &str, opts: &str, backend: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases() {
        if let Some(missing) = case.needs.iter().find(|t| find(t).is_none()) {
            eprintln!("skipped {}: {missing} is not installed", case.name);
            continue;
        }
        let dir = common::scratch_dir(&format!("programs_{tag}_{}", case.name));
        let (want, want_result) = run_case(&case, &dir, None);
        if !want.status.success() {
            failures.push(format!(
                "{}: fails without libdmem ({}): {}",
                case.name,
                status_text(&want.status),
                common::text(&want.stderr)
            ));
            continue;
        }
        let (got, got_result) = run_case(&case, &dir, Some((opts, backend)));
        if let Some(why) = mismatch(&want, &got) {
            failures.push(format!("{}: {why}", case.name));
        } else if got_result != want_result {
            failures.push(format!(
                "{}: left {got_result:?}, bare run left {want_result:?}",
                case.name
            ));
        }
    }
    failures
}

#[test]
fn programs_match_bare_run() {
    assert_none("programs", &compare_programs("default", "", None));
}

#[test]
fn programs_match_bare_run_while_tracing() {
    // Every call formats a trace line; /dev/null keeps the output out of the comparison.
    assert_none(
        "programs, tracing",
        &compare_programs("trace", "trace-file=/dev/null", None),
    );
}

fn over_backend(name: &str) {
    let Some((_, lib)) = common::backends().into_iter().find(|(n, _)| *n == name) else {
        eprintln!("skipped: backend {name} is not installed");
        return;
    };
    assert_none(
        &format!("programs over {name}"),
        &compare_programs(name, "", Some(&lib)),
    );
}

#[test]
fn programs_match_bare_run_over_jemalloc() {
    over_backend("jemalloc");
}

#[test]
fn programs_match_bare_run_over_tcmalloc() {
    over_backend("tcmalloc");
}

#[test]
fn programs_match_bare_run_over_mimalloc() {
    over_backend("mimalloc");
}
