//! Leak classes on real programs doing real work, from Debian's packages, with valgrind's
//! memcheck run by the test as the oracle: the block count of every class must be equal at exit
//! (the exit report) and from a core of the same run (`dmem leaks CORE`, the program named by
//! the core's notes), and neither the report nor the core's scan may warn of an overwritten heap,
//! a main_arena not found or roots it could not read. The workloads keep malloc'd blocks
//! reachable only from memory of their own (CPython's pymalloc arenas, perl's op slabs), keep
//! interior pointers that memcheck's heuristics accept, register many C++ destructors, close
//! stderr at exit, fork children whose brk heap grows as a second mapping, dlopen modules,
//! leave a lost list behind an `exit` from deep in a shell's evaluation, and free so much that
//! most of glibc's bins hold chunks.
//!
//! Both runs get the same environment, since bash, perl, make and gawk copy every variable into
//! blocks of their own: a small one of PATH, HOME, PWD (the directory each run starts in, which
//! shells check against the real one), DMEM_LIB and DMEM_OPTS; and valgrind adds variables to its
//! client's (libstdc++'s GLIBCXX_FORCE_NEW, Debian's LD_LIBRARY_PATH of debug libraries), so
//! dmem's run gets those too. Both run in one directory, on the same files, since tar and make
//! keep hash tables of files by inode whose collisions depend on them; what the first run wrote
//! there (a key, an archive, gpg's state) is taken away before the second.
//!
//! The cores are `abort-shutdown`'s, through `dmem run`, which aborts only the process it
//! started, not the children it forks or starts (make's recipes, tar's gzip, CPython's
//! subprocess, a shell's subshells), so the program sees them exit as under valgrind. gpg turns
//! core dumps off itself: it runs with `leak-report` alone under gdb, which writes its core as
//! it makes its final `exit_group`, in the exit report's own thread. The workloads run two at a
//! time.

mod common;
use common::run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{dmem, have_tool, output, reported_core, scratch_dir, text, which};
use run::{run_limited, LIMIT};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use valgrind::{last_report_summary, Summary};

/// How a workload's core is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Core {
    /// `abort-shutdown`, through `dmem run`.
    Abort,
    /// `leak-report` alone, under gdb, which writes the core at the final `exit_group`: for a
    /// program that turns core dumps off.
    AtExit,
}

/// A real program doing some work: on PATH (or an absolute path), with its arguments, extra
/// variables, the files it needs made in its directory first, the directory under it that it
/// runs in (where the kernel writes its core), and how its core is made.
struct Workload {
    name: &'static str,
    prog: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    setup: fn(&Path),
    cwd: &'static str,
    core: Core,
}

const CORPUS: &[Workload] = &[
    // Debian's CPython, pymalloc on: its objects live in arenas it maps itself. Threads, a child
    // process, and modules loaded with dlopen.
    Workload {
        name: "python3-threads",
        prog: "/usr/bin/python3",
        args: &["-c", PY_THREADS],
        env: &[],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "python3-malloc",
        prog: "/usr/bin/python3",
        args: &["-c", PY_OBJECTS],
        env: &[("PYTHONMALLOC", "malloc")],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    // Length-prefixed blocks (memcheck's length64 heuristic), 10,000 rows and an index.
    Workload {
        name: "sqlite3",
        prog: "sqlite3",
        args: &[":memory:", SQL],
        env: &[],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    // perl with JSON::PP and Data::Dumper; its hash seed fixed, so both runs build one heap.
    // glibc fills what it hands out (and takes back) with a byte pattern: a buffer perl fills
    // only in part keeps no stale pointer from the chunk's last use, as under valgrind, whose
    // allocator holds freed memory back long before reusing it. Without the fill, a 10-byte
    // string over a stale heap pointer made one lost block possibly lost in most runs from
    // some directories (the path's length moves the heap's contents).
    Workload {
        name: "perl",
        prog: "perl",
        args: &["json.pl"],
        env: &[
            ("PERL_HASH_SEED", "0"),
            ("PERL_PERTURB_KEYS", "0"),
            ("GLIBC_TUNABLES", "glibc.malloc.perturb=85"),
        ],
        setup: perl_files,
        cwd: "",
        core: Core::Abort,
    },
    // Arrays, an associative array, command substitutions and subshells.
    Workload {
        name: "bash-arrays",
        prog: "bash",
        args: &["arrays.sh"],
        env: &[],
        setup: bash_files,
        cwd: "",
        core: Core::Abort,
    },
    // A forked subshell that grows its brk heap, which the kernel then maps as a second
    // mapping beside the first.
    Workload {
        name: "bash-subshell-heap",
        prog: "bash",
        args: &["grow.sh"],
        env: &[("N", "300"), ("PAD", "1")],
        setup: bash_files,
        cwd: "",
        core: Core::Abort,
    },
    // A version file read the way pyenv reads one: the `exit` leaves a lost list in the dead
    // frames glibc's exit path is laid over.
    Workload {
        name: "bash-version-file",
        prog: "bash",
        args: &["version.sh", "version"],
        env: &[],
        setup: bash_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "make",
        prog: "make",
        args: &["-s", "-j1"],
        env: &[],
        setup: make_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "tar",
        prog: "tar",
        args: &["czf", "out.tgz", "a.txt", "b.txt", "tree"],
        env: &[],
        setup: text_and_tree,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "sed",
        prog: "sed",
        args: &["-E", "s/([a-z]+) ([0-9]+)/\\2 \\1/g; /9/d", "a.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "gawk",
        prog: "gawk",
        args: &["-f", "prog.awk", "a.txt"],
        env: &[],
        setup: awk_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "vim",
        prog: "vim",
        args: &[
            "-es",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-c",
            "%s/fox/cat/g",
            "-c",
            "sort",
            "-c",
            "w! out.txt",
            "-c",
            "q!",
            "a.txt",
        ],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "git-log",
        prog: "git",
        args: &["log", "--stat", "--oneline"],
        env: &[],
        setup: git_repo,
        cwd: "repo",
        core: Core::Abort,
    },
    Workload {
        name: "git-status",
        prog: "git",
        args: &["status", "--porcelain"],
        env: &[],
        setup: git_repo,
        cwd: "repo",
        core: Core::Abort,
    },
    // A JIT, threads of its own and a garbage-collected heap.
    Workload {
        name: "node",
        prog: "node",
        args: &["--predictable", "-e", NODE],
        env: &[],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "jq",
        prog: "jq",
        args: &["map(.a) | add", "data.json"],
        env: &[],
        setup: json_file,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "diff",
        prog: "diff",
        args: &["a.txt", "b.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "find",
        prog: "find",
        args: &["tree", "-name", "*3*", "-type", "f"],
        env: &[],
        setup: text_and_tree,
        cwd: "",
        core: Core::Abort,
    },
    // gpg turns core dumps off itself: gdb writes its core.
    Workload {
        name: "gpg",
        prog: "gpg",
        args: &["--homedir", "gnupg", "--batch", "--print-md", "SHA256", "a.txt"],
        env: &[],
        setup: gpg_home,
        cwd: "",
        core: Core::AtExit,
    },
    Workload {
        name: "tclsh",
        prog: "tclsh",
        args: &["prog.tcl"],
        env: &[],
        setup: tcl_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "ssh-keygen",
        prog: "ssh-keygen",
        args: &["-q", "-t", "ed25519", "-N", "", "-C", "corpus", "-f", "key"],
        env: &[],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "xz",
        prog: "xz",
        args: &["-6", "-k", "-c", "a.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "openssl",
        prog: "openssl",
        args: &["dgst", "-sha256", "a.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    // C++ with the standard library's strings and containers, and over 32 static destructors
    // registered before libdmem's exit handler.
    Workload {
        name: "apt-cache",
        prog: "apt-cache",
        args: &["--version"],
        env: &[],
        setup: nothing,
        cwd: "",
        core: Core::Abort,
    },
    // gnulib programs: they close stdout and stderr at exit.
    Workload {
        name: "ls",
        prog: "ls",
        args: &["-laR", "tree"],
        env: &[],
        setup: text_and_tree,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "grep",
        prog: "grep",
        args: &["-c", "-E", "fox [0-9]+5 ", "a.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
    Workload {
        name: "sort",
        prog: "sort",
        args: &["-k3", "a.txt"],
        env: &[],
        setup: text_files,
        cwd: "",
        core: Core::Abort,
    },
];

const PY_THREADS: &str = "import json, queue, subprocess, threading, zlib
q = queue.Queue()
def work(n):
    q.put(zlib.crc32(json.dumps([i * i for i in range(n)]).encode()))
threads = [threading.Thread(target=work, args=(20000,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(q.qsize(), subprocess.run(['true']).returncode)
";

const PY_OBJECTS: &str = "import collections, json
counts = collections.Counter(str(i % 97) for i in range(5000))
print(len(json.dumps(counts)))
";

const SQL: &str = "create table t(a integer primary key, b text); \
    with recursive c(x) as (select 1 union all select x + 1 from c where x < 10000) \
    insert into t(a, b) select x, 'row ' || x from c; \
    create index tb on t(b); select count(*), sum(a), max(b) from t;";

const NODE: &str = "const a = []; for (let i = 0; i < 2000; i++) a.push({i, s: 'x'.repeat(i % 50)}); \
    console.log(JSON.stringify(a).length)";

fn nothing(_: &Path) {}

fn write(dir: &Path, name: &str, contents: &str) {
    std::fs::write(dir.join(name), contents).unwrap_or_else(|e| panic!("write {name}: {e}"));
}

fn prose(lines: usize, edit: bool) -> String {
    (0..lines)
        .map(|i| {
            let (animal, other) = if edit && i % 7 == 0 {
                ("cat", "hen")
            } else {
                ("fox", "dog")
            };
            format!(
                "line {i}: the quick brown {animal} {} jumps over the lazy {other} {}\n",
                i * 7,
                i * 13
            )
        })
        .collect()
}

fn text_files(dir: &Path) {
    write(dir, "a.txt", &prose(3000, false));
    write(dir, "b.txt", &prose(3000, true));
}

/// The text files, and a tree of 4 by 4 directories holding 5 files each.
fn text_and_tree(dir: &Path) {
    text_files(dir);
    for i in 0..4 {
        for j in 0..4 {
            let d = dir.join(format!("tree/d{i}/e{j}"));
            std::fs::create_dir_all(&d).unwrap();
            for k in 0..5 {
                write(&d, &format!("f{i}{j}{k}.txt"), &prose(10 * k, false));
            }
        }
    }
}

fn awk_files(dir: &Path) {
    text_files(dir);
    write(
        dir,
        "prog.awk",
        r#"{ n = split($0, w, " "); for (i = 1; i <= n; i++) count[w[i]]++; line[NR] = toupper($3) }
/fox [0-9]*7 / { s = $0; gsub(/o/, "0", s); keep[NR] = s }
END { for (k in count) total += count[k]; printf "%d words, %d distinct, %d kept\n", total, length(count), length(keep) }
"#,
    );
}

fn perl_files(dir: &Path) {
    write(
        dir,
        "json.pl",
        r#"use JSON::PP; use Data::Dumper;
my $d = {a => [1..100], b => {map {$_ => $_ * 2} 1..200}};
my $j = JSON::PP->new->canonical->encode($d);
my $back = decode_json($j);
$Data::Dumper::Sortkeys = 1;
print length(Dumper($back)), "\n";
"#,
    );
}

fn bash_files(dir: &Path) {
    write(
        dir,
        "arrays.sh",
        r#"declare -a arr
declare -A map
for i in $(seq 1 300); do printf -v p '%05d' "$i"; arr[$i]="item $i $p"; map["k$i"]=$((i * i)); done
sub=( $(for i in 1 2 3; do echo "$i"; done) )
( for k in "${!map[@]}"; do v=${map[$k]}; done; echo "subshell ${#arr[@]}" )
f() { local -a loc=("$@"); echo "${#loc[@]}"; }
f "${arr[@]}"
x=$(f a b c)
unset 'arr[5]'
echo "done ${#arr[@]} ${#map[@]} $x ${#sub[@]}"
"#,
    );
    write(
        dir,
        "grow.sh",
        "( x=$(printf \"%0${PAD}d\" 0); for i in $(seq 1 $N); do arr[$i]=x$i$x; done; : )\n",
    );
    write(
        dir,
        "version.sh",
        r#"set -e
file="$1"
usable() {
  if [[ "$1" == ".." || "$1" == */* ]]; then
    ( cd "/nonexistent/$1" &>/dev/null || exit 1 )
    return $?
  fi
  return 0
}
if [ -s "$file" ]; then
  IFS="$IFS"$'\r'
  sep=
  while read -n 1024 -r word _ || [[ $word ]]; do
    if [[ -z "$word" || "$word" == \#* ]]; then
      continue
    elif ! usable "$word"; then
      echo "ignored $word" >&2
      continue
    fi
    printf "%s%s" "$sep" "$word"
    sep=:
  done <"$file"
  [[ $sep ]] && { echo; exit; }
fi
exit 1
"#,
    );
    write(dir, "version", "# a comment\n\n3.11.2\nsystem\n../elsewhere\n");
}

fn make_files(dir: &Path) {
    let mut rules = String::from("all: t59\n");
    for i in 0..60 {
        let deps: Vec<String> = (i.max(3) - 3..i).map(|j| format!("t{j}")).collect();
        rules += &format!("t{i}: {}\n\t@echo $@ from $^ > /dev/null\n", deps.join(" "));
    }
    write(dir, "Makefile", &rules);
}

fn json_file(dir: &Path) {
    let items: Vec<String> = (0..3000)
        .map(|i| {
            format!(
                "{{\"a\": {i}, \"b\": \"{}\", \"c\": [{i}, {}]}}",
                "x".repeat(i % 50),
                i + 1
            )
        })
        .collect();
    write(dir, "data.json", &format!("[{}]", items.join(", ")));
}

fn tcl_files(dir: &Path) {
    write(
        dir,
        "prog.tcl",
        "set d [dict create]
for {set i 0} {$i < 2000} {incr i} { dict set d k$i [string repeat x [expr {$i % 40}]] }
set l {}
foreach k [lsort [dict keys $d]] { lappend l [string length [dict get $d $k]] }
puts [llength $l]
",
    );
}

fn gpg_home(dir: &Path) {
    text_files(dir);
    let home = dir.join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
}

/// A repository of 20 commits made with the system's git, every file dated in the past as it
/// is written, before git records it: a file whose change time is later than the index's makes
/// the first `git status` refresh and write the index, and only that one.
fn git_repo(dir: &Path) {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = output(
            Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", dir)
                .env("GIT_AUTHOR_NAME", "corpus")
                .env("GIT_AUTHOR_EMAIL", "corpus@example.org")
                .env("GIT_COMMITTER_NAME", "corpus")
                .env("GIT_COMMITTER_EMAIL", "corpus@example.org")
                .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
                .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z"),
        );
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800);
    let dated = |name: &str, contents: &str| {
        write(&repo, name, contents);
        let f = std::fs::File::options()
            .write(true)
            .open(repo.join(name))
            .unwrap();
        f.set_modified(past).unwrap();
    };
    git(&["init", "-q"]);
    let all = prose(3000, false);
    for i in 0..20 {
        dated(&format!("f{}.txt", i % 5), &all[..1000 * (i + 1)]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", &format!("commit {i}")]);
    }
    dated("untracked.txt", "new\n");
    dated("f0.txt", "changed\n");
}

/// Every file and directory under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

fn block_counts(s: &Summary) -> [u64; 4] {
    s.map(|(blocks, _)| blocks)
}

fn program(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        Some(PathBuf::from(name)).filter(|p| p.exists())
    } else {
        which(name)
    }
}

/// The environment both runs share, less DMEM_OPTS and PWD; DMEM_LIB tells `dmem run` which
/// library to preload.
fn base_environment() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    env.push(("DMEM_LIB".into(), common::lib_path().display().to_string()));
    env
}

/// The variables valgrind puts in its client's environment beyond `base`, asked of valgrind
/// itself (LD_PRELOAD aside, which each tool sets to its own, and PWD, which Debian's valgrind
/// script sets to where it runs).
fn valgrinds_additions(base: &[(String, String)]) -> Vec<(String, String)> {
    let mut cmd = Command::new("valgrind");
    cmd.args(["-q", "/usr/bin/env", "-0"])
        .env_clear()
        .envs(base.iter().map(|(k, v)| (k, v)));
    let out = run_limited(&mut cmd, LIMIT);
    text(&out.stdout)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .filter(|&(k, v)| k != "LD_PRELOAD" && k != "PWD" && !base.iter().any(|(bk, bv)| bk == k && bv == v))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What `dmem leaks --json CORE` says: the four classes' block counts, and whatever it notes or
/// warns of (a main_arena not found, roots it could not read, a broken list).
fn core_counts(core: &Path) -> Result<([u64; 4], Vec<String>), String> {
    let out = output(dmem().args(["leaks", "--json", "--limit", "1"]).arg(core));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("dmem leaks gave no JSON ({e}): {}", text(&out.stderr)))?;
    let mut n = [0; 4];
    for (slot, key) in n.iter_mut().zip([
        "definitely_lost",
        "indirectly_lost",
        "possibly_lost",
        "still_reachable",
    ]) {
        *slot = json[key]["blocks"]
            .as_u64()
            .ok_or_else(|| format!("no {key} in {json}"))?;
    }
    let mut said: Vec<String> = [
        &json["notes"],
        &json["warnings"],
        &json["roots"]["unreadable"],
        &json["problems"],
    ]
    .iter()
    .filter_map(|v| v.as_array())
    .flatten()
    .map(|v| v.to_string())
    .collect();
    said.extend(text(&out.stderr).lines().map(str::to_owned));
    Ok((n, said))
}

/// The lines of an exit report that say something is wrong with the heap or the scan.
fn report_warnings(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| l.contains("overwritten") || l.contains("main_arena"))
        .collect()
}

/// `dir` made afresh and set up for `w`; where `w` runs in it.
fn fresh(dir: &Path, w: &Workload) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    (w.setup)(dir);
    dir.join(w.cwd)
}

/// The program run in `dir` under gdb with `opts`, stopped as it makes its final exit_group and
/// written to a core in `core_dir` with gcore; the core's path, or why there is none.
fn core_at_exit(
    dir: &Path,
    core_dir: &Path,
    prog: &Path,
    args: &[&str],
    env: &[(String, String)],
    opts: &str,
) -> Result<PathBuf, String> {
    let core = core_dir.join("core.at-exit");
    let lib = common::lib_path();
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx", "-q"])
        // Symbols are not needed to stop at a system call and write a core.
        .args(["-iex", "set auto-solib-add off"])
        .args([
            "-ex",
            "unset environment LINES",
            "-ex",
            "unset environment COLUMNS",
        ])
        .arg("-ex")
        .arg(format!("set environment LD_PRELOAD={}", lib.display()))
        .arg("-ex")
        .arg(format!("set environment DMEM_OPTS={opts}"))
        .args(["-ex", "catch syscall exit_group", "-ex", "run", "-ex"])
        .arg(format!("gcore {}", core.display()))
        .args(["-ex", "kill", "--args"])
        .arg(prog)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    let out = run_limited(&mut cmd, LIMIT);
    if core.is_file() {
        Ok(core)
    } else {
        Err(format!(
            "gdb wrote no core:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        ))
    }
}

/// Runs one workload under valgrind and under dmem; what differs, if anything.
fn check(
    w: &Workload,
    prog: &Path,
    root: &Path,
    base: &[(String, String)],
    added: &[(String, String)],
) -> Vec<String> {
    let name = w.name;
    let env_in = |dir: &Path| {
        let mut env = base.to_vec();
        env.extend(w.env.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())));
        env.push(("PWD".into(), dir.display().to_string()));
        env
    };

    // Both runs in one directory, the files the first made taken away before the second: a
    // program's hash tables of files by inode (tar's, make's) collide alike only on the same
    // files. Both get the same DMEM_OPTS, which valgrind's ignores.
    let top = root.join(name);
    let dir = fresh(&top, w);
    let made = walk(&top);
    let take_away_what_a_run_made = || {
        for f in walk(&top).into_iter().filter(|f| !made.contains(f)) {
            // A directory comes after what it holds.
            let gone = if f.is_dir() {
                std::fs::remove_dir(&f)
            } else {
                std::fs::remove_file(&f)
            };
            gone.unwrap_or_else(|e| panic!("{name}: remove {}: {e}", f.display()));
        }
    };
    // Outside the directory the program runs in, which make reads whole.
    let file = root.join(format!("{name}.report"));
    let mut opts = format!("leak-report,leak-show=all,report-file={}", file.display());
    if w.core == Core::Abort {
        opts += ",abort-shutdown";
    }
    let mut venv = env_in(&dir);
    venv.push(("DMEM_OPTS".into(), opts.clone()));
    let want = block_counts(&valgrind::summary_in(&dir, prog, w.args, &venv));
    let mut denv = env_in(&dir);
    denv.extend(added.iter().cloned());

    // One run under dmem, its exit report and its core compared with valgrind's classes.
    let dmem_differs = || {
        let mut failures = Vec::new();
        let _ = std::fs::remove_file(&file);
        let core = match w.core {
            Core::Abort => {
                let mut cmd = dmem();
                cmd.arg("run")
                    .arg(format!("--opts={opts}"))
                    .arg("--core-dir")
                    .arg(&top)
                    .arg("--")
                    .arg(prog)
                    .args(w.args)
                    .current_dir(&dir)
                    .env_clear()
                    .envs(denv.iter().map(|(k, v)| (k, v)));
                let out = run_limited(&mut cmd, LIMIT);
                reported_core(&text(&out.stderr))
                    .ok_or_else(|| format!("dmem run named no core:\n{}", text(&out.stderr)))
            }
            Core::AtExit => core_at_exit(&dir, &top, prog, w.args, &denv, &opts),
        };
        let report = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: no report: {e}"));
        let at_exit = block_counts(&last_report_summary(&report));
        if at_exit != want {
            failures.push(format!("{name} at exit: dmem {at_exit:?}, valgrind {want:?}"));
        }
        let warned = report_warnings(&report);
        if !warned.is_empty() {
            failures.push(format!("{name}: the exit report warns: {}", warned.join(" / ")));
        }
        match core.and_then(|c| core_counts(&c)) {
            Ok((got, _)) if got != want => {
                failures.push(format!("{name} from the core: dmem {got:?}, valgrind {want:?}"))
            }
            Ok((_, said)) if !said.is_empty() => {
                failures.push(format!("{name}: the core's scan says: {}", said.join(" / ")))
            }
            Ok(_) => {}
            Err(e) => failures.push(format!("{name} from the core: {e}")),
        }
        failures
    };

    // Each run in a new layout: see `valgrind::ATTEMPTS`.
    let run = || {
        take_away_what_a_run_made();
        dmem_differs()
    };
    let how = |f: &Vec<String>| (!f.is_empty()).then(|| f.join(" / "));
    let failures = valgrind::again_while_it_differs(name, run, how);
    if failures.is_empty() {
        // Cores are large; only a failure's are worth keeping.
        let _ = std::fs::remove_dir_all(&top);
        let _ = std::fs::remove_file(&file);
    }
    failures
}

#[test]
fn real_programs_have_valgrinds_classes_at_exit_and_from_the_core() {
    if !have_tool("valgrind") || !have_tool("gdb") {
        return;
    }
    let root = scratch_dir("corpus");
    let base = base_environment();
    let added = valgrinds_additions(&base);
    // DMEM_CORPUS=NAME,NAME runs only those workloads, for work on one of them.
    let only = std::env::var("DMEM_CORPUS").ok();
    let picked = |w: &&Workload| only.as_ref().is_none_or(|o| o.split(',').any(|n| n == w.name));
    let todo: Vec<(&Workload, PathBuf)> = CORPUS
        .iter()
        .filter(picked)
        .filter_map(|w| match program(w.prog) {
            Some(p) => Some((w, p)),
            None => {
                common::missing(w.prog);
                None
            }
        })
        .collect();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    // valgrind runs one thread at a time: two workloads at once keep both cores busy.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some((w, prog)) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let f = check(w, prog, &root, &base, &added);
                    failures.lock().unwrap().extend(f);
                }
            });
        }
    });
    assert!(
        todo.len() >= 25 || only.is_some(),
        "only {} programs of the corpus are installed",
        todo.len()
    );
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "classes (definite, indirect, possible, reachable) differ, or a scan warned:\n{}",
        failures.join("\n")
    );
}

/// A forked subshell that grows its brk heap gets the growth as a second `[heap]` mapping beside
/// the first (the kernel no longer merges them: they have different anonymous memory owners),
/// and a header can straddle the two. Over runs of a subshell growing by different amounts, the
/// subshell itself counts its `[heap]` mappings, and no exit report may say the heap was
/// overwritten.
#[test]
fn a_forked_shell_whose_heap_grew_in_two_mappings_reports_every_block() {
    let Some(bash) = which("bash") else {
        common::missing("bash");
        return;
    };
    let dir = scratch_dir("corpus-subshell-heap");
    let script = dir.join("grow.sh");
    std::fs::write(
        &script,
        r#"( x=$(printf "%0${PAD}d" 0); for i in $(seq 1 $N); do arr[$i]=x$i$x; done
  heaps=0; while read -r line; do [[ $line == *"[heap]"* ]] && heaps=$((heaps + 1)); done < /proc/$BASHPID/maps
  echo "heaps $heaps" )
"#,
    )
    .unwrap();
    let mut split = 0;
    let mut failures = Vec::new();
    for n in [50, 100, 200, 300, 500, 700] {
        for pad in [1, 5, 20, 50] {
            let report = dir.join(format!("report.{n}.{pad}"));
            let mut cmd = Command::new(&bash);
            cmd.arg(&script)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("N", n.to_string())
                .env("PAD", pad.to_string())
                .env("LD_PRELOAD", common::lib_path())
                .env(
                    "DMEM_OPTS",
                    format!("leak-report,report-file={}", report.display()),
                );
            let out = run_limited(&mut cmd, LIMIT);
            assert!(out.status.success(), "N={n} PAD={pad}: {}", text(&out.stderr));
            if text(&out.stdout).contains("heaps 2") {
                split += 1;
            }
            let report = std::fs::read_to_string(&report).unwrap();
            // The shell, the subshell and its command substitutions each report.
            assert!(report.matches("dmem: leak summary:").count() >= 3, "{report}");
            if report.contains("overwritten") {
                failures.push(format!("N={n} PAD={pad}:\n{report}"));
            }
        }
    }
    assert!(split > 0, "no run grew the subshell's heap into a second mapping");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
