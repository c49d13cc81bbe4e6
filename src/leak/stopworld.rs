//! Stopping every other thread for the exit report, for good: each thread gets a signal whose
//! handler saves its registers and stack pointer in a slot of its own and parks on a futex
//! until the process ends, which it does right after the report.
//!
//! No thread is ever let go. A thread interrupted in `poll`, `epoll_wait`, `select`, `sleep` or
//! `pause` would return from it with EINTR, whatever SA_RESTART says, and run its error path
//! while the report is written (or end the process before it is); a parked thread returns to
//! nothing. LeakSanitizer stops threads with ptrace from a helper task instead, under which
//! most interrupted calls restart; but `epoll_wait` still fails with EINTR after a ptrace stop,
//! and ptrace is refused under Yama's `ptrace_scope` 2 and 3, by seccomp filters and when a
//! debugger is attached already. A signal needs none of that. Since parked threads may hold any
//! lock (the allocator's, the loader's), what follows the stop takes none: libdmem's heap
//! switches to pages of its own, and frames are named without the loader (`diag.rs`).
//!
//! Nothing here allocates once threads are being stopped: a stopped thread may hold the backend
//! allocator's lock, so `World::prepare` sizes everything first. Threads are found in
//! /proc/self/task with raw `getdents64` (opendir would allocate).
//! Waiting is bounded (`WAIT_MS`, and `LATE_MS` more for threads that do not block the signal):
//! a thread that blocks the signal, or is stuck where it cannot take it, does not hang the exit;
//! it is reported as not stopped and its stack is scanned as it is, from the stack pointer the
//! kernel shows in /proc/self/task/TID/syscall.

use crate::thread::gettid;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use libc::{c_int, c_void};

/// How long the exit waits, in all, for threads to acknowledge the stop signal.
const WAIT_MS: i64 = 200;
/// How much longer it waits for threads that do not block the signal: such a thread answers as
/// soon as it runs, which on a loaded machine can take longer than `WAIT_MS`. A thread that
/// blocks the signal never answers and is not waited for.
const LATE_MS: i64 = 2000;

/// The general registers saved per thread: x86_64's sixteen (r8-r15, rdi, rsi, rbp, rbx, rdx,
/// rax, rcx, rsp, in the kernel's `gregs` order).
pub const NREGS: usize = 16;

/// Blocks a stopped thread may hold only by their header's address, kept per thread.
const CARRIED: usize = crate::analysis::carried::MOST;

// Slot states.
const FREE: u32 = 0;
const SENT: u32 = 1;
const SAVING: u32 = 2;
const PARKED: u32 = 3;
const ABANDONED: u32 = 4;
const GONE: u32 = 5;

/// One thread's place: written by its own signal handler, read by the exiting thread once the
/// state says PARKED.
pub struct Slot {
    tid: AtomicU32,
    state: AtomicU32,
    sp: AtomicUsize,
    tp: AtomicUsize,
    regs: UnsafeCell<[usize; NREGS]>,
    /// Start pointers the exiting thread writes for the blocks this thread carried (`Carry`).
    carried: UnsafeCell<[usize; CARRIED]>,
}

// SAFETY: `regs` is written only by the slot's own thread, in its handler, before it publishes
// PARKED with Release; the exiting thread reads it only after seeing PARKED with Acquire, and the
// handler writes it only after winning SENT -> SAVING, which happens once per slot. `carried` is
// written and read by the exiting thread alone, once the slot's thread is parked for good.
unsafe impl Sync for Slot {}

/// What became of one thread.
pub enum Seen<'a> {
    /// Parked in the handler: its registers (as a memory range holding `NREGS` words), stack
    /// pointer and thread pointer (`pthread_self`).
    Stopped {
        regs: (usize, usize),
        sp: usize,
        tp: usize,
        carry: Carry<'a>,
    },
    /// Did not answer in time; the stack pointer the kernel shows, when it shows one.
    NotStopped { tid: u32, sp: Option<usize> },
}

/// The slots of the current mark, for the handler. Null outside a mark. The slot array is never
/// freed (see `release`), so a handler that loaded the pointer may always read it.
static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(core::ptr::null_mut());
static NSLOTS: AtomicUsize = AtomicUsize::new(0);
/// Nonzero once threads are stopped: they stay parked while it is, which is until the process
/// ends.
static HOLD: AtomicU32 = AtomicU32::new(0);
/// Acknowledgements: how many threads have saved their state.
static ACKS: AtomicU32 = AtomicU32::new(0);

/// The other threads of the process, stopped or found not to stop.
pub struct World {
    slots: &'static [Slot],
    /// Threads that appeared after every slot was taken: neither stopped nor scanned.
    pub missed: usize,
    sig: c_int,
}

impl World {
    /// Counts the threads and allocates their slots, with room for threads that start before
    /// the stop reaches their creators. Allocates, so it runs before anything is stopped.
    pub fn prepare() -> World {
        let mut n = 0;
        for_each_task(|_| n += 1);
        let slots: Vec<Slot> = (0..2 * n + 64)
            .map(|_| Slot {
                tid: AtomicU32::new(0),
                state: AtomicU32::new(FREE),
                sp: AtomicUsize::new(0),
                tp: AtomicUsize::new(0),
                regs: UnsafeCell::new([0; NREGS]),
                carried: UnsafeCell::new([0; CARRIED]),
            })
            .collect();
        World {
            // A late signal may still reach a handler after the mark, which then reads the
            // slots: they must outlive it, and the process is exiting anyway.
            slots: Vec::leak(slots),
            missed: 0,
            sig: libc::SIGRTMAX() - 3,
        }
    }

    /// How many threads `stop` can take in.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Signals every thread but the caller and waits, at most `WAIT_MS`, for each to park;
    /// they stay parked until the process ends. Allocation-free.
    pub fn stop(&mut self) {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature, and
        // every signal is blocked while it runs, so nothing of the program's runs on top of a
        // parked thread. The program's own action for the signal is not put back: no thread
        // returns to the program after this.
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_stop as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigfillset(&mut sa.sa_mask);
            if crate::next::real_sigaction(self.sig, &sa, core::ptr::null_mut()) != 0 {
                return;
            }
        }
        HOLD.store(1, Ordering::SeqCst);
        ACKS.store(0, Ordering::SeqCst);
        NSLOTS.store(self.slots.len(), Ordering::SeqCst);
        SLOTS.store(self.slots.as_ptr().cast_mut(), Ordering::SeqCst);

        let me = gettid();
        let deadline = now_ns() + WAIT_MS * 1_000_000;
        let mut sent = 0u32;
        let mut used = 0usize;
        // A thread not yet stopped may start another; a few rounds catch those.
        for _ in 0..4 {
            let mut new = 0;
            for_each_task(|tid| {
                if tid == me
                    || self.slots[..used]
                        .iter()
                        .any(|s| s.tid.load(Ordering::Relaxed) == tid)
                {
                    return;
                }
                new += 1;
                let Some(slot) = self.slots.get(used) else {
                    self.missed += 1;
                    return;
                };
                used += 1;
                slot.tid.store(tid, Ordering::Relaxed);
                slot.state.store(SENT, Ordering::SeqCst);
                if tgkill(tid, self.sig) {
                    sent += 1;
                } else {
                    // ESRCH: it exited since the listing.
                    slot.state.store(GONE, Ordering::Relaxed);
                }
            });
            wait_acks(sent, deadline);
            if new == 0 || self.missed > 0 {
                break;
            }
        }
        self.slots = &self.slots[..used];
        let late = deadline + LATE_MS * 1_000_000;
        while ACKS.load(Ordering::SeqCst) < sent && now_ns() < late {
            let waiting = self.slots.iter().any(|slot| {
                slot.state.load(Ordering::SeqCst) == SENT
                    && !blocks_signal(slot.tid.load(Ordering::Relaxed), self.sig)
            });
            if !waiting {
                break;
            }
            wait_acks(sent, (now_ns() + 10_000_000).min(late));
        }
        for slot in self.slots {
            // Whoever did not answer in time is given up and scanned as it is; a late handler
            // sees ABANDONED and only parks.
            let _ = slot
                .state
                .compare_exchange(SENT, ABANDONED, Ordering::SeqCst, Ordering::SeqCst);
            // A handler caught half-way through saving finishes in a few stores.
            while slot.state.load(Ordering::SeqCst) == SAVING {
                // SAFETY: sched_yield takes nothing and cannot fail on Linux.
                unsafe { libc::sched_yield() };
            }
        }
    }

    /// Every thread signalled, stopped or not, skipping those that exited meanwhile.
    pub fn threads(&self) -> impl Iterator<Item = Seen<'_>> + '_ {
        self.slots.iter().filter_map(|slot| {
            let tid = slot.tid.load(Ordering::Relaxed);
            match slot.state.load(Ordering::Acquire) {
                PARKED => {
                    let regs = slot.regs.get() as usize;
                    Some(Seen::Stopped {
                        regs: (regs, regs + NREGS * 8),
                        sp: slot.sp.load(Ordering::Relaxed),
                        tp: slot.tp.load(Ordering::Relaxed),
                        carry: Carry(slot),
                    })
                }
                // A thread that has exited but is still listed (a main thread that called
                // pthread_exit stays a zombie until the process ends) has nothing to scan.
                ABANDONED if task_exited(tid) => None,
                ABANDONED => match syscall_sp(tid) {
                    Err(()) => None,
                    Ok(sp) => Some(Seen::NotStopped { tid, sp }),
                },
                _ => None,
            }
        })
    }
}

/// Where the exiting thread puts start pointers for blocks a parked thread holds only by their
/// header's address, so that the mark can scan them as that thread's.
pub struct Carry<'a>(&'a Slot);

impl Carry<'_> {
    /// Keeps `starts` (at most `CARRIED`) and returns them as a memory range to scan.
    pub fn keep(&self, starts: &[usize]) -> (usize, usize) {
        let n = starts.len().min(CARRIED);
        // SAFETY: only the exiting thread touches `carried`, and only after the slot's thread
        // parked for good (see `Slot`); nothing else holds a reference into it.
        let kept = unsafe { &mut *self.0.carried.get() };
        kept[..n].copy_from_slice(&starts[..n]);
        let at = kept.as_ptr() as usize;
        (at, at + 8 * n)
    }
}

/// The stop signal's handler: save, acknowledge, park until the process ends.
extern "C" fn on_stop(_sig: c_int, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    let slots = SLOTS.load(Ordering::SeqCst);
    let n = NSLOTS.load(Ordering::SeqCst);
    if !slots.is_null() {
        // SAFETY: SLOTS points at `n` slots that are never freed (see `World::prepare`).
        let slots = unsafe { core::slice::from_raw_parts(slots, n) };
        let tid = gettid();
        if let Some(slot) = slots.iter().find(|s| s.tid.load(Ordering::Relaxed) == tid) {
            if slot
                .state
                .compare_exchange(SENT, SAVING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                save(slot, ctx);
                slot.state.store(PARKED, Ordering::Release);
                ACKS.fetch_add(1, Ordering::SeqCst);
                futex(&ACKS, libc::FUTEX_WAKE, 1, None);
            }
            // A thread that answers too late to be counted parks all the same: returning would
            // hand the call it was in EINTR.
            while HOLD.load(Ordering::SeqCst) != 0 {
                futex(&HOLD, libc::FUTEX_WAIT, 1, None);
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Saves the interrupted registers from the signal context, and the thread pointer.
fn save(slot: &Slot, ctx: *mut c_void) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: with SA_SIGINFO the kernel passes a valid ucontext_t for the interrupted
        // context; `regs` is ours alone until PARKED is published (see `Slot`).
        unsafe {
            let uc = &*(ctx as *const libc::ucontext_t);
            let regs = &mut *slot.regs.get();
            for (r, &g) in regs.iter_mut().zip(uc.uc_mcontext.gregs.iter()) {
                *r = g as usize;
            }
            slot.sp.store(
                uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize,
                Ordering::Relaxed,
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Elsewhere no registers are copied: the kernel's signal frame, which holds them all,
        // lies on this same stack between here and the interrupted stack pointer, so scanning
        // from this frame up covers it.
        let _ = ctx;
        let here = 0usize;
        slot.sp
            .store(core::ptr::addr_of!(here) as usize, Ordering::Relaxed);
    }
    // SAFETY: pthread_self only reads the thread register; it is async-signal-safe in glibc.
    slot.tp
        .store(unsafe { libc::pthread_self() } as usize, Ordering::Relaxed);
}

/// Waits until `want` acknowledgements have come, or the deadline has passed.
fn wait_acks(want: u32, deadline: i64) {
    loop {
        let got = ACKS.load(Ordering::SeqCst);
        let left = deadline - now_ns();
        if got >= want || left <= 0 {
            return;
        }
        futex(&ACKS, libc::FUTEX_WAIT, got, Some(left));
    }
}

fn futex(word: &AtomicU32, op: c_int, val: u32, timeout_ns: Option<i64>) {
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    });
    let tsp = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the futex word is a live u32 for the call's duration; a wait returns on a wake,
    // a changed value, a signal or the relative timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            tsp,
            core::ptr::null::<u32>(),
            0,
        );
    }
}

pub fn now_ns() -> i64 {
    crate::clock::now_ns() as i64
}

/// Sends `sig` to thread `tid` of this process; false when the thread no longer exists.
fn tgkill(tid: u32, sig: c_int) -> bool {
    // SAFETY: tgkill only sends a signal to a thread of our own process.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) == 0 }
}

/// Calls `f` with the id of every thread of the process, read from /proc/self/task with raw
/// getdents64 into a stack buffer (opendir would allocate).
fn for_each_task(mut f: impl FnMut(u32)) {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: the kernel writes at most buf.len() bytes of linux_dirent64 records.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut off = 0;
        while off + 19 < n as usize {
            // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let name = &buf[off + 19..off + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(tid) = parse_dec(name) {
                f(tid);
            }
            off += reclen.max(1);
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
}

fn parse_dec(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |v, &d| v * 10 + u32::from(d - b'0')))
}

fn parse_hex(s: &[u8]) -> Option<usize> {
    let s = s.strip_prefix(b"0x").unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0usize, |v, &d| {
        let d = (d as char).to_digit(16)?;
        Some(v << 4 | d as usize)
    })
}

/// A file read whole into `buf` (truncated at its size); the length read, or Err if it cannot
/// be opened.
fn read_small(path: &[u8], buf: &mut [u8]) -> Result<usize, ()> {
    // SAFETY: `path` is NUL-terminated (callers build it so); the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(());
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the unused tail of `buf`.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    Ok(len)
}

/// `/proc/self/task/TID/NAME`, NUL-terminated, in `path`; returns its length without the NUL.
fn task_file(tid: u32, name: &[u8], path: &mut [u8; 64]) -> usize {
    let mut len = 0;
    for part in [
        &b"/proc/self/task/"[..],
        crate::out::decimal(tid.into(), &mut [0; 20]),
        &b"/"[..],
        name,
    ] {
        path[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    path[len] = 0;
    len
}

/// Whether thread `tid` has exited (a zombie, or gone): its state in /proc/self/task/TID/stat,
/// the field after the command name in parentheses, is Z or X, or the file is gone.
fn task_exited(tid: u32) -> bool {
    let mut path = [0u8; 64];
    let len = task_file(tid, b"stat", &mut path);
    let mut buf = [0u8; 512];
    let Ok(n) = read_small(&path[..=len], &mut buf) else {
        return true;
    };
    let stat = &buf[..n];
    let state = stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|i| stat.get(i + 2).copied());
    matches!(state, Some(b'Z') | Some(b'X'))
}

/// Whether thread `tid` blocks signal `sig`, by its `SigBlk` line in /proc; a thread that is gone
/// or unreadable counts as blocking it (nothing to wait for).
fn blocks_signal(tid: u32, sig: c_int) -> bool {
    let mut path = [0u8; 64];
    let len = task_file(tid, b"status", &mut path);
    let mut buf = [0u8; 4096];
    let Ok(n) = read_small(&path[..=len], &mut buf) else {
        return true;
    };
    let mask = buf[..n]
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"SigBlk:"))
        .map(|v| v.trim_ascii())
        .and_then(parse_hex);
    mask.is_none_or(|m| m >> (sig - 1) & 1 == 1)
}

/// The stack pointer of thread `tid` as /proc/self/task/TID/syscall shows it: the next-to-last
/// field when the thread is blocked ("NR args... sp pc", or "-1 sp pc"); None while it runs.
/// Err when the thread no longer exists.
fn syscall_sp(tid: u32) -> Result<Option<usize>, ()> {
    let mut path = [0u8; 64];
    let len = task_file(tid, b"syscall", &mut path);
    let mut buf = [0u8; 256];
    let n = read_small(&path[..=len], &mut buf)?;
    let mut fields = buf[..n]
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .rev();
    let _pc = fields.next();
    Ok(fields.next().and_then(parse_hex).filter(|&sp| sp != 0))
}

/// Calls `emit` with each aligned word of `[start, end)` in this process, read with
/// process_vm_readv, so memory that is unmapped meanwhile (the stack of a thread that was not
/// stopped and exits) ends the read instead of faulting. The calling thread's id names the
/// process: its pid names the main thread, which may have exited (pthread_exit) and then has no
/// memory to read.
pub fn read_words_checked(start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
    let mut buf = [0usize; 512];
    let mut a = (start + 7) & !7;
    while a + 8 <= end {
        let n = (end - a).min(buf.len() * 8) & !7;
        let got = read_own(a, &mut buf[..n / 8]);
        if got == 0 {
            return;
        }
        emit(&buf[..got]);
        a += 8 * got;
    }
}

/// As `read_words_checked`, but a page that cannot be read (one the program made PROT_NONE, or
/// past the end of a file it truncated under a mapping, which a load would meet with SIGBUS) is
/// skipped and the read goes on at the next page: memory as a debugger reads it, so that the
/// exit report never faults where the program did not.
pub fn read_words_skipping(start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
    const PAGE: usize = 4096;
    let mut buf = [0usize; 512];
    let mut a = (start + 7) & !7;
    while a + 8 <= end {
        let n = (end - a).min(buf.len() * 8) & !7;
        let mut got = read_own(a, &mut buf[..n / 8]);
        let page_end = (a & !(PAGE - 1)) + PAGE;
        if got == 0 && a + n > page_end {
            // The kernel may refuse a read that runs into a bad page whole: try this page alone.
            got = read_own(a, &mut buf[..(page_end - a) / 8]);
        }
        if got == 0 {
            a = page_end;
            continue;
        }
        emit(&buf[..got]);
        a += 8 * got;
    }
}

/// Copies the words at `addr` of this process into `buf` with process_vm_readv, which checks
/// the source range instead of faulting; returns how many whole words it copied.
fn read_own(addr: usize, buf: &mut [usize]) -> usize {
    let n = 8 * buf.len();
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: n,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: n,
    };
    // SAFETY: the kernel copies at most `n` bytes into our buffer, which holds `n`, and checks
    // the source range itself.
    let got = unsafe { libc::process_vm_readv(gettid() as libc::pid_t, &local, 1, &remote, 1, 0) };
    if got <= 0 {
        0
    } else {
        got as usize / 8
    }
}
