//! Helpers shared by the integration tests: where the library and the fixtures are, running a
//! program with the library preloaded, scratch directories and core files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `libdmem.so` of the profile the tests were built with: the copy in `target/<profile>/deps`,
/// which this very test build produced, else `target/<profile>/libdmem.so`.
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test binary>
    let deps = exe.parent().expect("deps dir");
    let fresh = deps.join("libdmem.so");
    if fresh.exists() {
        return fresh;
    }
    let lib = deps.parent().expect("profile dir").join("libdmem.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --release` first",
        lib.display()
    );
    lib
}

/// A fixture built by build.rs from `c-fixtures/NAME.c` or `NAME.cpp`.
pub fn fixture(name: &str) -> PathBuf {
    let p = Path::new(env!("OUT_DIR")).join("fixtures").join(name);
    assert!(p.exists(), "fixture {} was not built", p.display());
    p
}

/// A fresh, empty directory for one test, removed and recreated on each run.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Which program is on PATH, if any.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A command with libdmem preloaded (before `extra_preload`, e.g. another allocator) and
/// `DMEM_OPTS` set.
pub fn preloaded(prog: impl AsRef<std::ffi::OsStr>, opts: &str, extra_preload: Option<&Path>) -> Command {
    let mut cmd = Command::new(prog);
    let mut preload = lib_path().into_os_string();
    if let Some(extra) = extra_preload {
        preload.push(" ");
        preload.push(extra);
    }
    cmd.env("LD_PRELOAD", preload).env("DMEM_OPTS", opts);
    cmd
}

/// Runs a command to completion with no stdin, capturing output.
pub fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The backend allocators from Debian's packages that are installed here, by name.
pub fn backends() -> Vec<(&'static str, PathBuf)> {
    let candidates = [
        ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
        ("tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"),
        ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
    ];
    candidates
        .iter()
        .filter(|(_, p)| Path::new(p).exists())
        .map(|(n, p)| (*n, PathBuf::from(p)))
        .collect()
}

/// Runs `prog args` preloaded with `opts` (which should include `abort-shutdown`) in `dir` and
/// returns the core file it left. The kernel writes the core when core_pattern names a plain
/// file; otherwise (a pipe to a crash handler) the program is run under gdb, which stops it at
/// the abort and writes the core with `gcore`. Either way the core is a real one of the process.
pub fn make_core(dir: &Path, prog: &Path, args: &[&str], opts: &str, lib: &Path) -> PathBuf {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if !pattern.starts_with('|') {
        let script = "ulimit -c unlimited; exec \"$@\"";
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .arg("sh")
            .arg(prog)
            .args(args)
            .current_dir(dir);
        cmd.env("LD_PRELOAD", lib).env("DMEM_OPTS", opts);
        let out = output(&mut cmd);
        if let Some(core) = find_core(dir) {
            return core;
        }
        eprintln!(
            "no core from the kernel (status {:?}, core_pattern {:?}); using gcore",
            out.status,
            pattern.trim()
        );
    }
    let setup = [
        format!("set environment LD_PRELOAD={}", lib.display()),
        format!("set environment DMEM_OPTS={opts}"),
        "run".to_owned(),
    ];
    gcore_after(dir, &setup, "core.gcore", prog, args)
}

/// Runs `prog args` under gdb in `dir` with the `setup` commands (which end by running it to
/// where it stops), writes a core of it there with gdb's `gcore` and returns the core's path.
pub fn gcore_after(dir: &Path, setup: &[String], name: &str, prog: &Path, args: &[&str]) -> PathBuf {
    let core = dir.join(name);
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx", "-q"])
        .current_dir(dir)
        .env_remove("LD_PRELOAD");
    for c in setup {
        cmd.arg("-ex").arg(c);
    }
    cmd.arg("-ex").arg(format!("gcore {}", core.display()));
    cmd.args(["-ex", "kill", "--args"]).arg(prog).args(args);
    let out = output(&mut cmd);
    assert!(
        core.exists(),
        "gcore wrote no core: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    core
}

fn find_core(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "core" || n.starts_with("core."))
        })
}
