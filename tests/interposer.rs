//! The C and C++ fixtures run bare and with libdmem preloaded (with each option that changes
//! what it does, and over each backend allocator): exit status and stdout must be identical to
//! the bare run. Also the options' own behaviour (trace lines, trace-file, help, warnings), bad
//! frees, and a core file whose lists are walked by the layout contract.

mod common;
#[path = "common/elfcore.rs"]
mod corefile;
use common::run;

use corefile::{Core, Elf, SHT_DYNSYM, SHT_SYMTAB};
use run::{assert_none, bare, mismatch, run_limited, status_text, with_dmem, LIMIT};
use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;
use std::sync::OnceLock;

/// Every fixture that checks its own results and exits 0 when all is well.
const FIXTURES: &[&str] = &[
    "driver",
    "entry_malloc",
    "entry_calloc",
    "entry_realloc",
    "entry_free",
    "entry_memalign",
    "entry_posix_memalign",
    "entry_aligned_alloc",
    "entry_valloc",
    "entry_pvalloc",
    "entry_reallocarray",
    "entry_malloc_usable_size",
    "entry_munmap",
    "threads_xfree",
    "threads_exit",
    "tls_teardown",
    "tls_teardown_cxx",
    "fork_threads",
    "dlopen_loop",
    "plugin_linked",
    "cxx_alloc",
];

/// Fixtures with one thread, whose trace is a single ordered history.
const SINGLE_THREADED: &[&str] = &[
    "driver",
    "entry_malloc",
    "entry_calloc",
    "entry_realloc",
    "entry_free",
    "entry_memalign",
    "entry_posix_memalign",
    "entry_aligned_alloc",
    "entry_valloc",
    "entry_pvalloc",
    "entry_reallocarray",
    "entry_malloc_usable_size",
    "dlopen_loop",
    "plugin_linked",
];

const BAD_FREE_MODES: &[&str] = &[
    "double",
    "stack",
    "static",
    "interior",
    "realloc-stack",
    "realloc-freed",
];

/// The bare runs, made once per test binary. Each must pass on its own, or the fixture is wrong.
fn bare_runs() -> &'static HashMap<&'static str, Output> {
    static RUNS: OnceLock<HashMap<&'static str, Output>> = OnceLock::new();
    RUNS.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|&name| {
                let out = run_limited(&mut bare(common::fixture(name), &[]), LIMIT);
                assert!(
                    out.status.success(),
                    "fixture {name} fails without libdmem ({}):\n{}{}",
                    status_text(&out.status),
                    common::text(&out.stdout),
                    common::text(&out.stderr)
                );
                (name, out)
            })
            .collect()
    })
}

/// Runs every fixture preloaded with `opts` over `backend` and compares it with its bare run.
fn compare_all(opts: &str, backend: Option<&Path>) -> Vec<String> {
    let bare = bare_runs();
    FIXTURES
        .iter()
        .filter_map(|&name| {
            let got = run_limited(&mut with_dmem(common::fixture(name), &[], opts, backend), LIMIT);
            mismatch(&bare[name], &got).map(|why| format!("{name}: {why}"))
        })
        .collect()
}

#[test]
fn fixtures_pass_bare() {
    assert_eq!(bare_runs().len(), FIXTURES.len());
}

#[test]
fn fixtures_match_bare_run_with_default_options() {
    assert_none("default options", &compare_all("", None));
}

#[test]
fn fixtures_match_bare_run_with_log_allocs_and_without() {
    let mut failures = compare_all("log-allocs", None);
    failures.extend(
        compare_all("no-log-allocs", None)
            .into_iter()
            .map(|f| format!("no-log-allocs: {f}")),
    );
    assert_none("log-allocs / no-log-allocs", &failures);
}

fn under_backend(name: &str) {
    let Some(lib) = common::backend(name) else {
        return;
    };
    let mut failures = compare_all("", Some(&lib));
    failures.extend(bad_free_failures(Some(&lib)));
    assert_none(&format!("over {name}"), &failures);
}

#[test]
fn fixtures_match_bare_run_over_jemalloc() {
    under_backend("jemalloc");
}

#[test]
fn fixtures_match_bare_run_over_tcmalloc() {
    under_backend("tcmalloc");
}

#[test]
fn fixtures_match_bare_run_over_mimalloc() {
    under_backend("mimalloc");
}

#[test]
fn fork_from_threaded_program_does_not_hang() {
    // run_limited kills and fails on a hang; a second run adds tracing, whose writes happen
    // under the same locks as the hammering threads' calls.
    for opts in ["", "trace-file=/dev/null"] {
        let out = run_limited(
            &mut with_dmem(common::fixture("fork_threads"), &[], opts, None),
            LIMIT,
        );
        assert!(
            out.status.success(),
            "fork_threads with DMEM_OPTS={opts:?}: {}\n{}{}",
            status_text(&out.status),
            common::text(&out.stdout),
            common::text(&out.stderr)
        );
    }
}

/// A thread finds the top of its stack without looking anything up under `/proc`: the kernel
/// keeps what a process looked up there and drops it again when the process is reaped, which,
/// for a short-lived child with a thread of its own, made each `waitpid` of fork_threads' parent
/// take seconds on one busy processor. Traced with strace: no file under `/proc` that lists
/// mappings is opened, while every child's thread does probe its stack (`process_vm_readv`),
/// which shows the trace covers the children.
#[test]
fn threads_find_their_stacks_without_proc() {
    if !common::have_tool("strace") {
        return;
    }
    let dir = common::scratch_dir("threads_find_their_stacks_without_proc");
    let log = dir.join("strace.txt");
    let mut cmd = std::process::Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=openat,open,process_vm_readv", "-o"])
        .arg(&log)
        .arg("-E")
        .arg(format!("LD_PRELOAD={}", common::lib_path().display()))
        .args(["-E", "DMEM_OPTS="])
        .arg(common::fixture("fork_threads"));
    let out = run_limited(&mut cmd, LIMIT);
    assert!(
        out.status.success(),
        "fork_threads under strace: {}\n{}{}",
        status_text(&out.status),
        common::text(&out.stdout),
        common::text(&out.stderr)
    );
    let trace = std::fs::read_to_string(&log).expect("strace's log");
    let maps: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("\"/proc/") && l.contains("maps\""))
        .collect();
    assert!(
        maps.is_empty(),
        "mappings read through /proc:\n{}",
        maps.join("\n")
    );
    // strace numbers each line with the thread's id; the probing processes are the parent and
    // its 120 children (each probes from the thread it starts).
    let probing: HashSet<&str> = trace
        .lines()
        .filter(|l| l.contains("process_vm_readv("))
        .filter_map(|l| {
            l.split_once("process_vm_readv(")?
                .1
                .split_once(',')
                .map(|(pid, _)| pid)
        })
        .collect();
    assert!(
        probing.len() > 120,
        "{} processes probed their stacks:\n{trace:.2000}",
        probing.len()
    );
}

/// One trace line: `name(args) = result` or `free(ptr)`.
struct Call {
    name: String,
    args: Vec<String>,
    result: Option<String>,
}

fn parse_call(line: &str) -> Option<Call> {
    let open = line.find('(')?;
    let name = &line[..open];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    // Arguments may contain parentheses themselves (`(nil)`), so split at `) = ` or the end.
    let (inner, result) = match line.find(") = ") {
        Some(close) => (&line[open + 1..close], Some(line[close + 4..].to_owned())),
        None => (line[open + 1..].strip_suffix(')')?, None),
    };
    let args = inner.split(", ").map(str::to_owned).collect();
    Some(Call {
        name: name.to_owned(),
        args,
        result,
    })
}

fn is_ptr(s: &str) -> bool {
    s.starts_with("0x") && s.len() > 2 && s[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pointer a successful allocation call returned: `0x…`, or for posix_memalign `0 (0x…)`.
fn returned_ptr(c: &Call) -> Option<String> {
    let r = c.result.as_deref()?;
    let r = r
        .strip_prefix("0 (")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or(r);
    is_ptr(r).then(|| r.to_owned())
}

/// Replays a single-threaded program's trace: every pointer freed or reallocated must be live
/// (returned earlier and not yet freed), and no live pointer may be returned again.
fn trace_inconsistencies(trace: &str) -> (usize, Vec<String>) {
    let mut live: HashSet<String> = HashSet::new();
    let mut errors = Vec::new();
    let mut calls = 0;
    let fresh = |p: String, line: &str, live: &mut HashSet<String>, errors: &mut Vec<String>| {
        if !live.insert(p) {
            errors.push(format!("returned a pointer that is still live: {line}"));
        }
    };
    for line in trace.lines() {
        let Some(c) = parse_call(line) else { continue };
        match c.name.as_str() {
            "free" => {
                calls += 1;
                let p = &c.args[0];
                if p != "(nil)" && !live.remove(p) {
                    errors.push(format!("freed a pointer that is not live: {line}"));
                }
            }
            "realloc" => {
                calls += 1;
                let (old, size) = (&c.args[0], c.args.get(1).map(String::as_str).unwrap_or(""));
                if old != "(nil)" && !live.contains(old) {
                    errors.push(format!("realloc of a pointer that is not live: {line}"));
                }
                match returned_ptr(&c) {
                    Some(new) => {
                        live.remove(old);
                        fresh(new, line, &mut live, &mut errors);
                    }
                    // realloc(p, 0) frees p; any other failure leaves it alone.
                    None if size == "0" => {
                        live.remove(old);
                    }
                    None => {}
                }
            }
            "malloc" | "calloc" | "memalign" | "aligned_alloc" | "posix_memalign" | "valloc" | "pvalloc" => {
                calls += 1;
                if let Some(p) = returned_ptr(&c) {
                    fresh(p, line, &mut live, &mut errors);
                }
            }
            _ => {}
        }
    }
    (calls, errors)
}

#[test]
fn trace_stderr_keeps_output_and_is_consistent() {
    let bare = bare_runs();
    let mut failures = Vec::new();
    for &name in FIXTURES {
        let got = run_limited(
            &mut with_dmem(common::fixture(name), &[], "trace-stderr", None),
            LIMIT,
        );
        if let Some(why) = mismatch(&bare[name], &got) {
            failures.push(format!("{name}: {why}"));
            continue;
        }
        let trace = common::text(&got.stderr);
        if SINGLE_THREADED.contains(&name) {
            let (calls, errors) = trace_inconsistencies(&trace);
            if calls == 0 {
                failures.push(format!("{name}: no trace lines on stderr"));
            }
            failures.extend(errors.into_iter().take(5).map(|e| format!("{name}: {e}")));
        } else if !trace.lines().any(|l| l.starts_with("malloc(")) {
            failures.push(format!("{name}: no malloc lines on stderr"));
        }
    }
    assert_none("trace-stderr", &failures);
}

/// The original libdmem's example: the driver's own two blocks, in order, with the first freed.
fn check_driver_trace(trace: &str) {
    let lines: Vec<&str> = trace.lines().collect();
    let find = |from: usize, pred: &dyn Fn(&str) -> bool| {
        lines[from..].iter().position(|l| pred(l)).map(|i| i + from)
    };
    let m512 = find(0, &|l| l.starts_with("malloc(512) = 0x")).expect("a `malloc(512) = 0x…` line");
    let p512 = lines[m512].rsplit(' ').next().unwrap().to_owned();
    let f512 = find(m512, &|l| l == format!("free({p512})"))
        .unwrap_or_else(|| panic!("no free({p512}) after malloc(512):\n{trace}"));
    let m2048 = find(f512, &|l| l.starts_with("malloc(2048) = 0x"))
        .expect("a `malloc(2048) = 0x…` line after the free");
    let p2048 = lines[m2048].rsplit(' ').next().unwrap().to_owned();
    assert!(
        !lines.contains(&format!("free({p2048})").as_str()),
        "the leaked block was freed:\n{trace}"
    );
    let (_, errors) = trace_inconsistencies(trace);
    assert!(errors.is_empty(), "inconsistent trace: {errors:?}");
}

#[test]
fn trace_stderr_shows_the_drivers_calls() {
    let out = run_limited(
        &mut with_dmem(common::fixture("driver"), &[], "trace-stderr", None),
        LIMIT,
    );
    assert!(out.status.success(), "{}", status_text(&out.status));
    check_driver_trace(&common::text(&out.stderr));
}

#[test]
fn trace_file_receives_the_trace_instead_of_stderr() {
    let dir = common::scratch_dir("trace_file");
    let path = dir.join("trace.txt");
    let opts = format!("trace-file={}", path.display());
    let out = run_limited(&mut with_dmem(common::fixture("driver"), &[], &opts, None), LIMIT);
    assert!(
        mismatch(&bare_runs()["driver"], &out).is_none(),
        "{:?}",
        mismatch(&bare_runs()["driver"], &out)
    );
    let stderr = common::text(&out.stderr);
    assert!(
        !stderr.lines().any(|l| parse_call(l).is_some()),
        "trace lines on stderr:\n{stderr}"
    );
    let trace = std::fs::read_to_string(&path).expect("trace file written");
    check_driver_trace(&trace);
}

/// A trace file that is a FIFO nobody reads neither holds the program before `main` nor hides
/// the trace: one line says why, and the trace goes to stderr.
#[test]
fn a_trace_file_on_a_fifo_nobody_reads_goes_to_stderr() {
    let dir = common::scratch_dir("trace_fifo");
    let fifo = dir.join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let opts = format!("trace-file={}", fifo.display());
    let out = run_limited(&mut with_dmem(common::fixture("driver"), &[], &opts, None), LIMIT);
    assert!(
        !run::timed_out(&out),
        "the program waited for a reader of the FIFO"
    );
    assert!(
        mismatch(&bare_runs()["driver"], &out).is_none(),
        "{:?}",
        mismatch(&bare_runs()["driver"], &out)
    );
    let stderr = common::text(&out.stderr);
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("dmem:")).collect();
    assert_eq!(
        said,
        [format!(
            "dmem: cannot open trace-file '{}' (a FIFO that nothing reads); tracing to stderr",
            fifo.display()
        )],
        "{stderr}"
    );
    check_driver_trace(&stderr);
}

/// What a program can read of glibc's contract beyond its own checks (`invisible_contract`):
/// usable sizes of small blocks, errno after a failed posix_memalign, the address space a 1 GiB
/// alignment takes, as bare.
#[test]
fn glibcs_usable_sizes_errno_and_alignment_cost_hold_preloaded() {
    let prog = common::fixture("invisible_contract");
    let want = run_limited(&mut bare(&prog, &[]), LIMIT);
    assert!(want.status.success(), "{}", status_text(&want.status));
    for opts in ["", "no-log-allocs"] {
        let got = run_limited(&mut with_dmem(&prog, &[], opts, None), LIMIT);
        assert_eq!(
            common::text(&got.stdout),
            common::text(&want.stdout),
            "DMEM_OPTS={opts:?}:
{}",
            common::text(&got.stderr)
        );
    }
}

const OPTION_NAMES: &[&str] = &[
    "trace-stderr",
    "trace-file",
    "log-allocs",
    "no-log-allocs",
    "abort-shutdown",
    "ignore-bad-free",
    "help",
];

#[test]
fn help_prints_the_options_and_the_program_runs() {
    let out = run_limited(
        &mut with_dmem(common::fixture("driver"), &[], "help", None),
        LIMIT,
    );
    assert!(
        mismatch(&bare_runs()["driver"], &out).is_none(),
        "{:?}",
        mismatch(&bare_runs()["driver"], &out)
    );
    let stderr = common::text(&out.stderr);
    for name in OPTION_NAMES {
        assert!(stderr.contains(name), "help does not mention {name}:\n{stderr}");
    }
}

#[test]
fn unknown_or_malformed_option_warns_once_and_the_program_runs() {
    for (opts, word) in [
        ("frobnicate", "frobnicate"),
        ("frobnicate,trace-stderr", "frobnicate"),
        ("trace-stderr,trace-file=", "trace-file="),
        ("log-allocs=yes", "log-allocs=yes"),
    ] {
        let out = run_limited(&mut with_dmem(common::fixture("driver"), &[], opts, None), LIMIT);
        let stderr = common::text(&out.stderr);
        assert!(
            mismatch(&bare_runs()["driver"], &out).is_none(),
            "DMEM_OPTS={opts}: {:?}",
            mismatch(&bare_runs()["driver"], &out)
        );
        let other: Vec<&str> = stderr.lines().filter(|l| parse_call(l).is_none()).collect();
        assert_eq!(
            other.len(),
            1,
            "DMEM_OPTS={opts}: want one warning line, got:\n{}",
            other.join("\n")
        );
        let warning = other[0];
        assert!(
            warning.contains(word),
            "DMEM_OPTS={opts}: warning does not name {word:?}: {warning}"
        );
        for name in OPTION_NAMES {
            assert!(
                warning.contains(name),
                "DMEM_OPTS={opts}: warning does not name {name}: {warning}"
            );
        }
        // An option after the bad one still takes effect.
        if opts.contains("trace-stderr") {
            check_driver_trace(&stderr);
        }
    }
}

/// The pointer the bad_free fixture announced (the last word of its second line).
fn announced_pointer(stdout: &str) -> Option<String> {
    let line = stdout.lines().nth(1)?;
    let p = line.rsplit(' ').next()?;
    is_ptr(p).then(|| p.to_owned())
}

fn bad_free_failures(backend: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    for &mode in BAD_FREE_MODES {
        for opts in ["", "ignore-bad-free"] {
            let out = run_limited(
                &mut with_dmem(common::fixture("bad_free"), &[mode], opts, backend),
                LIMIT,
            );
            let (stdout, stderr) = (common::text(&out.stdout), common::text(&out.stderr));
            let what = format!("bad_free {mode} (DMEM_OPTS={opts:?})");
            let Some(ptr) = announced_pointer(&stdout) else {
                failures.push(format!(
                    "{what}: no pointer announced, {}: {stdout}",
                    status_text(&out.status)
                ));
                continue;
            };
            let naming = stderr.lines().filter(|l| l.contains(&ptr)).count();
            if naming != 1 {
                failures.push(format!(
                    "{what}: {naming} stderr lines name {ptr}, want 1:\n{stderr}"
                ));
            }
            if opts.is_empty() {
                if out.status.signal() != Some(6) || stdout.contains("survived") {
                    failures.push(format!(
                        "{what}: {}, want SIGABRT at the bad call",
                        status_text(&out.status)
                    ));
                }
            } else if !out.status.success() || !stdout.ends_with("survived\n") {
                failures.push(format!(
                    "{what}: {}, want it to carry on:\n{stdout}{stderr}",
                    status_text(&out.status)
                ));
            }
        }
    }
    failures
}

#[test]
fn bad_frees_are_named_then_abort_unless_ignored() {
    assert_none("bad frees", &bad_free_failures(None));
}

/// One header read from the core, by the descriptor's offsets.
#[derive(Debug)]
struct Block {
    header: u64,
    size: u64,
    tid: u32,
    frames: Vec<u64>,
}

/// Reads `dmem_layout` from the core and walks every list, checking the links, the magic, the
/// list index and the counters on the way.
fn walk_lists(core: &Core, lib: &Path) -> Vec<Block> {
    let lib_elf = Elf::open(lib);
    let (sym, _) = lib_elf
        .symbol(SHT_DYNSYM, "dmem_layout")
        .expect("dmem_layout in .dynsym");
    let bias = core
        .load_bias(lib, &lib_elf)
        .expect("libdmem.so among the core's mapped files");
    let at = bias + sym;
    let f = common::read_descriptor(at, |a, len| {
        core.read(a, len)
            .unwrap_or_else(|| panic!("dmem_layout at {a:#x} not in the core"))
    });
    let w = |name: &str| f.get(name).unwrap_or_else(|| panic!("descriptor field {name}"));
    use common::descriptor::field::*;
    assert_eq!(w(HEADER_SIZE), 112, "header size");
    let (nframes, off_next, off_prev) = (w(NFRAMES), w(OFF_NEXT), w(OFF_PREV));
    let (off_frames, off_size, size_bits) = (w(OFF_FRAMES), w(OFF_SIZE), w(SIZE_BITS));
    let (off_tid, off_magic, magic_live) = (w(OFF_TID), w(OFF_MAGIC), w(MAGIC_LIVE));
    // Freed by another thread and still linked until the list's owner unlinks it.
    let magic_handed = w(MAGIC_HANDED);
    let (off_handed, off_handed_bytes) = (w(LIST_OFF_HANDED_BLOCKS), w(LIST_OFF_HANDED_BYTES));
    let (off_drained, off_drained_bytes) = (w(LIST_OFF_DRAINED_BLOCKS), w(LIST_OFF_DRAINED_BYTES));
    let (lists, nlists, stride, off_head) = (w(LISTS), w(NLISTS), w(LIST_STRIDE), w(LIST_OFF_HEAD));
    let (off_live_blocks, off_live_bytes) = (w(LIST_OFF_LIVE_BLOCKS), w(LIST_OFF_LIVE_BYTES));
    let (off_allocs, off_frees) = (w(LIST_OFF_ALLOCS), w(LIST_OFF_FREES));
    let flags = core.u64(w(FLAGS)).expect("flags word in the core");
    let (list_shift, list_bits) = (w(SIZE_LIST_SHIFT), w(SIZE_LIST_BITS));
    assert!(
        list_shift >= size_bits && list_bits >= 6,
        "size word fields overlap"
    );
    assert_eq!(flags & 1, 1, "recording was off");
    // A header's magic is stored sealed with the process's secret and the header's address.
    let key = core.u64(w(MAGIC_KEY)).expect("the secret in the core");
    let rd = |a: u64| {
        core.u64(a)
            .unwrap_or_else(|| panic!("address {a:#x} not in the core"))
    };
    let rd32 = |a: u64| {
        let b = core
            .read(a, 4)
            .unwrap_or_else(|| panic!("address {a:#x} not in the core"));
        u32::from_le_bytes(b.try_into().unwrap())
    };

    let mut blocks = Vec::new();
    for i in 0..nlists {
        let list = lists + i * stride;
        let (mut h, mut prev, mut count, mut bytes) = (rd(list + off_head), 0, 0u64, 0u64);
        let (mut handed, mut handed_bytes) = (0u64, 0u64);
        while h != 0 {
            assert!(count < 10_000_000, "list {i} does not end");
            let magic = (rd32(h + off_magic) ^ common::descriptor::header_tag(h, key)) as u64;
            assert!(
                magic == magic_live || magic == magic_handed,
                "magic {magic:#x} of header {h:#x} on list {i}"
            );
            assert_eq!(rd(h + off_prev), prev, "prev link of header {h:#x} on list {i}");
            let word = rd(h + off_size);
            let size = word & ((1 << size_bits) - 1);
            assert_eq!(
                (word >> list_shift) & ((1 << list_bits) - 1),
                i,
                "list index recorded in header {h:#x}"
            );
            if magic == magic_handed {
                handed += 1;
                handed_bytes += size;
                prev = h;
                h = rd(h + off_next);
                continue;
            }
            let frames = (0..nframes).map(|f| rd(h + off_frames + 8 * f)).collect();
            blocks.push(Block {
                header: h,
                size,
                tid: rd32(h + off_tid),
                frames,
            });
            count += 1;
            bytes += size;
            prev = h;
            h = rd(h + off_next);
        }
        let (live, live_bytes) = (rd(list + off_live_blocks), rd(list + off_live_bytes));
        let (allocs, frees) = (rd(list + off_allocs), rd(list + off_frees));
        // The live counters still count the handed blocks; the hand-over counters say how many.
        let waiting = rd(list + off_handed) - rd(list + off_drained);
        let waiting_bytes = rd(list + off_handed_bytes) - rd(list + off_drained_bytes);
        assert_eq!(
            (waiting, waiting_bytes),
            (handed, handed_bytes),
            "handed blocks of list {i}"
        );
        assert_eq!(live, count + handed, "live_blocks counter of list {i}");
        assert_eq!(live_bytes, bytes + handed_bytes, "live_bytes counter of list {i}");
        assert_eq!(allocs - frees, live, "allocs - frees of list {i}");
    }
    blocks
}

fn cores_possible() -> bool {
    let piped = std::fs::read_to_string("/proc/sys/kernel/core_pattern").is_ok_and(|p| p.starts_with('|'));
    // Where cores go to a crash handler, gdb's gcore writes them instead.
    !piped || common::have_tool("gdb")
}

/// Makes a core of the driver with `lib` preloaded and finds its leak by the contract alone.
fn check_driver_core(dir: &Path, lib: &Path) {
    let driver = common::fixture("driver");
    let core_path = common::make_core(dir, &driver, &[], "abort-shutdown", lib);
    let core = Core::open(&core_path);
    let blocks = walk_lists(&core, lib);

    let exe = Elf::open(&driver);
    let (main, main_size) = exe
        .symbol(SHT_SYMTAB, "main")
        .expect("main in the driver's .symtab");
    let bias = core
        .load_bias(&driver, &exe)
        .expect("the driver among the core's mapped files");
    let in_main = |pc: u64| (bias + main..bias + main + main_size).contains(&pc);
    let pid = *core.threads.first().expect("an NT_PRSTATUS note");

    let leaks: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.size == 2048 && b.frames.iter().any(|&f| in_main(f)))
        .collect();
    assert_eq!(
        leaks.len(),
        1,
        "want the one 2048-byte block from main among {} blocks: {blocks:#x?}",
        blocks.len()
    );
    let leak = leaks[0];
    assert_eq!(
        leak.tid, pid,
        "thread id in header {:#x} (process {pid})",
        leak.header
    );
    assert!(
        in_main(leak.frames[0]),
        "frame 0 of the leak is not the return address into main: {leak:#x?}"
    );
    let freed: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.size == 512 && b.frames.iter().any(|&f| in_main(f)))
        .collect();
    assert!(
        freed.is_empty(),
        "the freed 512-byte block is still listed: {freed:#x?}"
    );
}

#[test]
fn core_at_shutdown_holds_the_drivers_leak() {
    if cores_possible() {
        check_driver_core(&common::scratch_dir("driver_core"), &common::lib_path());
    }
}

/// The descriptor is found through .dynsym alone: a stripped copy of the library works the same.
#[test]
fn core_of_a_stripped_library_holds_the_drivers_leak() {
    if !cores_possible() {
        return;
    }
    if !common::have_tool("strip") {
        return;
    }
    let strip = common::which("strip").expect("strip is on PATH");
    let dir = common::scratch_dir("driver_core_stripped");
    let lib = dir.join("libdmem.so");
    let out = run_limited(
        std::process::Command::new(strip)
            .arg("--strip-all")
            .arg("-o")
            .arg(&lib)
            .arg(common::lib_path()),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "strip failed: {}",
        common::text(&out.stderr)
    );
    assert!(
        Elf::open(&lib).symbol(SHT_SYMTAB, "dmem_layout").is_none(),
        "the stripped copy still has a .symtab"
    );
    check_driver_core(&dir, &lib);
}
