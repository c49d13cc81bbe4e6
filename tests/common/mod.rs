//! Helpers shared by the integration tests: where the library and the fixtures are, running a
//! program with the library preloaded, scratch directories and core files.
#![allow(dead_code)]

/// The layout descriptor's format and field names: the definition the library writes from.
pub use dmem_analysis::descriptor;
pub mod run;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// A shell runs a background job with SIGINT and SIGQUIT ignored, and `nohup` ignores SIGHUP;
/// an ignored disposition survives exec, so every program a test starts would inherit it and
/// the tests that stop a program with those signals would wait for an ending that never comes.
/// The tests' own process puts them back to the default before `main`, for every child after.
extern "C" fn default_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
        // SAFETY: signal() with SIG_DFL changes only this process's disposition; it runs before
        // main, when no other thread exists and no handler of ours is installed.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

// The loader runs `.init_array` entries before `main`; `#[used]` keeps this one in the binary
// although nothing names it.
#[used]
#[link_section = ".init_array"]
static DEFAULT_STOP_SIGNALS: extern "C" fn() = default_stop_signals;

/// The repository's top folder. The tests are the launcher's package's (`launcher/`, whose
/// binary they run), so that is the folder above cargo's `CARGO_MANIFEST_DIR`.
pub fn top() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the launcher's package is a folder of the repository")
}

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
    let p = Path::new(dmem_fixtures::DIR).join(name);
    assert!(p.exists(), "fixture {} was not built", p.display());
    p
}

/// The number (from 1) of the first line of the project's file `file` that holds `needle`: a
/// fixture's line as a test expects a frame to name it.
pub fn source_line(file: &str, needle: &str) -> usize {
    let src = std::fs::read_to_string(top().join(file)).unwrap();
    src.lines().position(|l| l.contains(needle)).expect(needle) + 1
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

/// A test cannot run because `what` is missing here. Under `CI=true`, where `.ci/run` installs
/// every tool the tests use, that is a failure naming it; elsewhere the test prints that it skips
/// (once per missing thing and test binary) and the caller returns.
pub fn missing(what: &str) {
    if std::env::var_os("CI").is_some_and(|v| v == "true") {
        panic!("{what} is missing, and under CI=true every test must run (.ci/run installs it)");
    }
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|w| w == what) {
        eprintln!("skipped: {what} is missing here (.ci/run installs it)");
        said.push(what.to_owned());
    }
}

/// Whether `tool` is on PATH; when it is not, says so through `missing` (which fails under CI).
pub fn have_tool(tool: &str) -> bool {
    if which(tool).is_some() {
        return true;
    }
    missing(tool);
    false
}

/// The backend allocator `name` from Debian's packages, or None after `missing` said so.
pub fn backend(name: &str) -> Option<PathBuf> {
    let found = backends().into_iter().find(|(n, _)| *n == name).map(|(_, p)| p);
    if found.is_none() {
        missing(&format!("the {name} package"));
    }
    found
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
/// How long one command of a test may run: far beyond any of them on a loaded machine, so only
/// a hang meets it, and then fails the test instead of stalling the suite.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(300);

/// Runs `cmd` with no stdin, capturing its output; a run still going after `COMMAND_LIMIT` is
/// killed with its process group and fails the test.
pub fn output(cmd: &mut Command) -> Output {
    let out = run::run_limited(cmd, COMMAND_LIMIT);
    assert!(!run::timed_out(&out), "{cmd:?} hung:\n{}", text(&out.stderr));
    out
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

/// The `dmem` launcher of this build, with an environment of its own: it must find everything by
/// itself, whatever the test's environment holds. Without CARGO it does not take itself for
/// started by `cargo run` (cargo test sets the same variables), which would have it build the
/// library again from every test.
pub fn dmem() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dmem"));
    for var in ["DMEM_LIB", "DMEM_GDB_SCRIPT", "DMEM_OPTS", "LD_PRELOAD", "CARGO"] {
        cmd.env_remove(var);
    }
    cmd
}

/// The core `dmem run` named on its standard error (`dmem: core file: PATH`, printed after the
/// program ended, so the last such line is the launcher's).
pub fn reported_core(stderr: &str) -> Option<PathBuf> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("dmem: core file: "))
        .map(PathBuf::from)
}

/// Runs `prog args` in `dir` through the launcher, `dmem run --opts OPTS --core-dir DIR`, with
/// `lib` as the library (`DMEM_LIB`), and returns the core it reports. `opts` should include
/// `abort-shutdown`. The launcher decides who writes the core: the kernel, or gdb's gcore where
/// core_pattern pipes cores to a crash handler or the hard core-size limit is 0.
pub fn make_core(dir: &Path, prog: &Path, args: &[&str], opts: &str, lib: &Path) -> PathBuf {
    make_core_with(dir, prog, args, opts, lib, &[])
}

/// `make_core`, with `env` set for the launcher and so for the program.
pub fn make_core_with(
    dir: &Path,
    prog: &Path,
    args: &[&str],
    opts: &str,
    lib: &Path,
    env: &[(&str, &Path)],
) -> PathBuf {
    let mut cmd = dmem();
    cmd.envs(env.iter().copied())
        .env("DMEM_LIB", lib)
        .arg("run")
        .arg(format!("--opts={opts}"))
        .arg("--core-dir")
        .arg(dir)
        .arg("--")
        .arg(prog)
        .args(args)
        .current_dir(dir);
    let out = output(&mut cmd);
    let err = text(&out.stderr);
    let core = reported_core(&err).unwrap_or_else(|| {
        panic!(
            "dmem run named no core of {} ({:?}):\n{err}",
            prog.display(),
            out.status
        )
    });
    assert!(core.is_file(), "{} does not exist:\n{err}", core.display());
    core
}

/// The layout descriptor at `at`, read with `read(addr, len)`, its fields by name, once its
/// checks held.
pub fn read_descriptor(at: u64, read: impl Fn(u64, usize) -> Vec<u8>) -> descriptor::Fields {
    let len = descriptor::size(&read(at, descriptor::HEAD_LEN)).expect("a descriptor we read");
    let bytes = read(at, len);
    let sealed = descriptor::verify(&bytes, &mut |a, buf| {
        buf.copy_from_slice(&read(a, buf.len()));
        true
    });
    assert_eq!(
        sealed,
        Ok(descriptor::Sealed::Verified),
        "the descriptor's checks, written at start-up"
    );
    let fields = descriptor::Fields::parse(&bytes).expect("the descriptor's fields");
    assert_eq!(
        fields.version,
        descriptor::VERSION,
        "the library writes this version"
    );
    fields
}

/// `s` with each hexadecimal number of five digits or more (an address, from run to run and
/// machine to machine) as `0xADDR`; shorter ones (sizes, offsets) as they were.
pub fn hide_addresses(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("0x") {
        let digits = rest[at + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(&rest[..at]);
        out.push_str(if digits >= 5 {
            "0xADDR"
        } else {
            &rest[at..at + 2 + digits]
        });
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}
