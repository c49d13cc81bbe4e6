//! The launcher's few calls into C, each wrapped in a safe function: libc's, and elfutils'
//! debuginfod client, loaded when first asked for; and its allocator, the system's with huge
//! pages asked for its large tables.

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

thread_local! {
    /// The user whose file rights this thread has taken (`with_file_rights_of`), if any.
    static ACTING_FOR: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// The user on whose behalf this thread reads files, when it reads with that user's rights
/// rather than the launcher's own (see `with_file_rights_of`).
pub fn acting_for() -> Option<u32> {
    ACTING_FOR.with(std::cell::Cell::get)
}

/// Runs `read` in a thread of its own whose file-system rights are user `uid`'s: its file
/// system user id that user, its file system group id and supplementary groups that user's as
/// the user database gives them (group 65534 and none for a user it does not know). So every
/// file `read` opens, whatever names it (a mapped object's `/proc/PID/map_files` link or path, a
/// debug file by build id, a file a DWARF unit names), is opened only if the kernel lets that
/// user open it, checked by the kernel at the open itself: no check-then-open race. The thread
/// ends with `read`, and its rights with it; the launcher's other threads keep theirs.
///
/// Only the file system ids change: taking them from root drops the capabilities that bypass
/// file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) from the thread, and
/// keeps CAP_SYS_PTRACE, with which `read` still reads the process's memory (whose owner the
/// caller has checked). An error when the rights cannot be taken (a launcher that is neither
/// root nor `uid`).
pub fn with_file_rights_of<T: Send>(uid: u32, read: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name(format!("as user {uid}"))
            .spawn_scoped(s, move || {
                take_file_rights(uid)?;
                ACTING_FOR.with(|a| a.set(Some(uid)));
                Ok(read())
            })
            .map_err(|e| format!("cannot start a thread to read as user {uid}: {e}"))?;
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Gives the calling thread user `uid`'s file system ids and groups (see `with_file_rights_of`).
fn take_file_rights(uid: u32) -> Result<(), String> {
    let (gid, groups) = user_groups(uid);
    let fail = |what: &str| format!("cannot take user {uid}'s rights to read files ({what})");
    // The raw system call: glibc's setgroups() changes every thread of the process, the kernel's
    // only the calling one.
    // SAFETY: setgroups reads `groups.len()` group ids from the vector, which lives across the call.
    let set = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if set != 0 {
        return Err(fail(&std::io::Error::last_os_error().to_string()));
    }
    // setfsgid and setfsuid return the previous id and never fail visibly: each is asked again
    // with an invalid id, which changes nothing and answers the current one.
    // SAFETY: setfsgid and setfsuid take integers and change only this thread's credentials.
    let (fsgid, fsuid) = unsafe {
        libc::setfsgid(gid);
        libc::setfsuid(uid);
        (libc::setfsgid(u32::MAX) as u32, libc::setfsuid(u32::MAX) as u32)
    };
    if (fsuid, fsgid) != (uid, gid) {
        return Err(fail(
            "the system refused to change this thread's file system user and group",
        ));
    }
    Ok(())
}

/// User `uid`'s primary group and every group the user database puts it in; group 65534
/// ("nogroup") and no other for a user it does not know.
fn user_groups(uid: u32) -> (u32, Vec<libc::gid_t>) {
    const NOGROUP: u32 = 65534;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value of a struct of integers and pointers.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and the `buf.len()` bytes of `buf`, both of which live
    // across the call and past the uses of `pw`'s pointers (into `buf`) below.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return (NOGROUP, Vec::new());
    }
    let gid = pw.pw_gid;
    let mut groups: Vec<libc::gid_t> = vec![0; 256];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: pw_name points into `buf`, a NUL-terminated name getpwuid_r wrote; getgrouplist
        // writes at most `n` ids into `groups`, which holds `n`, and the count into `n`.
        let got = unsafe { libc::getgrouplist(pw.pw_name, gid, groups.as_mut_ptr(), &mut n) };
        if got >= 0 {
            groups.truncate(n.max(0) as usize);
            return (gid, groups);
        }
        // Too small: `n` says how many there are. Bounded, for a database that answers nonsense.
        let want = (n.max(0) as usize).max(groups.len() * 2);
        if want > 65536 {
            return (gid, Vec::new());
        }
        groups.resize(want, 0);
    }
}

/// What elfutils' debuginfod client (`libdebuginfod.so.1`) answered for one file.
pub enum Debuginfod {
    /// The file, in the client's cache.
    Found(std::path::PathBuf),
    /// No server has it.
    Missing,
    /// The transfer failed (a timeout, a size limit, an unreachable server...).
    Failed(std::io::Error),
    /// The library is not installed.
    NoClient,
}

type Client = libc::c_void;
type FindFn =
    unsafe extern "C" fn(*mut Client, *const u8, libc::c_int, *mut *mut libc::c_char) -> libc::c_int;
type ProgressFn = unsafe extern "C" fn(*mut Client, libc::c_long, libc::c_long) -> libc::c_int;

/// The entry points of elfutils' debuginfod.h the launcher calls.
struct DebuginfodLib {
    begin: unsafe extern "C" fn() -> *mut Client,
    end: unsafe extern "C" fn(*mut Client),
    find_debuginfo: FindFn,
    find_executable: FindFn,
    set_progressfn: unsafe extern "C" fn(*mut Client, Option<ProgressFn>),
    set_user_data: unsafe extern "C" fn(*mut Client, *mut libc::c_void),
    get_user_data: unsafe extern "C" fn(*mut Client) -> *mut libc::c_void,
}

/// The client library, loaded at the first fetch as gdb loads it (so a launcher that never
/// fetches maps no libcurl), and never unloaded.
fn debuginfod_lib() -> Option<&'static DebuginfodLib> {
    static LIB: std::sync::OnceLock<Option<DebuginfodLib>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: dlopen gets a NUL-terminated constant name; the handle is never closed, so
        // the symbols looked up in it stay valid for the rest of the process.
        let lib = unsafe { libc::dlopen(c"libdebuginfod.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return None;
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: dlsym reads the NUL-terminated name from a live handle.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        // SAFETY: each symbol is the function debuginfod.h declares under that name, with the C
        // signature its field's type spells (elfutils 0.179 and later have them all).
        unsafe {
            Some(DebuginfodLib {
                begin: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> *mut Client>(sym(
                    c"debuginfod_begin",
                )?),
                end: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(*mut Client)>(sym(
                    c"debuginfod_end",
                )?),
                find_debuginfo: std::mem::transmute::<*mut libc::c_void, FindFn>(sym(
                    c"debuginfod_find_debuginfo",
                )?),
                find_executable: std::mem::transmute::<*mut libc::c_void, FindFn>(sym(
                    c"debuginfod_find_executable",
                )?),
                set_progressfn: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*mut Client, Option<ProgressFn>),
                >(sym(c"debuginfod_set_progressfn")?),
                set_user_data: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*mut Client, *mut libc::c_void),
                >(sym(c"debuginfod_set_user_data")?),
                get_user_data: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*mut Client) -> *mut libc::c_void,
                >(sym(c"debuginfod_get_user_data")?),
            })
        }
    })
    .as_ref()
}

/// What a transfer's progress is reported to: bytes so far and the total when the server said
/// it; false stops the transfer.
type Progress<'a> = &'a mut dyn FnMut(u64, Option<u64>) -> bool;

/// The client's progress callback: hands the counts to the `Progress` its user data points to.
unsafe extern "C" fn debuginfod_progress(
    client: *mut Client,
    got: libc::c_long,
    total: libc::c_long,
) -> libc::c_int {
    let Some(lib) = debuginfod_lib() else {
        return 0;
    };
    // SAFETY: the client is the one `debuginfod_find` made, whose user data it set to a live
    // `Progress` for the duration of the find call this callback runs inside.
    let progress = unsafe { &mut *((lib.get_user_data)(client) as *mut Progress) };
    let total = u64::try_from(total).ok().filter(|&t| t > 0);
    i32::from(!progress(u64::try_from(got).unwrap_or(0), total))
}

/// The executable (or the debug file) of build `id` (hex), from elfutils' debuginfod client,
/// which reads `DEBUGINFOD_URLS` and the other variables, keeps its cache and asks the servers
/// as gdb's does.
pub fn debuginfod_find(
    id: &str,
    executable: bool,
    mut progress: impl FnMut(u64, Option<u64>) -> bool,
) -> Debuginfod {
    let Some(lib) = debuginfod_lib() else {
        return Debuginfod::NoClient;
    };
    let Ok(id) = std::ffi::CString::new(id) else {
        return Debuginfod::Missing;
    };
    let mut progress: Progress = &mut progress;
    // SAFETY: the client is used on this thread only and ended before returning; its user data
    // points to `progress`, which outlives the find call, the only time the callback runs.
    let (fd, path) = unsafe {
        let client = (lib.begin)();
        if client.is_null() {
            return Debuginfod::Failed(std::io::Error::last_os_error());
        }
        (lib.set_user_data)(client, (&mut progress as *mut Progress).cast());
        (lib.set_progressfn)(client, Some(debuginfod_progress));
        let mut path: *mut libc::c_char = std::ptr::null_mut();
        let find = if executable {
            lib.find_executable
        } else {
            lib.find_debuginfo
        };
        // A build id of length 0 is given as a NUL-terminated hex string.
        let fd = find(client, id.as_ptr().cast(), 0, &mut path);
        (lib.end)(client);
        (fd, path)
    };
    if fd < 0 {
        return match -fd {
            libc::ENOENT => Debuginfod::Missing,
            e => Debuginfod::Failed(std::io::Error::from_raw_os_error(e)),
        };
    }
    // SAFETY: on success the client returns an open descriptor, which is ours to close, and a
    // NUL-terminated path it allocated with malloc, ours to free.
    unsafe {
        libc::close(fd);
        if path.is_null() {
            return Debuginfod::Missing;
        }
        let found = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
            std::ffi::CStr::from_ptr(path).to_bytes(),
        )
        .to_owned();
        libc::free(path.cast());
        Debuginfod::Found(found.into())
    }
}

/// The launcher's allocator: the system's, with the large tables a core's reading builds (a
/// byte, a word or several per block of the heap, for a million blocks and more) asked for in
/// huge pages, which the kernel gives where /sys/kernel/mm/transparent_hugepage/enabled says
/// `madvise` or `always`. Each 4 KiB page of such a table cost a page fault when first
/// written: three faults in four of `dmem leaks` on a core of a million blocks.
pub struct Allocator;

/// The size from which an allocation may hold a whole 2 MiB page; below it the request could
/// never apply.
const HUGE_FROM: usize = 2 << 20;

fn advise_huge(ptr: *mut u8, size: usize) {
    if ptr.is_null() || size < HUGE_FROM {
        return;
    }
    // Rounded outward to whole pages: glibc maps a large block alone, its header in the first
    // page, and advice on part of a mapping splits it in two, which mremap cannot move, so a
    // growing table would be copied at every step instead of moved.
    let page = 4096;
    let start = ptr as usize & !(page - 1);
    let end = (ptr as usize + size).next_multiple_of(page);
    // SAFETY: the range is the allocation just made, rounded out to whole pages, which belong
    // to the same mapping; MADV_HUGEPAGE changes how the kernel backs those pages, never their
    // contents, and a kernel that refuses it leaves the memory as it was.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

// SAFETY: every call is passed to `System` unchanged; `advise_huge` only adds advice on pages
// of the block `System` returned.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which is `System.alloc`'s.
        let p = unsafe { std::alloc::System.alloc(layout) };
        advise_huge(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        advise_huge(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller passes a block this allocator, that is `System`, returned.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`, and `new_size` keeps `realloc`'s contract.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        advise_huge(p, new_size);
        p
    }
}
