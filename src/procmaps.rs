//! Which mapping of the process holds an address, from `/proc/thread-self/maps`, without allocating and
//! without taking any lock in user space.
//!
//! The stack walker needs the bounds of the stack it walks, and the exit report needs the
//! stacks of every thread. glibc's answer, `pthread_getattr_np`, holds the thread's own lock
//! while it calls `realloc` (and `fopen` for the main thread): asked from inside malloc, it waits
//! forever for a lock its own thread holds whenever the program itself was inside
//! `pthread_getattr_np`, which the JVM and LLVM's lld do at thread start. The kernel's list of
//! mappings needs none of that: it is read here with the raw `openat`, `read` and `close` system
//! calls into a buffer on the stack, parsed as it streams, so no libc lock, no interposed libc
//! function and no allocation is involved. The only lock is the kernel's mmap lock, taken for
//! reading and never held across a return to user space.
//!
//! It costs one pass over the process's mappings (tens of microseconds for an ordinary program,
//! more for one with thousands of mappings), so callers cache the answer per thread.

use crate::analysis::maps::{Mapping, MapsLine};

/// The `[start, end)` of the mapping that holds `addr`, or None when no mapping holds it or
/// `/proc` cannot be read (not mounted, or a sandbox forbids it). errno is left as it was.
pub fn mapping_containing(addr: usize) -> Option<(usize, usize)> {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for its lifetime.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above; the slot is this thread's.
    let saved = unsafe { *errno };
    let found = scan(addr);
    // SAFETY: as above.
    unsafe { *errno = saved };
    found
}

fn scan(addr: usize) -> Option<(usize, usize)> {
    // The calling thread's view first: once the main thread has called pthread_exit, the
    // process's own /proc/PID/maps reads empty (the leader has no memory map any more), while
    // every live thread's shows the map they share.
    let open = |path: &core::ffi::CStr| {
        // SAFETY: openat with AT_FDCWD and a NUL-terminated absolute path; the result is checked.
        unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        }
    };
    let mut fd = open(c"/proc/thread-self/maps");
    if fd < 0 {
        fd = open(c"/proc/self/maps");
    }
    if fd < 0 {
        return None;
    }
    let fd = fd as libc::c_int;
    let mut parser = Parser::new(addr);
    // Small enough for the stack of any thread that can call malloc (glibc's minimum is 16 KiB);
    // the kernel hands out whole lines where they fit and the parser does not need them whole.
    let mut buf = [0u8; 512];
    let found = loop {
        // SAFETY: reads at most buf.len() bytes into our own buffer from the descriptor opened
        // above.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 && -n as i32 == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break None;
        }
        if let Some(range) = parser.feed(&buf[..n as usize]) {
            break Some(range);
        }
    };
    // SAFETY: closes the descriptor we opened; nothing else refers to it.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    found
}

/// How far above an address `readable_above` looks, in pages, before it leaves the question to
/// the mappings: the most a thread's stack holds above its stack pointer in all but rare cases.
const PROBE_PAGES: usize = 2048;

/// Pages per `process_vm_readv` call: its two arrays (2 KiB) must fit any thread's stack.
const PROBE_BATCH: usize = 128;

/// Where the run of readable pages that holds `addr` ends, found without `/proc`: one
/// `process_vm_readv` on this very process reads a byte of each page above `addr`, up to
/// `PROBE_PAGES`, and the kernel stops at the first page that cannot be read. It never faults,
/// never allocates and takes no lock in user space.
///
/// Why not the mappings: opening `/proc/thread-self/maps` makes the kernel keep directory
/// entries under `/proc/PID` for the thread, which it must drop again when the process is
/// reaped. For a short-lived child with a thread of its own that costs the parent's `waitpid`
/// little on an idle machine but, with the processor shared by busy threads, seconds per child.
///
/// None when the system call is refused (a sandbox's seccomp filter) or the run goes on past
/// `PROBE_PAGES`: the caller then reads the mappings. errno is left as it was.
pub fn readable_above(addr: usize) -> Option<usize> {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for its lifetime.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above; the slot is this thread's.
    let saved = unsafe { *errno };
    let found = probe_up(addr & !(PAGE - 1));
    // SAFETY: as above.
    unsafe { *errno = saved };
    found
}

const PAGE: usize = 4096;

fn probe_up(first: usize) -> Option<usize> {
    // SAFETY: getpid takes nothing and cannot fail; the raw call, so a forked child gets its own.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    let mut sink = [0u8; PROBE_BATCH];
    let local = libc::iovec {
        iov_base: sink.as_mut_ptr().cast(),
        iov_len: sink.len(),
    };
    let mut remote = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 1,
    }; PROBE_BATCH];
    let mut page = first;
    for _ in 0..PROBE_PAGES / PROBE_BATCH {
        for (k, r) in remote.iter_mut().enumerate() {
            r.iov_base = page.wrapping_add(k * PAGE) as *mut libc::c_void;
        }
        // SAFETY: `local` describes our own buffer of PROBE_BATCH bytes, `remote` holds
        // PROBE_BATCH one-byte ranges, one per page; the kernel reads them from this process
        // and writes only into the buffer, stopping at the first it cannot read.
        let n = unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                pid,
                &local as *const libc::iovec,
                1usize,
                remote.as_ptr(),
                PROBE_BATCH,
                0usize,
            )
        };
        let readable = match n {
            // The first page of this batch cannot be read.
            // SAFETY: the calling thread's errno slot.
            -1 if unsafe { *libc::__errno_location() } == libc::EFAULT => 0,
            // Refused (seccomp, or a kernel without it).
            n if n < 0 => return None,
            n => n as usize,
        };
        if readable < PROBE_BATCH {
            return (page + readable * PAGE > first).then_some(page + readable * PAGE);
        }
        page += PROBE_BATCH * PAGE;
    }
    None
}

/// Every mapping of the process, for the exit report's roots (see `analysis::roots`). Unlike
/// `mapping_containing` it allocates, so the report calls it before it stops the other threads.
pub fn all() -> Vec<Mapping> {
    let text = std::fs::read_to_string("/proc/thread-self/maps")
        .or_else(|_| std::fs::read_to_string("/proc/self/maps"))
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| Some(MapsLine::parse(l)?.region()))
        .collect()
}

/// A streaming parser of `/proc/PID/maps` lines that stops at the mapping holding `addr`. Only
/// each line's leading `start-end` matters; the rest is skipped up to the newline.
struct Parser {
    addr: usize,
    state: State,
    start: usize,
    end: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Start,
    End,
    Rest,
}

impl Parser {
    fn new(addr: usize) -> Parser {
        Parser {
            addr,
            state: State::Start,
            start: 0,
            end: 0,
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> Option<(usize, usize)> {
        for &b in bytes {
            match (self.state, b) {
                (_, b'\n') => {
                    self.state = State::Start;
                    self.start = 0;
                    self.end = 0;
                }
                (State::Start, b'-') => self.state = State::End,
                (State::Start, _) => self.start = self.start.wrapping_shl(4) | hex(b),
                (State::End, b' ') => {
                    self.state = State::Rest;
                    if self.addr >= self.start && self.addr < self.end {
                        return Some((self.start, self.end));
                    }
                }
                (State::End, _) => self.end = self.end.wrapping_shl(4) | hex(b),
                (State::Rest, _) => {}
            }
        }
        None
    }
}

fn hex(b: u8) -> usize {
    match b {
        b'0'..=b'9' => (b - b'0') as usize,
        b'a'..=b'f' => (b - b'a' + 10) as usize,
        b'A'..=b'F' => (b - b'A' + 10) as usize,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_split_anywhere() {
        let text = b"55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n\
                     7ffd5e1f0000-7ffd5e211000 rw-p 00000000 00:00 0                          [stack]\n";
        for cut in 0..text.len() {
            let mut p = Parser::new(0x7ffd_5e20_0000);
            let got = p.feed(&text[..cut]).or_else(|| p.feed(&text[cut..]));
            assert_eq!(got, Some((0x7ffd_5e1f_0000, 0x7ffd_5e21_1000)), "cut at {cut}");
        }
        let mut p = Parser::new(0x1000);
        assert_eq!(p.feed(text), None);
        // The end is exclusive.
        let mut p = Parser::new(0x55d0_c0a2_1000);
        assert_eq!(p.feed(text), None);
    }

    #[test]
    fn finds_this_threads_stack_and_a_heap_block() {
        let local = 0u64;
        let at = &local as *const u64 as usize;
        let (lo, hi) = mapping_containing(at).expect("the stack is mapped");
        assert!(lo <= at && at < hi);
        let boxed = Box::new([0u8; 64]);
        let at = boxed.as_ptr() as usize;
        let (lo, hi) = mapping_containing(at).expect("the heap is mapped");
        assert!(lo <= at && at + 64 <= hi);
        assert_eq!(mapping_containing(8), None, "page zero is never mapped");
        std::thread::spawn(|| {
            let local = 0u64;
            let at = &local as *const u64 as usize;
            let (lo, hi) = mapping_containing(at).expect("a thread's stack is mapped");
            assert!(lo <= at && at < hi);
        })
        .join()
        .unwrap();
    }
}
