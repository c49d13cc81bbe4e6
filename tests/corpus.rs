//! Leak classes on real programs from Debian's packages, with valgrind's memcheck run by the test
//! as the oracle: the block count of every class must be equal at exit (the exit report) and
//! from the core that run leaves (`dmem leaks PROG CORE`). These programs keep malloc'd blocks
//! reachable only from memory of their own (CPython's pymalloc arenas), keep interior pointers
//! that memcheck's heuristics accept, register many C++ destructors, or close stderr at exit.
//!
//! Both runs get the same environment, since bash and perl copy every variable into blocks of
//! their own: a small one of PATH, HOME, DMEM_LIB and DMEM_OPTS; and valgrind adds
//! variables to its client's (libstdc++'s GLIBCXX_FORCE_NEW, among others), so dmem's run gets
//! those too.

mod common;
use common::run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{dmem, have_tool, output, reported_core, scratch_dir, text, which};
use run::{run_limited, LIMIT};
use std::path::{Path, PathBuf};
use valgrind::{report_summary, Summary};

/// The corpus: a program on PATH (or an absolute path) and its arguments.
const CORPUS: &[(&str, &[&str])] = &[
    // Debian's CPython, pymalloc on: its objects live in arenas it maps itself.
    (
        "/usr/bin/python3",
        &["-c", "import json; print(json.dumps({'a': 1}))"],
    ),
    (
        "sqlite3",
        &[
            ":memory:",
            "create table t(a, b); insert into t values (1, 'x'); select * from t;",
        ],
    ),
    ("git", &["--version"]),
    (
        "perl",
        &["-e", "my %h = (a => [1, 2]); print scalar(keys %h), \"\\n\""],
    ),
    ("bash", &["-c", "a=(x y); echo ${#a[@]}"]),
    // C++ with the standard library's strings and containers, and over 32 static destructors
    // registered before libdmem's exit handler.
    ("apt-cache", &["--version"]),
    ("jq", &["-n", "[1, 2] | add"]),
    ("openssl", &["version"]),
    // gnulib programs: they close stdout and stderr at exit.
    ("ls", &["/"]),
    ("grep", &["-c", "root", "/etc/passwd"]),
    ("xz", &["--version"]),
    ("sort", &["/etc/passwd"]),
    ("cat", &["/etc/hostname"]),
];

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

/// The environment both runs share, less DMEM_OPTS; DMEM_LIB tells `dmem run` which library
/// to preload.
fn base_environment() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    env.push(("DMEM_LIB".into(), common::lib_path().display().to_string()));
    // perl seeds its hashes at random, so two runs build different heaps and a borderline block
    // can fall in another class; a fixed seed makes both runs build the same one.
    env.push(("PERL_HASH_SEED".into(), "0".into()));
    env.push(("PERL_PERTURB_KEYS".into(), "0".into()));
    env
}

/// The variables valgrind puts in its client's environment beyond `base`, asked of valgrind
/// itself (LD_PRELOAD aside, which each tool sets to its own).
fn valgrinds_additions(base: &[(String, String)]) -> Vec<(String, String)> {
    let mut cmd = std::process::Command::new("valgrind");
    cmd.args(["-q", "/usr/bin/env", "-0"])
        .env_clear()
        .envs(base.iter().map(|(k, v)| (k, v)));
    let out = run_limited(&mut cmd, LIMIT);
    text(&out.stdout)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .filter(|&(k, v)| k != "LD_PRELOAD" && !base.iter().any(|(bk, bv)| bk == k && bv == v))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The four classes' block counts of `dmem leaks --json PROG CORE`.
fn core_counts(prog: &Path, core: &Path) -> Result<[u64; 4], String> {
    let out = output(
        dmem()
            .args(["leaks", "--json", "--limit", "1"])
            .arg(prog)
            .arg(core),
    );
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
    Ok(n)
}

#[test]
fn real_programs_have_valgrinds_classes_at_exit_and_from_the_core() {
    if !have_tool("valgrind") {
        return;
    }
    let dir = scratch_dir("corpus");
    let base = base_environment();
    let added = valgrinds_additions(&base);
    let mut failures = Vec::new();
    let mut ran = 0;
    for &(name, args) in CORPUS {
        let Some(prog) = program(name) else {
            common::missing(name);
            continue;
        };
        ran += 1;
        let stem = name.trim_start_matches('/').replace('/', "_");
        let file = dir.join(format!("{stem}.report"));
        let opts = format!(
            "leak-report,leak-show=all,abort-shutdown,report-file={}",
            file.display()
        );
        let mut env = base.clone();
        env.push(("DMEM_OPTS".to_owned(), opts.clone()));
        let want = block_counts(&valgrind::summary_with(&prog, args, &env));

        let cores = dir.join(&stem);
        std::fs::create_dir_all(&cores).unwrap();
        let mut cmd = dmem();
        cmd.arg("run")
            .arg(format!("--opts={opts}"))
            .arg("--core-dir")
            .arg(&cores)
            .arg("--")
            .arg(&prog)
            .args(args)
            .env_clear()
            .envs(base.iter().chain(&added).map(|(k, v)| (k, v)))
            .current_dir(&dir);
        let out = run_limited(&mut cmd, LIMIT);
        let report = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: no report: {e}"));
        let at_exit = block_counts(&report_summary(&report));
        if at_exit != want {
            failures.push(format!("{name} at exit: dmem {at_exit:?}, valgrind {want:?}"));
        }
        let Some(core) = reported_core(&text(&out.stderr)) else {
            failures.push(format!("{name}: dmem run named no core:\n{}", text(&out.stderr)));
            continue;
        };
        match core_counts(&prog, &core) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{name} from the core: dmem {got:?}, valgrind {want:?}")),
            Err(e) => failures.push(format!("{name} from the core: {e}")),
        }
        let _ = std::fs::remove_file(&core);
    }
    assert!(ran >= 12, "only {ran} programs of the corpus are installed");
    assert!(
        failures.is_empty(),
        "classes (definite, indirect, possible, reachable) differ:\n{}",
        failures.join("\n")
    );
}
