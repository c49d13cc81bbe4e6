//! The launcher's few calls into libc, each wrapped in a safe function.

/// The core-size limit after raising the soft limit as far as the hard one allows:
/// `(soft, hard)` in bytes, `None` meaning unlimited.
pub fn raise_core_limit() -> std::io::Result<(Option<u64>, Option<u64>)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur != lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit only reads the struct; raising the soft limit up to the hard one is
        // always permitted, and the change is inherited by the child we start next.
        if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let finite = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((finite(lim.rlim_cur), finite(lim.rlim_max)))
}

/// Makes the launcher ignore the terminal's interrupt and quit keys while the program it started
/// runs, as a shell does for a foreground job: the program gets them and decides, and the
/// launcher lives on to report how it ended. Called after the child is spawned, so the child
/// keeps the default dispositions.
pub fn ignore_terminal_signals() {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: setting SIG_IGN installs no handler code; it cannot race with anything in this
        // single-purpose process.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// The hard-coded names of the signals a program is likely to die of; the number otherwise.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// Whether a signal's default action writes a core (signal(7)).
pub fn dumps_core(sig: i32) -> bool {
    [
        libc::SIGQUIT,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGABRT,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGSEGV,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGSYS,
    ]
    .contains(&sig)
}

/// Set by the SIGINT handler that `catch_interrupt` installs.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes Ctrl-C set `INTERRUPTED` instead of ending the launcher, so a watch loop can finish
/// its line and print a summary.
pub fn catch_interrupt() {
    let handler: extern "C" fn(libc::c_int) = on_interrupt;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the sigaction
    // struct is fully initialised (zeroed, then the handler and an empty mask set) and lives
    // across the call.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// The effective user id of the launcher.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// Waits until one of `fds` is ready for what its `events` ask, `timeout` passes or a signal
/// arrives (then `Ok(0)`, as for a timeout); each entry's `revents` says what it is ready for.
pub fn poll(fds: &mut [libc::pollfd], timeout: std::time::Duration) -> std::io::Result<usize> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: poll reads and writes exactly `fds.len()` pollfd structs, which the slice holds
    // for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(n as usize)
}

/// The soft limit on open descriptors (`RLIMIT_NOFILE`); 1024, Linux's default, if unknown.
pub fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

/// Opens `path` for reading only if it is a regular file. The open itself never blocks: a FIFO
/// that no one writes would hold an ordinary open forever, so it is opened non-blocking and
/// then refused, as is anything else that is not a file (a directory, a device, a socket).
/// Every file the launcher reads because a command line or an image named it goes through here.
pub fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    ))
}
