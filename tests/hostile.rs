//! Hostile and broken input: a heap the program overwrote, a core or a descriptor changed after
//! the fact, a file that is no file, control characters in what is echoed, a process that is
//! gone. Every answer is clear and bounded in time and memory: never a crash, a hang, or a
//! number taken for true.

mod common;
#[path = "common/elfcore.rs"]
mod elfcore;
#[path = "common/live.rs"]
mod live;
use common::run::{memory_limit, run_limited, status_text, timed_out};
use common::{dmem, fixture, lib_path, make_core, scratch_dir, text};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Far beyond what any launcher run here takes; only a hang comes near it.
const LIMIT: Duration = Duration::from_secs(60);
/// The address space one launcher run may take: plenty for a small core and the libraries it
/// maps, nothing like what reading an invented size would ask for.
const MEMORY: u64 = 2 << 30;

/// `dmem ARGS` under the time and memory limits; a run that hangs fails the test.
fn launcher(args: &[&str]) -> Output {
    let mut cmd = dmem();
    cmd.args(args);
    memory_limit(&mut cmd, MEMORY);
    let out = run_limited(&mut cmd, LIMIT);
    assert!(!timed_out(&out), "dmem {args:?} hung:\n{}", text(&out.stderr));
    out
}

/// Standard output and error of a run, together.
fn both(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// What the underflow fixture prints: the header it overwrites and the block in front of it.
struct Victim {
    broken: String,
    before: String,
}

impl Victim {
    fn from_lines(lines: &str) -> Victim {
        let find = |key: &str| {
            lines
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no '{key}' line in:\n{lines}"))
                .trim()
                .to_owned()
        };
        Victim {
            broken: find("broken "),
            before: find("before "),
        }
    }

    fn header(&self) -> u64 {
        u64::from_str_radix(self.broken.trim_start_matches("0x"), 16).unwrap()
    }

    /// The address 8 bytes into the block behind the broken header.
    fn inside(&self) -> String {
        format!("{:#x}", self.header() + 112 + 8)
    }

    /// The launcher names the broken header and the block in front of it, with its stack.
    fn assert_named(&self, said: &str, what: &str) {
        assert!(
            said.contains(&format!("header {} was overwritten: its size", self.broken)),
            "{what} does not name the header {}:\n{said}",
            self.broken
        );
        assert!(
            said.contains(&format!(
                "perhaps written past the end of the 64-byte block {} in front of it",
                self.before
            )) && said.contains("make_block"),
            "{what} does not name the block in front, {}, and its stack:\n{said}",
            self.before
        );
        // The size is quoted where the header is named, and nowhere else.
        assert!(
            !said
                .lines()
                .any(|l| !l.contains("was overwritten") && (l.contains("71748523") || l.contains("100000"))),
            "{what} believed the size:\n{said}"
        );
        assert!(
            !said.contains("changed too fast"),
            "{what} takes a broken list for a moving one:\n{said}"
        );
    }
}

/// The analysis commands on an image (`PROG CORE` or `PID`) of the underflow fixture: each
/// bounded, each naming the broken header, none counting its invented size.
fn assert_read_within_bounds(image: &[&str], v: &Victim) {
    let with = |cmd: &[&str]| -> Vec<String> {
        let mut w: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        w.splice(1..1, image.iter().map(|s| s.to_string()));
        w
    };
    let run = |cmd: &[&str]| {
        let words = with(cmd);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let out = launcher(&words);
        assert!(
            out.status.success(),
            "dmem {words:?}: {}\n{}",
            status_text(&out.status),
            both(&out)
        );
        out
    };
    // The 99 blocks whose sizes hold are the first stack (a running process also holds its
    // stdio buffer), the broken one in no total.
    let out = run(&["summary"]);
    v.assert_named(&both(&out), "summary");
    assert!(
        text(&out.stdout).contains("stack 1: 6336 bytes in 99 blocks"),
        "summary:\n{}",
        both(&out)
    );
    let out = run(&["leaks", "--show", "all"]);
    v.assert_named(&both(&out), "leaks");
    assert!(
        text(&out.stdout).contains("stack 1: 6336 bytes in 99 blocks (99 still reachable)"),
        "leaks:\n{}",
        both(&out)
    );
    // Problems found: verify says so in its answer and in its exit status.
    let out = {
        let words = with(&["verify"]);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        launcher(&words)
    };
    assert_eq!(out.status.code(), Some(1), "verify:\n{}", both(&out));
    v.assert_named(&both(&out), "verify");
    assert!(
        text(&out.stdout).contains("1 problem found"),
        "verify:\n{}",
        both(&out)
    );
    let inside = v.inside();
    let out = run(&["whatis", &inside]);
    v.assert_named(&both(&out), "whatis");
    assert!(
        text(&out.stdout).contains(&format!(
            "{inside}: not inside any live block; perhaps 8 bytes into the block behind the overwritten header {}",
            v.broken
        )),
        "whatis:\n{}",
        both(&out)
    );
    let out = run(&["snapshot", "--format", "folded", "-o", "-"]);
    v.assert_named(&both(&out), "snapshot");
    assert!(
        text(&out.stdout).lines().any(|l| l.ends_with(";make_block 6336")),
        "snapshot:\n{}",
        both(&out)
    );
}

/// A heap underflow over a header's size word: at exit the program ends as it does bare, and
/// the report names the header, leaves its block out of every total (or, for a size that fits,
/// says the list does not add up).
#[test]
fn an_overwritten_size_at_exit_is_named_and_the_exit_is_as_bare() {
    let prog = fixture("heap_underflow");
    for mode in ["wild", "plausible", "shrunk"] {
        let bare = run_limited(&mut common::run::bare(&prog, &[mode]), LIMIT);
        let out = run_limited(
            &mut common::run::with_dmem(&prog, &[mode], "leak-report,leak-show=all", None),
            LIMIT,
        );
        // The addresses it prints differ from run to run: the ending must not.
        assert_eq!(
            (out.status.code(), out.status.signal()),
            (bare.status.code(), bare.status.signal()),
            "{mode}: {} where the bare run ended with {}:\n{}",
            status_text(&out.status),
            status_text(&bare.status),
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        let v = Victim::from_lines(&text(&out.stdout));
        let summary = err
            .lines()
            .find(|l| l.starts_with("dmem: leak summary:"))
            .unwrap_or_else(|| panic!("{mode}: no report:\n{err}"));
        if mode == "shrunk" {
            assert!(
                summary.ends_with("still reachable: 6384 bytes in 100 blocks")
                    && err.contains(
                        "the blocks of list 0 add up to 6384 bytes in 100 blocks, but the list counted 6400 bytes in 100"
                    ),
                "{mode}:\n{err}"
            );
            continue;
        }
        assert!(
            summary.ends_with("still reachable: 6336 bytes in 99 blocks"),
            "{mode}: the broken block is counted:\n{err}"
        );
        assert!(
            err.contains(&format!("header {} on list 0 says its block holds", v.broken))
                && err.contains("the block is not in this report")
                && err.contains(&format!(
                    "perhaps written past the end of the 64-byte block {} in front of it",
                    v.before
                ))
                && err.contains("make_block"),
            "{mode}: the report does not name the header {} and the block in front {}:\n{err}",
            v.broken,
            v.before
        );
    }
}

/// The core of that program through summary, leaks, verify, whatis and snapshot, each under a
/// time and memory limit.
#[test]
fn a_core_with_an_overwritten_size_is_read_within_bounds() {
    let prog = fixture("heap_underflow");
    for mode in ["wild", "plausible"] {
        let dir = scratch_dir(&format!("hostile_core_{mode}"));
        let core = make_core(&dir, &prog, &[mode, "victim"], "abort-shutdown", &lib_path());
        let v = Victim::from_lines(&std::fs::read_to_string(dir.join("victim")).unwrap());
        assert_read_within_bounds(&[prog.to_str().unwrap(), core.to_str().unwrap()], &v);
    }
}

/// The running process the same: the same words as for its core, and no "changed too fast".
#[test]
fn a_running_process_with_an_overwritten_size_is_read_within_bounds() {
    for mode in ["wild", "plausible"] {
        // Running preloaded, its heap already overwritten; killed when dropped.
        let (target, said) = live::start_telling("heap_underflow", &[mode, "wait"]);
        let pid = target.pid.to_string();
        assert_read_within_bounds(&[&pid], &Victim::from_lines(&said));
    }
}

/// The offset in `core` of every copy of the layout descriptor this library writes.
fn descriptors(core: &[u8]) -> Vec<usize> {
    let mut want = b"DMEMLAYT".to_vec();
    want.extend_from_slice(&common::descriptor::VERSION.to_le_bytes());
    core.windows(16)
        .enumerate()
        .filter(|(_, w)| *w == want.as_slice())
        .map(|(i, _)| i)
        .collect()
}

/// The offset of field `name`'s value in the descriptor at `at`.
fn field_value(core: &[u8], at: usize, name: &str) -> usize {
    find_field(core, at, name).unwrap_or_else(|| panic!("no field {name}"))
}

fn find_field(core: &[u8], at: usize, name: &str) -> Option<usize> {
    use common::descriptor::{ENTRY_LEN, HEAD_LEN, NAME_LEN};
    let n = u64::from_le_bytes(core[at + 16..at + 24].try_into().unwrap()) as usize;
    (0..n)
        .map(|i| at + HEAD_LEN + i * ENTRY_LEN)
        .find(|&e| {
            let field = &core[e..e + NAME_LEN];
            field.starts_with(name.as_bytes()) && field[name.len()] == 0
        })
        .map(|e| e + NAME_LEN)
}

/// One word of the core's descriptor changed (the offset of the size in a header, the lists'
/// address) is one error naming the field, from every command, not counts of nothing.
#[test]
fn a_descriptor_changed_in_the_core_is_refused_naming_the_field() {
    let prog = fixture("heap_underflow");
    let dir = scratch_dir("hostile_descriptor");
    let core = make_core(&dir, &prog, &["intact"], "abort-shutdown", &lib_path());
    let bytes = std::fs::read(&core).unwrap();
    let at = descriptors(&bytes);
    assert!(!at.is_empty(), "the core holds no descriptor");
    for (name, delta) in [("off_size", 8u64), ("lists", 128)] {
        let mut changed = bytes.clone();
        for &d in &at {
            let v = field_value(&changed, d, name);
            let old = u64::from_le_bytes(changed[v..v + 8].try_into().unwrap());
            changed[v..v + 8].copy_from_slice(&(old + delta).to_le_bytes());
        }
        let path = dir.join(format!("core.{name}"));
        std::fs::write(&path, &changed).unwrap();
        for cmd in ["summary", "leaks", "verify"] {
            let out = launcher(&[cmd, prog.to_str().unwrap(), path.to_str().unwrap()]);
            let err = text(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{cmd} with {name} changed:\n{}",
                both(&out)
            );
            assert!(
                err.lines().count() == 1 && err.contains(&format!("its field {name} (field ")),
                "{cmd} with {name} changed:\n{err}"
            );
        }
    }
}

/// A FIFO (or anything else that is no regular file) named as a core or a snapshot is refused
/// at once; nothing blocks in open waiting for a writer.
#[test]
fn a_fifo_named_as_a_core_is_refused_at_once() {
    let dir = scratch_dir("hostile_fifo");
    let fifo = dir.join("core.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let fifo = fifo.to_str().unwrap();
    let prog = fixture("heap_underflow");
    let prog = prog.to_str().unwrap();
    let dir_s = dir.to_str().unwrap();
    for args in [
        vec!["summary", fifo],
        vec!["leaks", prog, fifo],
        vec!["snapshot", fifo, "-o", "-"],
        vec!["diff", fifo, fifo],
        vec!["verify", dir_s],
    ] {
        let mut cmd = dmem();
        cmd.args(&args);
        let out = run_limited(&mut cmd, Duration::from_secs(20));
        assert!(!timed_out(&out), "dmem {args:?} blocked");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "dmem {args:?}:\n{err}");
        assert!(
            err.contains("is a FIFO, not a regular file")
                || err.contains("is a directory, not a regular file"),
            "dmem {args:?}:\n{err}"
        );
    }
}

/// What echoes input (an option in DMEM_OPTS, a path or a word on the command line) shows its
/// control characters as escapes instead of sending them to the terminal.
#[test]
fn control_characters_in_echoed_input_are_escaped() {
    let raw = |b: &[u8]| b.iter().any(|&c| c == 0x1b || c == 0x07);
    let out = run_limited(
        &mut common::run::with_dmem("/bin/true", &[], "bogus\x1b]0;owned\x07,leak-show=x\x1b[2J", None),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert!(
        !raw(&out.stderr)
            && err.contains("'bogus\\x1b]0;owned\\x07'")
            && err.contains("'leak-show=x\\x1b[2J'"),
        "{err:?}"
    );
    for args in [
        vec!["summary", "/nonexistent/\x1b[2Jcore"],
        vec!["\x1b[31msummary"],
        vec!["summary", "--limit", "\x1b[1m"],
    ] {
        let out = launcher(&args);
        let err = text(&out.stderr);
        assert!(
            !out.status.success() && !raw(&out.stderr) && err.contains("\\x1b["),
            "dmem {args:?}: {err:?}"
        );
    }
}

/// A zombie of a preloaded process is said to be one, not a process without the library.
#[test]
fn a_zombie_is_said_to_have_exited() {
    // The shell's background child exits after the shell has become `sleep`, which never
    // reaps it (a child that ended sooner, the shell would reap on its way to the exec).
    let mut sh = common::preloaded("/bin/sh", "", None)
        .args(["-c", "sleep 0.5 & echo $!; exec sleep 60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let mut line = String::new();
    BufReader::new(sh.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let zombie = line.trim().to_owned();
    let state = || {
        std::fs::read_to_string(format!("/proc/{zombie}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
    };
    let t = std::time::Instant::now();
    while state() != Some(true) {
        assert!(t.elapsed() < LIMIT, "process {zombie} did not become a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = launcher(&["summary", &zombie]);
    let _ = sh.kill();
    let _ = sh.wait();
    let err = text(&out.stderr);
    assert!(
        out.status.code() == Some(1)
            && err.contains(&format!("process {zombie} ("))
            && err.contains("has exited (a zombie"),
        "{err}"
    );
}

/// A small generator of numbers, seeded, so a failing mutation can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Where in a core the mutations go: its notes, its heap, its descriptor and checks.
struct Targets {
    notes: std::ops::Range<usize>,
    heap: std::ops::Range<usize>,
    descriptor: Vec<std::ops::Range<usize>>,
}

fn targets(core: &[u8], core_path: &Path, heap_addr: u64) -> Targets {
    let elf = elfcore::Elf::open(core_path);
    let segs = elf.segments();
    let note = segs
        .iter()
        .find(|s| s.kind == object::elf::PT_NOTE.0)
        .expect("a PT_NOTE segment");
    let file_of = |addr: u64| {
        segs.iter()
            .find(|s| s.kind == object::elf::PT_LOAD.0 && s.vaddr <= addr && addr < s.vaddr + s.filesz)
            .map(|s| (s.offset + addr - s.vaddr) as usize)
    };
    // The blocks of the fixture (100 in a row, 192 bytes apart with glibc's own word), with a
    // page on either side; clipped to the segment's bytes in the file.
    let h = file_of(heap_addr).expect("the heap in the core");
    let seg = segs
        .iter()
        .find(|s| s.kind == object::elf::PT_LOAD.0 && s.vaddr <= heap_addr && heap_addr < s.vaddr + s.filesz)
        .unwrap();
    let (lo, hi) = (seg.offset as usize, (seg.offset + seg.filesz) as usize);
    let heap = h.saturating_sub(4096).max(lo)..(h + 100 * 192 + 4096).min(hi);
    let mut descriptor = Vec::new();
    for at in descriptors(core) {
        let n = u64::from_le_bytes(core[at + 16..at + 24].try_into().unwrap()) as usize;
        let len = common::descriptor::HEAD_LEN + n * common::descriptor::ENTRY_LEN;
        descriptor.push(at..at + len);
        let checks =
            find_field(core, at, "checks").map(|v| u64::from_le_bytes(core[v..v + 8].try_into().unwrap()));
        if let Some(c) = checks.and_then(file_of) {
            descriptor.push(c..c + 8 * (n + 1));
        }
    }
    Targets {
        notes: note.offset as usize..(note.offset + note.filesz) as usize,
        heap,
        descriptor,
    }
}

/// A few hundred seeded mutations of a small core (its notes, its heap, its descriptor), each
/// read by one of the analysis commands under a time and memory limit: no panic, no signal, no
/// hang, and a changed descriptor is never read in silence.
#[test]
fn mutated_cores_never_crash_hang_or_go_unsaid() {
    let prog = fixture("heap_underflow");
    let dir = scratch_dir("hostile_fuzz");
    let core_path = make_core(&dir, &prog, &["intact", "victim"], "abort-shutdown", &lib_path());
    let core = std::fs::read(&core_path).unwrap();
    let v = Victim::from_lines(&std::fs::read_to_string(dir.join("victim")).unwrap());
    let t = targets(&core, &core_path, v.header() - 50 * 192);
    let seed: u64 = std::env::var("DMEM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_d3e3_a11c);
    const RUNS: usize = 300;
    const WORKERS: usize = 3;
    let commands: [&[&str]; 7] = [
        &["summary"],
        &["leaks"],
        &["verify"],
        &["stats"],
        &["whatis", "0x1000"],
        &["snapshot", "-o", "-"],
        &["history"],
    ];
    let failures = std::sync::Mutex::new(Vec::new());
    let noticed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (t, core, failures, prog, dir, noticed) = (&t, &core, &failures, &prog, &dir, &noticed);
            s.spawn(move || {
                for k in (w..RUNS).step_by(WORKERS) {
                    let mut rng = Rng(seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    let (region, range) = match k % 3 {
                        0 => ("notes", t.notes.clone()),
                        1 => ("heap", t.heap.clone()),
                        _ => ("descriptor", t.descriptor[rng.below(t.descriptor.len())].clone()),
                    };
                    let mut m = core.clone();
                    mutate(&mut m, range, &mut rng);
                    if m == *core {
                        continue;
                    }
                    let path = dir.join(format!("core.{k}"));
                    std::fs::write(&path, &m).unwrap();
                    let cmd = commands[k % commands.len()];
                    let mut words = vec![cmd[0], prog.to_str().unwrap(), path.to_str().unwrap()];
                    words.extend_from_slice(&cmd[1..]);
                    let mut c = dmem();
                    c.args(&words);
                    memory_limit(&mut c, MEMORY);
                    let out = run_limited(&mut c, LIMIT);
                    let _ = std::fs::remove_file(&path);
                    let err = text(&out.stderr);
                    let said = both(&out);
                    let what = format!(
                        "mutation {k} (seed {seed}) of the {region}, dmem {}",
                        cmd.join(" ")
                    );
                    let bad = if timed_out(&out) {
                        Some("hung".to_owned())
                    } else if let Some(sig) = out.status.signal() {
                        Some(format!("died of signal {sig}"))
                    } else if err.contains("panicked") || !matches!(out.status.code(), Some(0..=2)) {
                        Some(format!("{}: {err}", status_text(&out.status)))
                    } else if region == "descriptor" && out.status.success() && !said.contains("descriptor") {
                        Some("read a changed descriptor in silence".to_owned())
                    } else {
                        None
                    };
                    if let Some(why) = bad {
                        failures.lock().unwrap().push(format!("{what}: {why}"));
                    }
                    if !out.status.success() || said.contains("warning") {
                        noticed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    common::run::assert_none("mutated cores", &failures.into_inner().unwrap());
    // The mutations reach what the readers check: a third go to the descriptor, each refused;
    // of the rest, which change block contents as often as headers, a good part more.
    let noticed = noticed.into_inner();
    assert!(
        noticed > RUNS * 2 / 5,
        "only {noticed} of {RUNS} mutated cores were noticed"
    );
}

/// Changes one to four places of `range` in `m`: a byte to any value, or an aligned word to one
/// of the values that break readers (zero, all ones, a huge count, a nearby address, another
/// word of the core).
fn mutate(m: &mut [u8], range: std::ops::Range<usize>, rng: &mut Rng) {
    let len = range.end - range.start;
    for _ in 0..1 + rng.below(4) {
        let at = range.start + rng.below(len);
        if rng.below(2) == 0 || len < 8 {
            m[at] ^= 1 + rng.below(255) as u8;
            continue;
        }
        let w = (at & !7).max(range.start).min(range.end - 8);
        let old = u64::from_le_bytes(m[w..w + 8].try_into().unwrap());
        let other = rng.below(m.len() / 8 - 1) * 8;
        let new = match rng.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << (32 + rng.below(24)),
            3 => old.wrapping_add((rng.below(512) as u64).wrapping_sub(256)),
            4 => u64::from_le_bytes(m[other..other + 8].try_into().unwrap()),
            _ => rng.next(),
        };
        m[w..w + 8].copy_from_slice(&new.to_le_bytes());
    }
}

/// A run of the attack fixture: bare, or preloaded (with no options), with no core.
fn attack(mode: &str, preload: bool) -> Output {
    let prog = fixture("heap_attack");
    let mut cmd = if preload {
        common::run::with_dmem(&prog, &[mode], "", None)
    } else {
        common::run::bare(&prog, &[mode])
    };
    common::run::no_cores(&mut cmd);
    let out = run_limited(&mut cmd, LIMIT);
    assert!(!timed_out(&out), "heap_attack {mode} hung");
    out
}

/// The one line libdmem writes before it aborts on a header it finds overwritten, naming it.
fn assert_corruption_line(mode: &str, err: &str, what: &str) {
    let line = err
        .lines()
        .find(|l| l.starts_with("dmem: heap corruption: the header at 0x"))
        .unwrap_or_else(|| panic!("{mode}: no corruption line:\n{err}"));
    assert!(
        line.contains(what) && line.ends_with("; aborting"),
        "{mode}: {line}"
    );
}

/// An overflow into the next block's header and then a free or realloc of that block: glibc
/// bare finds its own size word overwritten and aborts; under libdmem the header's list links
/// are checked before anything is written through them, and the run aborts the same way with
/// one line naming the header (before, the unlink followed the links: SIGSEGV).
#[test]
fn an_overflow_into_the_next_header_aborts_as_bare_with_one_line() {
    for mode in ["overflow-free", "overflow-realloc"] {
        let bare = attack(mode, false);
        assert_eq!(
            bare.status.signal(),
            Some(libc::SIGABRT),
            "{mode} bare: {}",
            both(&bare)
        );
        let out = attack(mode, true);
        let err = text(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{mode}: {} under libdmem:\n{}",
            status_text(&out.status),
            both(&out)
        );
        assert_corruption_line(mode, &err, "has list links that do not lead back to it");
        assert!(
            text(&out.stdout).contains("target untouched"),
            "{mode}: {}",
            both(&out)
        );
    }
}

/// Forged list links (the classic unlink write-what-where that safe unlinking closed in glibc):
/// the free checks that each neighbour leads back before it writes, so the attacker's target
/// keeps its value and the run aborts.
#[test]
fn forged_list_links_write_nothing() {
    let out = attack("unlink-write", true);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("target untouched") && !said.contains("target written"),
        "{}",
        both(&out)
    );
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{}", both(&out));
    assert_corruption_line("unlink-write", &err, "list links");
}

/// Forged words that would make free hand an address of the attacker's choice to glibc (a fake
/// chunk in .bss, which a later malloc would return): the word that locates an aligned block's
/// backend block is sealed with the process's secret and checked against where the library puts
/// it; a header is believed only with the magic sealed for its own address. Both abort, and no
/// allocation comes from .bss.
#[test]
fn forged_header_words_free_nothing_outside_the_heap() {
    for (mode, line) in [
        (
            "forged-base",
            Some("a word locating its aligned block that the library did not write"),
        ),
        ("forged-header", None),
    ] {
        let out = attack(mode, true);
        let (said, err) = (text(&out.stdout), text(&out.stderr));
        assert!(!said.contains("block in .bss"), "{mode}: {}", both(&out));
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{mode}: {}", both(&out));
        match line {
            Some(what) => assert_corruption_line(mode, &err, what),
            None => assert!(
                err.contains("pointer was not allocated by this allocator") && err.contains("; aborting"),
                "{mode}: {err}"
            ),
        }
    }
    // Without an attack the program runs to its end either way.
    for preload in [false, true] {
        let out = attack("intact", preload);
        assert!(
            out.status.success() && text(&out.stdout).contains("target untouched"),
            "{}",
            both(&out)
        );
    }
}
