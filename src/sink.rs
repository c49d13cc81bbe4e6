//! Where libdmem's output goes: standard error, the trace file and the report file, each
//! checked to be the same file before every write, and what becomes of them when the program
//! closes, replaces or hands away its descriptors.
//!
//! A program must find the descriptors it would find bare. So while it runs, libdmem keeps no
//! descriptor of standard error: a message (a bad free, the trace, a bad option) goes to
//! descriptor 2 as it is, while it still names the file standard error named at start, or the
//! one the program put there with `dup2` (`fdhooks.rs` says when). Only the leak report needs
//! more, since it comes after the program is done: coreutils and everything built on gnulib
//! close standard error with `fclose` in an exit handler, xz right before it calls `exit`. So a
//! private copy of standard error (close-on-exec, high) is taken at the moment the program
//! calls `fclose` on it, or exit begins (our export of `exit`, or a thread-local destructor of
//! the main thread, which glibc's `exit` runs before any exit handler), whichever comes first.
//! The copy is let go when the program closes or replaces descriptor 2 itself (`close`, `dup2`,
//! `dup3`) or becomes a daemon (`daemon`, `setsid`, after which none is taken), and in a child
//! forked from then on; so a daemon never keeps its caller's pipe open. The trace and report
//! files have private descriptors of their own, high too: a number the program closes or `dup2`s
//! onto is let go or moved, so the program finds it free, as bare.
//!
//! Files are opened without blocking, so a FIFO nobody reads is refused at once (the output then
//! goes to standard error, and one line says why), and a write that fails sends the rest to
//! standard error, saying why once. Nothing here changes errno.
//!
//! Everything here runs without allocating: paths are expanded into fixed buffers.

use crate::errno::{self, Keep};
use crate::out::{decimal, write_all, Out, Route};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};

/// The number a private descriptor takes when the limit allows: above what programs number by
/// hand (bash keeps its script on 255, many servers dup2 onto single digits).
const HIGH_FD: i32 = 700;
/// Never below this: a shell's redirections number descriptors up to 9.
const LOWEST_FD: i32 = 10;

/// One destination: a descriptor and the identity of the file it was opened on.
pub struct Sink {
    fd: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
    /// Whether the file is a pipe or a socket, where a write may raise SIGPIPE.
    pipe: AtomicBool,
    /// Whether it was ever opened in this process (a reopened shared file appends).
    opened: AtomicBool,
    /// Whether a write was dropped because the file went away (said once in the report file).
    lost: AtomicBool,
}

impl Sink {
    const fn closed() -> Sink {
        Sink {
            fd: AtomicI32::new(-1),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            pipe: AtomicBool::new(false),
            opened: AtomicBool::new(false),
            lost: AtomicBool::new(false),
        }
    }

    /// Takes a private, high, close-on-exec copy of `fd` as this sink's descriptor, closing `fd`
    /// itself unless `keep_original` (standard error stays the program's). False when no high
    /// number is free, or `fd` is not open.
    fn adopt(&self, fd: i32, keep_original: bool) -> bool {
        let high = high_dup(fd);
        if !keep_original {
            raw_close(fd);
        }
        high >= 0 && self.point_at(high)
    }

    /// Uses `fd` as it is, remembering which file it names.
    fn point_at(&self, fd: i32) -> bool {
        let Some((dev, ino, pipe)) = identity(fd) else {
            if fd != 2 {
                raw_close(fd);
            }
            return false;
        };
        self.dev.store(dev, Ordering::Relaxed);
        self.ino.store(ino, Ordering::Relaxed);
        self.pipe.store(pipe, Ordering::Relaxed);
        self.opened.store(true, Ordering::Relaxed);
        self.fd.store(fd, Ordering::Release);
        true
    }

    /// The descriptor, while it still names the file it was opened on.
    pub fn fd(&self) -> Option<i32> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        if !self.names_our_file(fd) {
            self.lost.store(true, Ordering::Relaxed);
            return None;
        }
        Some(fd)
    }

    fn names_our_file(&self, fd: i32) -> bool {
        identity(fd).is_some_and(|(dev, ino, _)| {
            (dev, ino) == (self.dev.load(Ordering::Relaxed), self.ino.load(Ordering::Relaxed))
        })
    }

    /// Whether `fd` is this sink's private descriptor (descriptor 2 is always the program's).
    fn holds(&self, fd: i32) -> bool {
        fd >= 0 && fd != 2 && self.fd.load(Ordering::Relaxed) == fd
    }

    /// Lets the descriptor go: a private one is closed while it still names our file (a number
    /// the program has taken since is left alone).
    fn release(&self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 && fd != 2 && self.names_our_file(fd) {
            raw_close(fd);
        }
    }

    /// Moves a private descriptor to another high number, for a program that is about to
    /// `dup2` onto the number it had; it is let go if none is free.
    fn move_away(&self) {
        let fd = self.fd.load(Ordering::Acquire);
        let moved = high_dup(fd);
        self.fd.store(moved, Ordering::Release);
        raw_close(fd);
    }
}

/// A close-on-exec duplicate of `fd` on a high number below the soft limit of descriptors:
/// `HIGH_FD` when the limit allows, else the highest free number, never one below `LOWEST_FD`.
/// -1 when there is none.
fn high_dup(fd: i32) -> i32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(i32::MAX as u64) as i32
    } else {
        HIGH_FD + 1
    };
    let mut want = HIGH_FD.min(limit - 1);
    while want >= LOWEST_FD {
        // SAFETY: F_DUPFD_CLOEXEC only creates a descriptor (the lowest free one from `want`
        // up); a failure returns -1.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, want) };
        if high >= 0 {
            return high;
        }
        if errno::get() != libc::EMFILE {
            return -1;
        }
        // Every number from `want` up is taken: look lower.
        want -= 1;
    }
    -1
}

/// Closes a descriptor of ours with the system call itself: libdmem exports `close`, whose
/// bookkeeping is for the program's calls.
fn raw_close(fd: i32) {
    // SAFETY: closing a descriptor libdmem opened; close takes no memory.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// The device and inode of the file `fd` names, and whether it is a pipe or a socket.
fn identity(fd: i32) -> Option<(u64, u64, bool)> {
    // SAFETY: fstat only writes the stat buffer we pass; all-zero is a valid stat.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return None;
        }
        let kind = st.st_mode & libc::S_IFMT;
        Some((
            st.st_dev,
            st.st_ino,
            kind == libc::S_IFIFO || kind == libc::S_IFSOCK,
        ))
    }
}

/// The program's standard error.
pub static STDERR: Sink = Sink::closed();
/// `trace-file=PATH`.
pub static TRACE: Sink = Sink::closed();
/// `report-file=PATH`.
pub static REPORT: Sink = Sink::closed();

/// Whether standard error was closed before the program started: then nothing meant for it is
/// ever written (fd 2 may later be anything the program opened).
static STDERR_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);
/// Whether the report file already says that standard error could not be written.
static SAID_STDERR_LOST: AtomicBool = AtomicBool::new(false);
/// Whether the leak report goes to standard error: a private copy of it is taken when the
/// program closes it or exit begins.
static REPORT_TO_STDERR: AtomicBool = AtomicBool::new(false);
/// Whether the process became a daemon: no copy of standard error is taken from then on.
static DETACHED: AtomicBool = AtomicBool::new(false);

/// Remembers which file standard error names. Runs once, at the first allocation, before the
/// options are read (their warnings go there), so no descriptor is taken yet.
pub fn init_stderr() {
    let _errno = Keep::new();
    // SAFETY: F_GETFD only asks whether descriptor 2 is open.
    if unsafe { libc::fcntl(2, libc::F_GETFD) } < 0 {
        STDERR_CLOSED_AT_START.store(true, Ordering::Relaxed);
        return;
    }
    STDERR.point_at(2);
}

/// Standard error as the program now has it: descriptor 2 itself, and no copy of what it was.
fn follow_stderr() {
    let _errno = Keep::new();
    STDERR.release();
    STDERR.point_at(2);
}

/// Whether the leak report goes to standard error, so that exit's beginning must be caught:
/// the constructor's question.
pub fn report_to_stderr() -> bool {
    REPORT_TO_STDERR.load(Ordering::Relaxed)
}

/// The program is about to close standard error (`fclose`), or exit has begun: a private copy
/// of it is taken for the report, which comes after the program is done with it.
pub fn keep_a_copy_of_stderr() {
    if !REPORT_TO_STDERR.load(Ordering::Relaxed) || DETACHED.load(Ordering::Relaxed) {
        return;
    }
    let _errno = Keep::new();
    if STDERR.fd.load(Ordering::Acquire) == 2 && STDERR.names_our_file(2) {
        STDERR.adopt(2, true);
    }
}

/// Opens `path` (NUL-terminated, `%p` already expanded) for `sink`: created, and truncated
/// unless an ancestor process created it in this run (`append`). Opened without blocking, so a
/// FIFO that no process reads is refused (ENXIO) instead of holding the program before `main`;
/// writes then block as they would on any file. The errno of a failure.
pub fn open_file(sink: &Sink, path: &[u8], append: bool) -> Result<(), i32> {
    let _errno = Keep::new();
    let trunc = if append { 0 } else { libc::O_TRUNC };
    // SAFETY: `path` is NUL-terminated (the caller's buffer); open does not keep the pointer.
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NONBLOCK | trunc,
            0o644,
        )
    };
    if fd < 0 {
        return Err(errno::get());
    }
    // SAFETY: F_GETFL and F_SETFL on a descriptor just opened.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    if sink.adopt(fd, false) {
        Ok(())
    } else {
        Err(libc::EMFILE)
    }
}

/// Where trace lines go: 0 nowhere, 1 standard error, 2 the trace file.
static TRACE_TO: AtomicU8 = AtomicU8::new(0);
const TO_STDERR: u8 = 1;
const TO_FILE: u8 = 2;
/// Whether the trace file failed and the trace went to standard error (said once).
static TRACE_FAILED: AtomicBool = AtomicBool::new(false);
/// Whether the report file could not be opened or written, so the report goes to standard
/// error (said once).
static REPORT_FAILED: AtomicBool = AtomicBool::new(false);

/// The option buffers holding the trace and report paths (NUL-terminated, `%p` not expanded),
/// kept for reopening them in a forked child or at exit.
static TRACE_PATH: core::sync::atomic::AtomicPtr<u8> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
static REPORT_PATH: core::sync::atomic::AtomicPtr<u8> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// Whether this process created the shared (not per-process) files, rather than inheriting
/// them from an ancestor of the same run.
static CREATOR: AtomicBool = AtomicBool::new(false);

fn path_of(p: &core::sync::atomic::AtomicPtr<u8>) -> Option<&'static [u8]> {
    let ptr = p.load(Ordering::Acquire);
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the pointer is one of the options' path buffers, 'static and NUL-terminated.
    Some(unsafe { core::ffi::CStr::from_ptr(ptr.cast()) }.to_bytes())
}

/// The raw process id: the cached one of libc is the parent's in a vfork child.
pub fn getpid() -> u32 {
    // SAFETY: getpid takes nothing and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

/// Opens `path`'s file for `sink`, `%p` expanded for this process. A first open (`fresh`)
/// truncates a per-process file, and a shared one only in the process that creates it for the
/// run; reopening a file the program closed on us appends.
fn open_path(sink: &Sink, path: &[u8], fresh: bool) -> Result<(), i32> {
    let mut buf = [0u8; 4096];
    if !expand(path, getpid(), &mut buf) {
        return Err(libc::ENAMETOOLONG);
    }
    let truncate = fresh && (per_process(path) || CREATOR.load(Ordering::Relaxed));
    open_file(sink, &buf, !truncate)
}

/// One line on standard error about an option's file: `dmem: cannot WHAT 'PATH' (WHY); THEN`.
fn say_file_problem(what: &str, path: &[u8], err: i32, then: &str) {
    let Some(fd) = stderr_fd() else { return };
    let mut out = Out::to_fd(fd, &ROUTE);
    out.str("dmem: cannot ").str(what).str(" '");
    let mut buf = [0u8; 4096];
    if expand(path, getpid(), &mut buf) {
        out.escaped(cstr(&buf));
    } else {
        out.escaped(path);
    }
    out.str("' (");
    if err == libc::ENXIO {
        // What open says of a FIFO that no process has open for reading.
        out.str("a FIFO that nothing reads");
    } else {
        out.bytes(errno::describe(err));
    }
    out.str("); ").str(then).str("\n").flush();
}

/// What the options say about output (`options::Options::files`): the NUL-terminated paths,
/// empty when not given, which live as long as the options.
pub struct Files {
    pub report_file: &'static [u8],
    pub trace_file: &'static [u8],
    pub append_files: bool,
    pub leak_report: bool,
    pub trace_stderr: bool,
}

/// Opens the files the options name, and notes whether the report goes to standard error.
/// Runs once, at the first allocation, after `init_stderr` and the options.
pub fn init_files(o: Files) {
    let _errno = Keep::new();
    CREATOR.store(!o.append_files, Ordering::Relaxed);
    let report_file = o.report_file;
    let trace_file = o.trace_file;
    REPORT_TO_STDERR.store(o.leak_report && report_file[0] == 0, Ordering::Relaxed);
    if report_file[0] != 0 {
        REPORT_PATH.store(report_file.as_ptr().cast_mut(), Ordering::Release);
        // A shared file is opened now, so the first process truncates it before any descendant
        // writes; a per-process one when its process reports.
        if !per_process(cstr(report_file)) {
            let _ = open_path(&REPORT, cstr(report_file), true);
        }
    }
    if trace_file[0] != 0 {
        TRACE_PATH.store(trace_file.as_ptr().cast_mut(), Ordering::Release);
        match open_path(&TRACE, cstr(trace_file), true) {
            Ok(()) => TRACE_TO.store(TO_FILE, Ordering::Relaxed),
            Err(e) => {
                TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
                TRACE_FAILED.store(true, Ordering::Relaxed);
                say_file_problem("open trace-file", cstr(trace_file), e, "tracing to stderr");
            }
        }
    } else if o.trace_stderr {
        TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
    }
}

fn cstr(buf: &[u8]) -> &[u8] {
    &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())]
}

/// Whether the options name files shared by a whole run (no `%p`) that this process created:
/// its descendants must then append to them. The constructor tells them so (`append-files`).
pub fn created_shared_files() -> bool {
    let shared = |p| path_of(p).is_some_and(|p| !per_process(p));
    CREATOR.load(Ordering::Relaxed) && (shared(&TRACE_PATH) || shared(&REPORT_PATH))
}

/// In a forked child: files named per process are this process's own from now on. The trace
/// file is reopened at once; the report file when the child reports. Only open, close, fcntl
/// and write run here, which are async-signal-safe, as a fork handler must be.
pub fn after_fork_child() {
    let _errno = Keep::new();
    CREATOR.store(false, Ordering::Relaxed);
    // A copy taken for the parent's report is not the child's: it goes at once.
    if STDERR.fd.load(Ordering::Relaxed) > 2 {
        follow_stderr();
    }
    if let Some(p) = path_of(&REPORT_PATH) {
        if per_process(p) {
            REPORT.release();
            REPORT.opened.store(false, Ordering::Relaxed);
            REPORT_FAILED.store(false, Ordering::Relaxed);
        }
    }
    if let Some(p) = path_of(&TRACE_PATH) {
        if per_process(p) {
            TRACE.release();
            match open_path(&TRACE, p, true) {
                Ok(()) => {
                    TRACE_TO.store(TO_FILE, Ordering::Relaxed);
                    TRACE_FAILED.store(false, Ordering::Relaxed);
                }
                Err(e) => {
                    TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
                    TRACE_FAILED.store(true, Ordering::Relaxed);
                    say_file_problem("open trace-file", p, e, "tracing to stderr");
                }
            }
        }
    }
}

/// Whether trace lines are written: one load, for the entry points' fast path.
#[inline(always)]
pub fn tracing() -> bool {
    TRACE_TO.load(Ordering::Relaxed) != 0
}

/// The descriptor for a trace line, or None when it cannot be written. A trace file the program
/// closed on us is opened again, appending; one that cannot be sends the trace to standard
/// error, saying so once.
pub fn trace_fd() -> Option<i32> {
    let _errno = Keep::new();
    if TRACE_TO.load(Ordering::Relaxed) == TO_FILE {
        if let Some(fd) = TRACE.fd() {
            return Some(fd);
        }
        if let Some(p) = path_of(&TRACE_PATH) {
            match open_path(&TRACE, p, false) {
                Ok(()) => return TRACE.fd(),
                Err(e) => {
                    TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
                    if !TRACE_FAILED.swap(true, Ordering::Relaxed) {
                        say_file_problem("reopen trace-file", p, e, "tracing to stderr");
                    }
                }
            }
        }
    }
    match TRACE_TO.load(Ordering::Relaxed) {
        TO_STDERR => stderr_fd(),
        _ => None,
    }
}

/// The descriptor for the leak report: the report file when one is named (opened now if it is
/// this process's own and not open yet, or again if the program closed it), else standard
/// error; standard error too when the report file cannot be opened or written, which one line
/// there says. None when nothing can be written.
pub fn report_fd() -> Option<i32> {
    let _errno = Keep::new();
    let Some(p) = path_of(&REPORT_PATH) else {
        return stderr_fd();
    };
    if !REPORT_FAILED.load(Ordering::Relaxed) {
        if let Some(fd) = REPORT.fd() {
            return Some(fd);
        }
        let fresh = !REPORT.opened.load(Ordering::Relaxed);
        let err = match open_path(&REPORT, p, fresh) {
            Ok(()) => match REPORT.fd() {
                Some(fd) => return Some(fd),
                None => libc::EBADF,
            },
            Err(e) => e,
        };
        if !REPORT_FAILED.swap(true, Ordering::Relaxed) {
            say_file_problem("open report-file", p, err, "writing the leak report to stderr");
        }
    }
    stderr_fd()
}

/// A write to `fd` failed with `err`: where the rest goes instead. A failing report or trace
/// file sends its output to standard error from now on, saying why once; None when there is
/// nowhere else.
pub fn write_failed(fd: i32, err: i32) -> Option<i32> {
    let _errno = Keep::new();
    if REPORT.holds(fd) {
        if !REPORT_FAILED.swap(true, Ordering::Relaxed) {
            if let Some(p) = path_of(&REPORT_PATH) {
                say_file_problem(
                    "write to report-file",
                    p,
                    err,
                    "writing the leak report to stderr",
                );
            }
        }
        return stderr_fd();
    }
    if TRACE.holds(fd) && TRACE_TO.load(Ordering::Relaxed) == TO_FILE {
        TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
        if !TRACE_FAILED.swap(true, Ordering::Relaxed) {
            if let Some(p) = path_of(&TRACE_PATH) {
                say_file_problem("write to trace-file", p, err, "tracing to stderr");
            }
        }
        return stderr_fd();
    }
    None
}

/// What a line written to one of the sinks' descriptors needs to know of them (`out.rs`).
pub static ROUTE: Route = Route {
    may_be_a_pipe,
    write_failed,
};

/// Whether a write to `fd` may raise SIGPIPE: it is a pipe or a socket, or not one of ours.
pub fn may_be_a_pipe(fd: i32) -> bool {
    for sink in [&STDERR, &TRACE, &REPORT] {
        if sink.fd.load(Ordering::Relaxed) == fd {
            return sink.pipe.load(Ordering::Relaxed);
        }
    }
    true
}

/// The descriptor for output meant for standard error, or None when it cannot go there; the
/// first time that happens with a report file open, the report file says so once.
pub fn stderr_fd() -> Option<i32> {
    let _errno = Keep::new();
    if let Some(fd) = STDERR.fd() {
        return Some(fd);
    }
    if !SAID_STDERR_LOST.swap(true, Ordering::Relaxed) {
        if let Some(fd) = REPORT.fd() {
            let why: &[u8] = if STDERR_CLOSED_AT_START.load(Ordering::Relaxed) {
                b"dmem: standard error was closed when the program started; messages meant for it are dropped\n"
            } else {
                b"dmem: the program closed or replaced the standard error it started with; messages meant for it are dropped\n"
            };
            let _ = write_all(fd, why, may_be_a_pipe(fd));
        }
    }
    None
}

/// Output meant for the program's standard error; dropped when that is gone.
pub fn stderr() -> Out {
    Out::to_fd(stderr_fd().unwrap_or(-1), &ROUTE)
}

// What the program did with its descriptors, from `fdhooks.rs`. Each runs after the program's
// own call (or, for `before_dup_onto`, right before it), never in a vfork child, whose
// descriptors are not the parent's although its memory is.

/// Whether `fd` is one of libdmem's private descriptors: a number the program never opened.
pub fn is_private(fd: i32) -> bool {
    STDERR.holds(fd) || TRACE.holds(fd) || REPORT.holds(fd)
}

/// The program closed a number that only libdmem had open (a daemon closing every
/// descriptor): that descriptor is let go, as the program asked. A trace or report file is
/// opened again when next written; standard error is written through descriptor 2 from now on.
pub fn program_closed_private(fd: i32) {
    let _errno = Keep::new();
    let copy_of_stderr = STDERR.holds(fd);
    for sink in [&STDERR, &TRACE, &REPORT] {
        if sink.holds(fd) {
            sink.release();
        }
    }
    if copy_of_stderr {
        STDERR.point_at(2);
    }
}

/// Right before the program makes `fd` a copy of another descriptor: a private descriptor on
/// that number moves out of the way, so the program gets the number as it would bare.
pub fn before_dup_onto(fd: i32) {
    let _errno = Keep::new();
    for sink in [&STDERR, &TRACE, &REPORT] {
        if sink.holds(fd) {
            sink.move_away();
        }
    }
}

/// The program replaced its standard error (`dup2` or `dup3` onto 2): what it now names is
/// standard error, and a copy of the old one is let go.
pub fn stderr_replaced() {
    if !STDERR_CLOSED_AT_START.load(Ordering::Relaxed) {
        follow_stderr();
    }
}

/// The program closed its standard error itself (`close(2)`): a copy of it is let go, and
/// nothing meant for it is written until the program puts a file there again with `dup2`.
pub fn stderr_closed() {
    let _errno = Keep::new();
    STDERR.release();
}

/// The program became a daemon (`daemon`, or `setsid` on its way there): a copy of standard
/// error is let go and none is taken again, so its caller's pipe or terminal is held only
/// through descriptor 2, as bare.
pub fn detached() {
    DETACHED.store(true, Ordering::Relaxed);
    if STDERR.fd.load(Ordering::Relaxed) > 2 {
        follow_stderr();
    }
}

/// Expands `%p` (the process id) and `%%` in `path` into `out`, NUL-terminated. False when the
/// result does not fit or the path holds another `%` sequence.
pub fn expand(path: &[u8], pid: u32, out: &mut [u8]) -> bool {
    let mut n = 0;
    let mut push = |b: u8, n: &mut usize| -> bool {
        if *n + 1 >= out.len() {
            return false;
        }
        out[*n] = b;
        *n += 1;
        true
    };
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            match path.get(i + 1) {
                Some(b'p') => {
                    let mut digits = [0u8; 20];
                    for &d in decimal(pid as u64, &mut digits) {
                        if !push(d, &mut n) {
                            return false;
                        }
                    }
                }
                Some(b'%') => {
                    if !push(b'%', &mut n) {
                        return false;
                    }
                }
                _ => return false,
            }
            i += 2;
            continue;
        }
        if !push(b, &mut n) {
            return false;
        }
        i += 1;
    }
    out[n] = 0;
    true
}

/// Whether a path names the process id (`%p`, not the `p` after an escaped `%%`), so each
/// process has its own file.
pub fn per_process(path: &[u8]) -> bool {
    let mut i = 0;
    while i + 1 < path.len() {
        if path[i] == b'%' {
            if path[i + 1] == b'p' {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

// SAFETY: glibc declares `int __cxa_thread_atexit_impl(void (*)(void *), void *, void *)`, which
// registers a destructor of the calling thread's thread-local storage; the libc crate lacks it.
unsafe extern "C" {
    fn __cxa_thread_atexit_impl(
        func: extern "C" fn(*mut libc::c_void),
        obj: *mut libc::c_void,
        dso_symbol: *mut libc::c_void,
    ) -> libc::c_int;
}

/// Whether the main thread's destructor is registered.
static CAUGHT: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// With the leak report on standard error, registers a thread-local destructor on the main
/// thread: glibc's `exit` runs the exiting thread's thread-local destructors before any exit
/// handler, so this is the one moment every way through `exit` passes, a return from `main`
/// included, before a handler can close standard error (see above). Called at the first
/// allocation, while allocations still come from the bootstrap arena, so the small block glibc
/// takes for the registration is not one of the program's blocks (freeing it does nothing);
/// and from the constructor, for a process whose first allocation came on another thread. A
/// `pthread_exit` of the main thread runs it too, early.
pub fn catch_the_main_threads_exit() {
    extern "C" fn exit_begins(_: *mut libc::c_void) {
        keep_a_copy_of_stderr();
    }
    if !report_to_stderr() || crate::thread::gettid() != getpid() {
        return;
    }
    if CAUGHT.swap(true, core::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // SAFETY: a plain function of the expected type and no object; the DSO symbol is an address
    // in libdmem, so glibc counts the registration against it (a preloaded library is never
    // unloaded anyway).
    unsafe {
        __cxa_thread_atexit_impl(
            exit_begins,
            core::ptr::null_mut(),
            exit_begins as *mut libc::c_void,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(path: &str, pid: u32) -> Option<String> {
        let mut out = [0u8; 64];
        expand(path.as_bytes(), pid, &mut out).then(|| {
            let end = out.iter().position(|&b| b == 0).unwrap();
            String::from_utf8(out[..end].to_vec()).unwrap()
        })
    }

    #[test]
    fn percent_p_is_the_pid_and_percent_percent_a_percent() {
        assert_eq!(
            expanded("/tmp/r.%p.txt", 4242).as_deref(),
            Some("/tmp/r.4242.txt")
        );
        assert_eq!(expanded("a%%b%p", 7).as_deref(), Some("a%b7"));
        assert_eq!(expanded("plain", 7).as_deref(), Some("plain"));
        assert_eq!(expanded("bad%q", 7), None);
        assert_eq!(expanded("trailing%", 7), None);
        assert_eq!(expanded(&"x".repeat(70), 7), None);
        assert!(per_process(b"r.%p") && !per_process(b"r.%%") && !per_process(b"r.%%p"));
    }
}
