//! The next definitions of the C library functions libdmem wraps outside the malloc family:
//! `exit` and `quick_exit`, `dlclose`, the descriptor and stream calls of `fdhooks.rs` and the
//! signal calls of `sighooks.rs`. Our
//! export of each keeps libdmem's own bookkeeping and calls the definition found here to do what
//! the program asked, so every detail of glibc's contract (cancellation points, errno, the
//! return value) stays glibc's.
//!
//! They are looked up with `dlsym(RTLD_NEXT)`, which takes the loader's lock and may allocate, so
//! the constructor looks them all up before `main`: some are async-signal-safe (`close`,
//! `sigaction`), and a signal handler must find them ready. A call that comes earlier, from
//! another library's constructor, looks its function up then.

use core::ffi::CStr;
use core::sync::atomic::{AtomicPtr, Ordering};
use libc::c_void;

/// One function: its name and, once looked up, its address.
pub struct Next {
    name: &'static CStr,
    addr: AtomicPtr<c_void>,
}

impl Next {
    const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            addr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The next definition's address; null when the C library has none.
    pub fn get(&self) -> *mut c_void {
        let p = self.addr.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        // dlsym may allocate (for an error message); the guard keeps that off the tracked path.
        let _guard = crate::thread::Guard::enter();
        // SAFETY: RTLD_NEXT lookup of a NUL-terminated name, as documented; it may call our
        // calloc, which the bootstrap arena serves if the real allocator is not known yet.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        self.addr.store(p, Ordering::Release);
        p
    }

    /// The next definition as a function of C signature `F` (an `unsafe extern "C" fn` type);
    /// None, with errno ENOSYS, when the C library has none.
    pub fn func<F: Copy>(&self) -> Option<F> {
        const { assert!(core::mem::size_of::<F>() == core::mem::size_of::<*mut c_void>()) };
        let f = self.get();
        if f.is_null() {
            crate::errno::set(libc::ENOSYS);
            return None;
        }
        // SAFETY: each caller names the C signature of the function of this name; a function
        // pointer has the size of a data pointer (checked above).
        Some(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&f) })
    }
}

pub static DLCLOSE: Next = Next::new(c"dlclose");
pub static EXIT: Next = Next::new(c"exit");
pub static QUICK_EXIT: Next = Next::new(c"quick_exit");
pub static CLOSE: Next = Next::new(c"close");
pub static DUP2: Next = Next::new(c"dup2");
pub static DUP3: Next = Next::new(c"dup3");
pub static FCLOSE: Next = Next::new(c"fclose");
pub static DAEMON: Next = Next::new(c"daemon");
pub static SETSID: Next = Next::new(c"setsid");
pub static SIGACTION: Next = Next::new(c"sigaction");
pub static SIGNAL: Next = Next::new(c"signal");
pub static BSD_SIGNAL: Next = Next::new(c"bsd_signal");
pub static SSIGNAL: Next = Next::new(c"ssignal");
pub static SYSV_SIGNAL: Next = Next::new(c"sysv_signal");
pub static SIGSET: Next = Next::new(c"sigset");
pub static SIGIGNORE: Next = Next::new(c"sigignore");
pub static SIGINTERRUPT: Next = Next::new(c"siginterrupt");

/// Looks every function up; the constructor calls it before `main`.
pub fn resolve_all() {
    for next in [
        &DLCLOSE,
        &EXIT,
        &QUICK_EXIT,
        &CLOSE,
        &DUP2,
        &DUP3,
        &FCLOSE,
        &DAEMON,
        &SETSID,
        &SIGACTION,
        &SIGNAL,
        &BSD_SIGNAL,
        &SSIGNAL,
        &SYSV_SIGNAL,
        &SIGSET,
        &SIGIGNORE,
        &SIGINTERRUPT,
    ] {
        next.get();
    }
}

/// The C library's `sigaction`, past our export.
pub fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    type SigactionFn =
        unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
    match SIGACTION.func::<SigactionFn>() {
        // SAFETY: the next `sigaction`; the pointers are the caller's, as sigaction takes them.
        Some(f) => unsafe { f(sig, act, old) },
        None => -1,
    }
}
