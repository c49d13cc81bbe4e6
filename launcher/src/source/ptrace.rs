//! Holding a running process still for a consistent scan (`dmem leaks PID`): every thread is
//! seized and interrupted with ptrace, its registers read, and all of them let go again on every
//! way out — an error, a panic, or Ctrl-C, which waits until they run again.
//!
//! PTRACE_SEIZE does not stop a thread by itself and sends it no signal, so nothing the program
//! sees changes; PTRACE_INTERRUPT stops it where it is (a blocked system call is restarted when
//! it runs on). Threads the process starts while it is being stopped are caught by listing
//! `/proc/PID/task` again until a listing finds no new one: once every listed thread is stopped,
//! none can start another. Should dmem itself die meanwhile, the kernel detaches every thread it
//! had seized, and they run on.

use crate::source::live;
use crate::source::threads::Thread;
use crate::{failed, Result};
use std::time::{Duration, Instant};

/// The terminal's and the system's polite ways to end dmem, held back while threads are stopped
/// so that none of them is left stopped; they take effect once the threads run again.
const HELD_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// A process whose every thread is stopped.
pub struct Stopped {
    /// Seized threads, with the signal each was stopped by that must be given back on release
    /// (0 for none).
    seized: Vec<(i32, i32)>,
    since: Instant,
    old_mask: libc::sigset_t,
    released: bool,
    pub threads: Vec<Thread>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let dir =
        std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| failed(format!("process {pid} ended")))?;
    Ok(dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// Who traces `pid` already (TracerPid in /proc/PID/status), if anyone.
fn tracer_of(pid: i32) -> Option<(i32, String)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()?;
    if tracer == 0 {
        return None;
    }
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    Some((tracer, name))
}

/// Stops every thread of `pid` and reads its registers.
pub fn stop(pid: i32) -> Result<Stopped> {
    // SAFETY: sigset_t is plain data; zeroed is a valid value, filled by the calls below.
    let mut block: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: building a signal set and blocking it for this (the only) thread.
    unsafe {
        libc::sigemptyset(&mut block);
        for s in HELD_SIGNALS {
            libc::sigaddset(&mut block, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old_mask);
    }
    let mut stopped = Stopped {
        seized: Vec::new(),
        since: Instant::now(),
        old_mask,
        released: false,
        threads: Vec::new(),
    };
    loop {
        let mut new = 0;
        for tid in task_ids(pid)? {
            if stopped.seized.iter().any(|&(t, _)| t == tid) {
                continue;
            }
            // SAFETY: PTRACE_SEIZE takes a thread id and options; no memory is passed.
            if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) } != 0 {
                match errno() {
                    // Ended since the listing.
                    libc::ESRCH => continue,
                    e => {
                        if let Some((tracer, name)) = tracer_of(pid) {
                            return Err(failed(format!(
                                "process {pid} is traced by process {tracer} ({name}) already, so dmem cannot \
                                 stop it; in gdb, use the 'dmem leaks' command instead"
                            )));
                        }
                        return Err(live::refused(pid, &std::io::Error::from_raw_os_error(e)));
                    }
                }
            }
            stopped.seized.push((tid, 0));
            // SAFETY: PTRACE_INTERRUPT on a thread we just seized; no memory is passed.
            unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) };
            new += 1;
        }
        // Wait for each new one to stop.
        let waiting: Vec<usize> = (stopped.seized.len() - new..stopped.seized.len()).collect();
        for k in waiting {
            let tid = stopped.seized[k].0;
            let mut status = 0;
            // SAFETY: waitpid on a thread we trace writes only `status`.
            let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
            if r != tid || libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                // It ended meanwhile: nothing to let go.
                stopped.seized[k].0 = -1;
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            // A stop for a signal that was on its way to the thread: it is delivered when the
            // thread is let go. The interrupt's own stop is SIGTRAP with PTRACE_EVENT_STOP, and a
            // group stop reports the stopping signal with the same event.
            if event != libc::PTRACE_EVENT_STOP {
                stopped.seized[k].1 = sig;
            }
        }
        stopped.seized.retain(|&(t, _)| t > 0);
        if new == 0 {
            break;
        }
    }
    for &(tid, _) in &stopped.seized {
        if let Some(regs) = registers(tid) {
            stopped.threads.push(Thread {
                tid: tid as u32,
                regs,
            });
        }
    }
    // The thread the process is named by first, as in a core.
    stopped.threads.sort_by_key(|t| (t.tid != pid as u32, t.tid));
    Ok(stopped)
}

/// The registers of the stopped tracee `tid`, in the order of a core's NT_PRSTATUS note.
fn registers(tid: i32) -> Option<[u64; 27]> {
    // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it for a stopped tracee.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to our local struct.
    if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, &mut regs as *mut _ as usize) } != 0 {
        return None;
    }
    Some([
        regs.r15,
        regs.r14,
        regs.r13,
        regs.r12,
        regs.rbp,
        regs.rbx,
        regs.r11,
        regs.r10,
        regs.r9,
        regs.r8,
        regs.rax,
        regs.rcx,
        regs.rdx,
        regs.rsi,
        regs.rdi,
        regs.orig_rax,
        regs.rip,
        regs.cs,
        regs.eflags,
        regs.rsp,
        regs.ss,
        regs.fs_base,
        regs.gs_base,
        regs.ds,
        regs.es,
        regs.fs,
        regs.gs,
    ])
}

impl Stopped {
    /// Lets every thread run again; how long they were stopped.
    pub fn resume(mut self) -> Duration {
        self.release();
        self.since.elapsed()
    }

    fn release(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        for (tid, sig) in self.seized.drain(..) {
            // SAFETY: PTRACE_DETACH on a thread we seized, giving back the signal it was
            // stopped with, if any.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, sig as usize) };
        }
        // SAFETY: restores this thread's signal mask as it was; a held signal that arrived
        // meanwhile now takes effect, with every thread of the target running.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.release();
    }
}
