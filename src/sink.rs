//! Where libdmem's output goes: private descriptors for standard error, the trace file and the
//! report file, each checked to be the same file before every write.
//!
//! Programs do what they like with their own descriptors. Coreutils and everything built on
//! gnulib close standard error at exit, before our exit report runs; daemons close every
//! descriptor and open their own, which may get the number we had. So at start-up each
//! destination is moved to a descriptor of its own, close-on-exec and above the low numbers
//! programs use, and its device and inode are remembered; a write goes out only while the
//! descriptor still names that file. What cannot go out is dropped, and said once in the report
//! file when there is one: never written to whatever the number has become.
//!
//! Everything here runs without allocating: paths are expanded into fixed buffers.

use crate::out::{decimal, write_all, Out};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// The lowest descriptor a private copy takes: above what programs number by hand (bash keeps
/// its script on 255, many servers dup2 onto single digits).
const HIGH_FD: i32 = 700;

/// One destination: a descriptor and the identity of the file it was opened on.
pub struct Sink {
    fd: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
    /// Whether a write was dropped because the file went away (said once in the report file).
    lost: AtomicBool,
}

impl Sink {
    const fn closed() -> Sink {
        Sink {
            fd: AtomicI32::new(-1),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            lost: AtomicBool::new(false),
        }
    }

    /// Takes `fd` as this sink's descriptor: moved high and made close-on-exec, the original
    /// closed unless `keep_original` (standard error stays the program's).
    fn adopt(&self, fd: i32, keep_original: bool) {
        // SAFETY: fcntl with F_DUPFD_CLOEXEC only creates a descriptor; a failure returns -1.
        let mut high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
        if high < 0 {
            // Fewer descriptors allowed than HIGH_FD: any free one above the standard three.
            // SAFETY: as above.
            high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        }
        if high < 0 {
            return;
        }
        if !keep_original {
            // SAFETY: `fd` was opened by us for this sink and is not used again.
            unsafe { libc::close(fd) };
        }
        if let Some((dev, ino)) = identity(high) {
            self.dev.store(dev, Ordering::Relaxed);
            self.ino.store(ino, Ordering::Relaxed);
            self.fd.store(high, Ordering::Release);
        }
    }

    /// The descriptor, while it still names the file it was opened on.
    pub fn fd(&self) -> Option<i32> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        let same = identity(fd) == Some((self.dev.load(Ordering::Relaxed), self.ino.load(Ordering::Relaxed)));
        if !same {
            self.lost.store(true, Ordering::Relaxed);
        }
        same.then_some(fd)
    }

    /// Whether this sink was ever opened.
    pub fn is_open(&self) -> bool {
        self.fd.load(Ordering::Relaxed) >= 0
    }

    /// Closes the descriptor (in a forked child, whose per-process files are its own).
    fn close(&self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the descriptor is ours, opened by `adopt`; nothing else uses it.
            unsafe { libc::close(fd) };
        }
    }
}

fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat only writes the stat buffer we pass; all-zero is a valid stat.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// The program's standard error as it was when libdmem started.
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

/// Takes the private copy of standard error. Runs once, at the first allocation.
pub fn init_stderr() {
    // SAFETY: F_GETFD only asks whether descriptor 2 is open.
    if unsafe { libc::fcntl(2, libc::F_GETFD) } < 0 {
        STDERR_CLOSED_AT_START.store(true, Ordering::Relaxed);
        return;
    }
    STDERR.adopt(2, true);
}

/// Opens `path` (NUL-terminated, `%p` already expanded) for `sink`: created, and truncated
/// unless an ancestor process created it in this run (`append`). Returns false when it cannot
/// be opened.
pub fn open_file(sink: &Sink, path: &[u8], append: bool) -> bool {
    let trunc = if append { 0 } else { libc::O_TRUNC };
    // SAFETY: `path` is NUL-terminated (the caller's buffer); open does not keep the pointer.
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC | trunc,
            0o644,
        )
    };
    if fd < 0 {
        return false;
    }
    sink.adopt(fd, false);
    sink.is_open()
}

/// Where trace lines go: 0 nowhere, 1 standard error, 2 the trace file.
static TRACE_TO: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);
const TO_STDERR: u8 = 1;
const TO_FILE: u8 = 2;

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
fn open_path(sink: &Sink, path: &[u8], fresh: bool) -> bool {
    let mut buf = [0u8; 4096];
    if !expand(path, getpid(), &mut buf) {
        return false;
    }
    let truncate = fresh && (per_process(path) || CREATOR.load(Ordering::Relaxed));
    open_file(sink, &buf, !truncate)
}

/// Opens the files the options name. Runs once, at the first allocation, after `init_stderr`.
/// `trace_file` and `report_file` are the options' buffers, empty (first byte NUL) when not
/// given.
pub fn init_files(trace_file: &'static [u8], trace_stderr: bool, report_file: &'static [u8], append: bool) {
    CREATOR.store(!append, Ordering::Relaxed);
    if report_file[0] != 0 {
        REPORT_PATH.store(report_file.as_ptr().cast_mut(), Ordering::Release);
        // A shared file is opened now, so the first process truncates it before any descendant
        // writes; a per-process one when its process reports.
        if !per_process(cstr(report_file)) {
            open_path(&REPORT, cstr(report_file), true);
        }
    }
    if trace_file[0] != 0 {
        TRACE_PATH.store(trace_file.as_ptr().cast_mut(), Ordering::Release);
        if open_path(&TRACE, cstr(trace_file), true) {
            TRACE_TO.store(TO_FILE, Ordering::Relaxed);
            return;
        }
        if let Some(fd) = stderr_fd() {
            let mut out = Out::to_fd(fd);
            out.str("dmem: cannot open trace-file '")
                .escaped(cstr(trace_file))
                .str("'; tracing to stderr\n")
                .flush();
        }
        TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
    } else if trace_stderr {
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
/// file is reopened at once; the report file when the child reports. Only open, close and
/// fcntl run here, which are async-signal-safe, as a fork handler must be.
pub fn after_fork_child() {
    CREATOR.store(false, Ordering::Relaxed);
    if let Some(p) = path_of(&REPORT_PATH) {
        if per_process(p) {
            REPORT.close();
        }
    }
    if let Some(p) = path_of(&TRACE_PATH) {
        if per_process(p) {
            TRACE.close();
            if !open_path(&TRACE, p, true) {
                TRACE_TO.store(TO_STDERR, Ordering::Relaxed);
            }
        }
    }
}

/// Whether trace lines are written: one load, for the entry points' fast path.
#[inline(always)]
pub fn tracing() -> bool {
    TRACE_TO.load(Ordering::Relaxed) != 0
}

/// The descriptor for a trace line, or None when it cannot be written.
pub fn trace_fd() -> Option<i32> {
    match TRACE_TO.load(Ordering::Relaxed) {
        TO_FILE => TRACE.fd(),
        TO_STDERR => stderr_fd(),
        _ => None,
    }
}

/// The descriptor for the leak report: the report file when one is named (opened now if it is
/// this process's own and not open yet), else standard error. None when neither can be written.
pub fn report_fd() -> Option<i32> {
    if let Some(p) = path_of(&REPORT_PATH) {
        if let Some(fd) = REPORT.fd() {
            return Some(fd);
        }
        // Not open yet (a per-process file), or the program closed it or took its number.
        if open_path(&REPORT, p, !REPORT.is_open()) {
            if let Some(fd) = REPORT.fd() {
                return Some(fd);
            }
        }
        if let Some(fd) = stderr_fd() {
            let mut out = Out::to_fd(fd);
            out.str("dmem: cannot open or write report-file '")
                .escaped(p)
                .str("'; writing the leak report to stderr\n")
                .flush();
            return Some(fd);
        }
        return None;
    }
    stderr_fd()
}

/// The descriptor for output meant for standard error, or None when it cannot go there; the
/// first time that happens with a report file open, the report file says so once.
pub fn stderr_fd() -> Option<i32> {
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
            write_all(fd, why);
        }
    }
    None
}

/// Output meant for the program's standard error, through libdmem's private copy of it; dropped
/// when that is gone.
pub fn stderr() -> Out {
    Out::to_fd(stderr_fd().unwrap_or(-1))
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
