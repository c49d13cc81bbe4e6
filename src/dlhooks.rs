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

use crate::{next, unwind};
use core::ffi::{c_int, c_void};

/// Unloads as glibc does, then drops the walker's cached rules.
///
/// # Safety
/// As for glibc's `dlclose`: `handle` must come from `dlopen`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let Some(real) = next::DLCLOSE.func::<unsafe extern "C" fn(*mut c_void) -> c_int>() else {
        return -1;
    };
    // SAFETY: forwarded unchanged; the caller's contract is glibc's.
    let rc = unsafe { real(handle) };
    unwind::invalidate();
    rc
}
