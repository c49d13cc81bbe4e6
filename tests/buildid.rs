//! A core read where it was not made, and a process whose files were replaced on disk: every
//! mapped file is matched by build id, never named from another build.
//!
//! Each test builds a program and the library it links (build A), takes a core of it or starts
//! it, then rebuilds both at the same paths from other source (build B, whose functions lie
//! where A's were, under other names). A's frames must then be named from A's files (found
//! under `--sysroot`, on a debuginfod server, or through the process's own mappings), or shown
//! as `file+offset` with a warning naming both build ids: never with B's names.

mod common;
#[path = "common/live.rs"]
mod live;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Build A's library: one function that allocates.
const LIB_A: &str = r#"
#include <stdlib.h>
__attribute__((noinline)) void *lib_make(int n) {
    char *p = malloc(n);
    p[0] = 1;
    return p;
}
"#;

/// Build B's library: other functions where A's was.
const LIB_B: &str = r#"
#include <stdlib.h>
__attribute__((noinline)) int lib_other_one(int x) { return x * 7 + 3; }
__attribute__((noinline)) int lib_other_two(int x) { return x * 5 + lib_other_one(x); }
__attribute__((noinline)) void *lib_make(int n) {
    char *p = malloc(n + lib_other_two(n));
    p[0] = 2;
    return p;
}
"#;

/// Build A's program: `leaky_worker` allocates three blocks, the library one; with an argument
/// it says "ready" and waits to be killed.
const PROG_A: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *lib_make(int n);
void *volatile keep[4];
__attribute__((noinline)) void *leaky_worker(int n) {
    char *p = malloc(n);
    p[0] = 1;
    return p;
}
int main(int argc, char **argv) {
    for (int i = 0; i < 3; i++)
        keep[i] = leaky_worker(100 + i);
    keep[3] = lib_make(64);
    if (argc > 1) {
        puts("ready");
        fflush(stdout);
        for (;;)
            pause();
    }
    return 0;
}
"#;

/// Build B's program: functions named otherwise where A's lay.
const PROG_B: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *lib_make(int n);
void *volatile keep[4];
__attribute__((noinline)) int other_name(int x) { return x * 3 + 1; }
__attribute__((noinline)) int other_name_too(int x) { return other_name(x) * other_name(x + 1); }
__attribute__((noinline)) void *leaky_worker(int n) {
    char *p = malloc(n + other_name_too(n));
    p[0] = 1;
    return p;
}
int main(int argc, char **argv) {
    keep[0] = leaky_worker(argc);
    keep[3] = lib_make(64);
    return 0;
}
"#;

/// B's names, none of which may name a frame of A's.
const B_ONLY: [&str; 4] = ["other_name", "other_name_too", "lib_other_one", "lib_other_two"];

/// Compiles `source` with gcc into `out` (`-shared` flags for the library), at -O0 so that
/// every call stays a call.
fn gcc(dir: &Path, source: &str, name: &str, out: &Path, flags: &[&str]) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    // Removed first, as a package upgrade replaces a file: a running process keeps the old one.
    let _ = std::fs::remove_file(out);
    let o = common::output(
        Command::new("gcc")
            .args(["-O0", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"])
            .args(flags)
            .arg("-o")
            .arg(out)
            .arg(&src),
    );
    assert!(o.status.success(), "gcc {name}: {}", common::text(&o.stderr));
}

/// A program and its library, built from `prog` and `lib` in `dir`.
struct Build {
    prog: PathBuf,
    lib: PathBuf,
}

fn build(dir: &Path, prog: &str, lib: &str) -> Build {
    let b = Build {
        prog: dir.join("prog"),
        lib: dir.join("libbid.so"),
    };
    gcc(dir, lib, "libbid", &b.lib, &["-shared", "-fPIC"]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let ldir = format!("-L{}", dir.display());
    // The library after the source, as the linker resolves in order.
    let src = dir.join("prog.c");
    std::fs::write(&src, prog).unwrap();
    let _ = std::fs::remove_file(&b.prog);
    let o = common::output(
        Command::new("gcc")
            .args(["-O0", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"])
            .arg("-o")
            .arg(&b.prog)
            .arg(&src)
            .arg(&ldir)
            .arg("-lbid")
            .arg(&rpath),
    );
    assert!(o.status.success(), "gcc prog: {}", common::text(&o.stderr));
    b
}

/// The GNU build id of the ELF file at `path`, in hex.
fn build_id(path: &Path) -> String {
    use object::Object;
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let id = file.build_id().unwrap().expect("gcc links a build id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stacks of the core (or process) `image`, with `args` before it and `env` set:
/// (stdout, stderr).
fn stacks(args: &[&str], image: &[&Path], env: &[(&str, &Path)]) -> (String, String) {
    let mut cmd = common::dmem();
    cmd.env_remove("DEBUGINFOD_URLS")
        .envs(env.iter().copied())
        .args(args)
        .arg("stacks")
        .args(image);
    let out = common::output(&mut cmd);
    let (so, se) = (common::text(&out.stdout), common::text(&out.stderr));
    assert!(out.status.success(), "{cmd:?}: {se}\n{so}");
    (so, se)
}

/// A's frames, named from A's files: the worker, main and the library's function.
fn assert_named_from_a(out: &str, err: &str) {
    for name in ["leaky_worker", "main", "lib_make"] {
        assert!(
            out.contains(&format!(" {name}+0x")),
            "{name} not named:\n{out}\n{err}"
        );
    }
    assert!(
        out.contains("(prog.c:") && out.contains("(libbid.c:"),
        "A's lines:\n{out}"
    );
    for b in B_ONLY {
        assert!(!out.contains(b), "B's {b} names a frame of A:\n{out}");
    }
    assert!(!err.contains("warning"), "{err}");
}

/// A core of build A, with B built at the same paths since: (A's files kept aside in `keep`,
/// the core).
fn core_then_rebuild(dir: &Path) -> (Build, PathBuf) {
    let keep = dir.join("a");
    std::fs::create_dir_all(&keep).unwrap();
    let a = build(dir, PROG_A, LIB_A);
    let kept = Build {
        prog: keep.join("prog"),
        lib: keep.join("libbid.so"),
    };
    std::fs::copy(&a.prog, &kept.prog).unwrap();
    std::fs::copy(&a.lib, &kept.lib).unwrap();
    let core = common::make_core(dir, &a.prog, &[], "abort-shutdown", &common::lib_path());
    // Before the rebuild, the program's own files name its frames.
    let (out, err) = stacks(&[], &[&a.prog, &core], &[]);
    assert_named_from_a(&out, &err);
    build(dir, PROG_B, LIB_B);
    assert_ne!(build_id(&kept.prog), build_id(&dir.join("prog")));
    assert_ne!(build_id(&kept.lib), build_id(&dir.join("libbid.so")));
    (kept, core)
}

/// A program and its library rebuilt after the core: no name from the new build; the frames
/// in those files read `file+offset`, and one warning per file names both build ids.
#[test]
fn rebuilt_files_show_as_file_offset_with_one_warning_each() {
    let dir = common::scratch_dir("buildid-rebuilt");
    let (a, core) = core_then_rebuild(&dir);
    let prog = dir.join("prog");
    let (out, err) = stacks(&[], &[&prog, &core], &[]);
    for b in B_ONLY.iter().chain(&["leaky_worker", "lib_make"]) {
        assert!(!out.contains(b), "{b} named from the wrong build:\n{out}");
    }
    assert!(
        !out.lines()
            .any(|l| l.trim_end().ends_with(" in prog") || l.trim_end().ends_with(" in libbid.so")),
        "a frame named in a file of another build:\n{out}"
    );
    assert!(out.contains("prog+0x") && out.contains("libbid.so+0x"), "{out}");
    // libc's frames, whose file did not change, are still named.
    assert!(
        out.contains("__libc_start_call_main") || out.contains("__libc_start_main"),
        "{out}"
    );
    for (file, new) in [(&a.prog, &prog), (&a.lib, &dir.join("libbid.so"))] {
        let (old, now) = (build_id(file), build_id(new));
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(&old)).collect();
        assert_eq!(lines.len(), 1, "one warning for {}:\n{err}", new.display());
        assert!(
            lines[0].starts_with("dmem: warning:") && lines[0].contains(&now),
            "the warning names both build ids:\n{err}"
        );
    }
}

/// The customer's files under `--sysroot DIR`, at the paths the core gives them: every frame
/// named from them, the core alone too, without a warning.
#[test]
fn a_sysroot_tree_gives_the_files_of_the_core() {
    let dir = common::scratch_dir("buildid-sysroot");
    let (a, core) = core_then_rebuild(&dir);
    let root = dir.join("customer");
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap());
    let place = under(&dir);
    std::fs::create_dir_all(&place).unwrap();
    std::fs::copy(&a.prog, place.join("prog")).unwrap();
    std::fs::copy(&a.lib, place.join("libbid.so")).unwrap();
    let sysroot = root.to_str().unwrap();
    let (out, err) = stacks(&["--sysroot", sysroot], &[&dir.join("prog"), &core], &[]);
    assert_named_from_a(&out, &err);
    // The core alone, its program gone from this machine: found under the sysroot.
    std::fs::remove_file(dir.join("prog")).unwrap();
    let (out, err) = stacks(&["--sysroot", sysroot], &[&core], &[]);
    assert_named_from_a(&out, &err);
}

/// A free port on 127.0.0.1 (the kernel's pick; released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A debuginfod server (Debian's package) serving the ELF files under one directory, stopped
/// when dropped.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTP status of a GET of `url` (0 when it cannot be reached), with a short timeout
/// (debuginfod answers GET only).
fn status_of(url: &str) -> u16 {
    use std::io::Write;
    let Some(rest) = url.strip_prefix("http://") else {
        return 0;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(addr) = host.parse::<std::net::SocketAddr>() else {
        return 0;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    );
    let mut head = [0u8; 64];
    let n = s.read(&mut head).unwrap_or(0);
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Starts debuginfod on `files` and waits until it serves `ready` (`BUILDID/executable` or
/// `BUILDID/debuginfo`).
fn debuginfod(dir: &Path, files: &Path, ready: &str) -> Server {
    let port = free_port();
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(format!("--port={port}"))
        .arg("--database")
        .arg(dir.join("debuginfod.sqlite"))
        .args(["--rescan-time=0", "--groom-time=0", "--concurrency=1"])
        .arg(files)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start debuginfod");
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // Ready when it has scanned the directory and serves the file asked for.
    let t = Instant::now();
    let probe = format!("{}/buildid/{ready}", server.url);
    while status_of(&probe) != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "debuginfod did not serve {probe} within two minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

/// A debuginfod server that has build A: the files fetched by build id into
/// DEBUGINFOD_CACHE_PATH, and every frame named from them.
#[test]
fn a_debuginfod_server_gives_the_files_by_build_id() {
    if !common::have_tool("debuginfod") {
        return;
    }
    let dir = common::scratch_dir("buildid-debuginfod");
    let (a, core) = core_then_rebuild(&dir);
    let ready = format!("{}/executable", build_id(&a.prog));
    let server = debuginfod(&dir, a.prog.parent().unwrap(), &ready);
    let cache = dir.join("cache");
    let url = PathBuf::from(&server.url);
    let env = [
        ("DEBUGINFOD_URLS", url.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];
    let (out, err) = stacks(&[], &[&dir.join("prog"), &core], &env);
    assert_named_from_a(&out, &err);
    for f in [&a.prog, &a.lib] {
        let fetched = cache.join(build_id(f)).join("executable");
        assert_eq!(
            std::fs::read(&fetched).ok(),
            std::fs::read(f).ok(),
            "{}",
            fetched.display()
        );
    }
    // From the cache, with the server gone.
    drop(server);
    let (out, err) = stacks(&[], &[&dir.join("prog"), &core], &env);
    assert_named_from_a(&out, &err);
}

/// A stripped program rebuilt after its core, whose debug file alone a debuginfod server has:
/// its functions and lines come from that file, laid out by the core's own copy of the
/// program's headers.
#[test]
fn a_debuginfod_server_gives_the_debug_file_of_a_stripped_program() {
    if !common::have_tool("debuginfod") || !common::have_tool("objcopy") {
        return;
    }
    let dir = common::scratch_dir("buildid-debuginfo");
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let a = build(&dir, PROG_A, LIB_A);
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let o = common::output(Command::new("objcopy").args(args));
        assert!(
            o.status.success(),
            "objcopy {args:?}: {}",
            common::text(&o.stderr)
        );
    };
    let debug = served.join("prog.debug");
    objcopy(&[
        "--only-keep-debug".as_ref(),
        a.prog.as_os_str(),
        debug.as_os_str(),
    ]);
    objcopy(&["--strip-all".as_ref(), a.prog.as_os_str()]);
    std::fs::copy(&a.lib, served.join("libbid.so")).unwrap();
    let id = build_id(&a.prog);
    assert_eq!(build_id(&debug), id);
    let core = common::make_core(&dir, &a.prog, &[], "abort-shutdown", &common::lib_path());
    build(&dir, PROG_B, LIB_B);
    let server = debuginfod(&dir, &served, &format!("{id}/debuginfo"));
    let cache = dir.join("cache");
    let url = PathBuf::from(&server.url);
    let env = [
        ("DEBUGINFOD_URLS", url.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];
    let (out, err) = stacks(&[], &[&dir.join("prog"), &core], &env);
    assert_named_from_a(&out, &err);
    assert!(err.contains("named from its debug file"), "{err}");
    assert!(cache.join(&id).join("debuginfo").is_file());
}

/// A running process whose program and library were removed and rebuilt on disk: read through
/// its own mappings, its frames are named from the files it runs.
#[test]
fn a_live_process_is_read_through_its_own_mappings() {
    let dir = common::scratch_dir("buildid-live");
    let a = build(&dir, PROG_A, LIB_A);
    let mut cmd = common::preloaded(&a.prog, "", None);
    cmd.arg("wait");
    let target = live::start_command(cmd, "prog");
    build(&dir, PROG_B, LIB_B);
    let pid = target.pid.to_string();
    let (out, err) = stacks(&[], &[Path::new(&pid)], &[]);
    assert_named_from_a(&out, &err);
    drop(target);
}

/// A server that answers every request with the same file: build B's program, whatever build
/// id was asked for. Serves until the test ends.
fn lying_server(file: Vec<u8>) -> String {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            // The request head, read up to its blank line.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                file.len()
            );
            let _ = conn.write_all(&file);
        }
    });
    url
}

/// A server that sends build B's program for every build id asked for: nothing it sends is
/// believed. A's frames read `file+offset`, a warning says the server sent another build, and
/// the file is taken out of the cache, where gdb or the next run would take it for A's.
#[test]
fn a_server_that_sends_another_build_is_not_believed() {
    let dir = common::scratch_dir("buildid-lying");
    let (a, core) = core_then_rebuild(&dir);
    let url = PathBuf::from(lying_server(std::fs::read(dir.join("prog")).unwrap()));
    let cache = dir.join("cache");
    let env = [
        ("DEBUGINFOD_URLS", url.as_path()),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
    ];
    let (out, err) = stacks(&[], &[&dir.join("prog"), &core], &env);
    for b in B_ONLY.iter().chain(&["leaky_worker", "lib_make"]) {
        assert!(!out.contains(b), "{b} named from the server's file:\n{out}");
    }
    assert!(
        out.contains("prog+0x") && out.contains("libbid.so+0x"),
        "{out}\n{err}"
    );
    for f in [&a.prog, &a.lib] {
        let id = build_id(f);
        assert!(
            err.lines()
                .any(|l| l.starts_with("dmem: warning: cannot fetch the executable")
                    && l.contains(&id)
                    && l.ends_with("not an ELF file of that build id")),
            "no warning for {id}:\n{err}"
        );
        let cached = cache.join(&id).join("executable");
        assert!(!cached.exists(), "{} kept in the cache", cached.display());
    }
}
