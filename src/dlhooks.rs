//! `dlclose`, interposed so that the stack walker forgets what it cached about unloaded code.
//!
//! The walker caches one rule per return address. Once an object is unloaded, another object can
//! be mapped at the same addresses with different code, and the old rules would then walk its
//! frames wrongly; so after every `dlclose` the cached rules are dropped (see
//! `unwind::invalidate`). Loading needs no hook: an address the cache has not seen is looked
//! up afresh. `dlopen` itself must not be interposed, since it searches the calling object's
//! RPATH and RUNPATH and would see ours instead of the caller's.
//!
//! Objects glibc loads and unloads on its own (gconv modules used by iconv) do not come through
//! here. Code mapped later at their old addresses could be walked with stale rules, which ends a
//! stack early or records wrong frames but never faults: every read of the walk stays on the
//! thread's own stack.

use crate::{thread, unwind};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

type Dlclose = unsafe extern "C" fn(*mut c_void) -> c_int;

/// The next `dlclose` (glibc's), found on first use.
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

fn real_dlclose() -> Option<Dlclose> {
    let mut f = REAL_DLCLOSE.load(Ordering::Relaxed);
    if f == 0 {
        // dlsym may allocate (for an error message); the guard keeps that off the tracked path.
        let _guard = thread::Guard::enter();
        // SAFETY: RTLD_NEXT with a NUL-terminated name is dlsym's documented use.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) } as usize;
        if f == 0 {
            return None;
        }
        REAL_DLCLOSE.store(f, Ordering::Relaxed);
    }
    // SAFETY: `f` is the address dlsym returned for `dlclose`, whose C signature `Dlclose`
    // matches.
    Some(unsafe { core::mem::transmute::<usize, Dlclose>(f) })
}

/// Unloads as glibc does, then drops the walker's cached rules.
///
/// # Safety
/// As for glibc's `dlclose`: `handle` must come from `dlopen`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let Some(real) = real_dlclose() else {
        return -1;
    };
    // SAFETY: forwarded unchanged; the caller's contract is glibc's.
    let rc = unsafe { real(handle) };
    unwind::invalidate();
    rc
}
