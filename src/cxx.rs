//! C++'s `operator new` and `operator delete`, every form, over the same allocate and release
//! path as malloc.
//!
//! libstdc++'s operators call malloc and would be seen anyway, but jemalloc, tcmalloc and
//! mimalloc export their own: preloaded after us, they would hand C++ objects out untracked,
//! and our free would then meet pointers it never issued. Exporting the operators ourselves
//! (first in the search order) keeps every C++ block on the lists, and puts no libstdc++ frame
//! in front of the caller of `new`.
//!
//! A failed throwing `new` follows the standard: call the new-handler until it gives up, then
//! throw `std::bad_alloc`. Both are libstdc++ functions looked up only then; the exception
//! unwinds through these `C-unwind` frames into the program.

use crate::engine;
use crate::unwind::{self, Origin};
use libc::c_void;

type Handler = unsafe extern "C-unwind" fn();

/// Looked up only when an allocation has failed. dlsym takes the loader's lock, which is
/// recursive (a failing `new` inside a constructor that `dlopen` runs takes it again on the same
/// thread); that another thread holds it while it waits for this one is a deadlock the program
/// would meet in glibc's own out-of-memory path too, which also calls into the loader.
fn cxx_symbol(name: &core::ffi::CStr) -> *mut c_void {
    // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name; a program that calls operator new
    // has libstdc++ (or another C++ runtime) loaded.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// What every allocating operator runs: the block, as malloc makes it (inlined into each
/// operator, so C++ allocations cost what malloc's do), or on failure the new-handler loop.
/// Returns null only for the nothrow forms.
#[inline(always)]
fn new_impl(size: usize, align: usize, nothrow: bool, from: Origin) -> *mut c_void {
    let log2 = if align <= 16 { 0 } else { align.trailing_zeros() };
    let p = engine::allocate(size, log2, false, from);
    if !p.is_null() {
        return p.cast();
    }
    new_failed(size, log2, nothrow, from)
}

/// The standard's loop after a failed allocation: ask the new-handler, try again, until one
/// succeeds or there is no handler.
#[cold]
#[inline(never)]
fn new_failed(size: usize, log2: u32, nothrow: bool, from: Origin) -> *mut c_void {
    loop {
        let get = cxx_symbol(c"_ZSt15get_new_handlerv");
        let handler: Option<Handler> = if get.is_null() {
            None
        } else {
            // SAFETY: `std::get_new_handler()` takes nothing and returns a function pointer
            // (or null), which Option<fn> represents exactly.
            unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Option<Handler>>(get)() }
        };
        match handler {
            // SAFETY: the program's new-handler, called as the standard says; it may throw.
            Some(h) => unsafe { h() },
            None if nothrow => return core::ptr::null_mut(),
            None => throw_bad_alloc(),
        }
        let p = engine::allocate(size, log2, false, from);
        if !p.is_null() {
            return p.cast();
        }
    }
}

fn throw_bad_alloc() -> ! {
    let f = cxx_symbol(c"_ZSt17__throw_bad_allocv");
    if !f.is_null() {
        // SAFETY: `std::__throw_bad_alloc()` takes nothing and never returns; it unwinds.
        unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C-unwind" fn() -> !>(f)() }
    }
    // SAFETY: with no C++ runtime to throw through, abort is what an uncaught bad_alloc does.
    unsafe { libc::abort() }
}

macro_rules! new_ops {
    ($($name:ident($($arg:ident: $ty:ty),*) => ($size:expr, $align:expr, $nothrow:expr);)*) => {$(
        /// # Safety
        /// The C++ contract of this `operator new` form.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> *mut c_void {
            let p = new_impl($size, $align, $nothrow, unwind::here());
            // The stack walk reads this frame: keep the call above from becoming a tail call.
            core::hint::black_box(p)
        }
    )*};
}

macro_rules! delete_ops {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        /// # Safety
        /// The C++ contract of this `operator delete` form: `p` is null or came from new.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *mut c_void $(, $arg: $ty)*) {
            $(let _ = $arg;)*
            engine::release(p.cast(), unwind::here());
            // Not a tail call: the walk of the history's stack starts in this frame.
            core::hint::black_box(());
        }
    )*};
}

// new(size_t), new[](size_t), their nothrow and align_val_t forms.
new_ops! {
    _Znwm(n: usize) => (n, 0, false);
    _Znam(n: usize) => (n, 0, false);
    _ZnwmRKSt9nothrow_t(n: usize, _t: *const c_void) => (n, 0, true);
    _ZnamRKSt9nothrow_t(n: usize, _t: *const c_void) => (n, 0, true);
    _ZnwmSt11align_val_t(n: usize, a: usize) => (n, a, false);
    _ZnamSt11align_val_t(n: usize, a: usize) => (n, a, false);
    _ZnwmSt11align_val_tRKSt9nothrow_t(n: usize, a: usize, _t: *const c_void) => (n, a, true);
    _ZnamSt11align_val_tRKSt9nothrow_t(n: usize, a: usize, _t: *const c_void) => (n, a, true);
}

// delete and delete[] with every combination of size, alignment and nothrow.
delete_ops! {
    _ZdlPv();
    _ZdaPv();
    _ZdlPvm(n: usize);
    _ZdaPvm(n: usize);
    _ZdlPvRKSt9nothrow_t(t: *const c_void);
    _ZdaPvRKSt9nothrow_t(t: *const c_void);
    _ZdlPvSt11align_val_t(a: usize);
    _ZdaPvSt11align_val_t(a: usize);
    _ZdlPvmSt11align_val_t(n: usize, a: usize);
    _ZdaPvmSt11align_val_t(n: usize, a: usize);
    _ZdlPvSt11align_val_tRKSt9nothrow_t(a: usize, t: *const c_void);
    _ZdaPvSt11align_val_tRKSt9nothrow_t(a: usize, t: *const c_void);
}
