//! The exported malloc family. Each function is a thin wrapper: argument rules that glibc
//! documents (overflow checks, alignment rules) and the trace line, over the one internal path in
//! `engine.rs`. Each allocating one takes `unwind::here()` in its own frame, where the stack walk
//! starts; the trace line after the call keeps that frame alive (no tail call) until it is done.

use crate::diag;
use crate::engine;
use crate::out::Out;
use crate::unwind::{self, Origin};
use libc::{c_int, c_void, size_t};

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; the page size is always available on Linux.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// glibc's `_mid_memalign`: alignments that are not a power of two are rounded up to one (from
/// 32), absurd ones fail with EINVAL, and small ones are ordinary allocations.
fn memalign_log2(align: usize) -> Result<u32, c_int> {
    if align <= 16 {
        return Ok(0);
    }
    if align > usize::MAX / 2 + 1 {
        return Err(libc::EINVAL);
    }
    let align = if align.is_power_of_two() {
        align
    } else {
        align.next_power_of_two().max(32)
    };
    Ok(align.trailing_zeros())
}

fn aligned(align: usize, size: usize, from: Origin) -> *mut u8 {
    match memalign_log2(align) {
        Ok(log2) => engine::allocate(size, log2, false, from),
        Err(e) => {
            // SAFETY: errno slot of the calling thread.
            unsafe { *libc::__errno_location() = e };
            core::ptr::null_mut()
        }
    }
}

// The trace line's check is inlined into every entry point; only a traced call pays for the
// formatting, out of line, so the entry points keep small frames.
#[inline(always)]
fn trace(name: &str, args: &[usize], p: *const u8) {
    if diag::tracing() {
        trace_line(name, args, p);
    }
}

#[cold]
#[inline(never)]
fn trace_line(name: &str, args: &[usize], p: *const u8) {
    if let Some(mut out) = traced(name, args) {
        out.str(") = ").ptr(p).str("\n").flush();
    }
}

/// A trace line opened with the function's name and decimal arguments.
fn traced(name: &str, args: &[usize]) -> Option<Out> {
    let mut out = diag::trace()?;
    out.str(name).str("(");
    for (i, &a) in args.iter().enumerate() {
        if i > 0 {
            out.str(", ");
        }
        out.dec(a as u64);
    }
    Some(out)
}

#[cold]
#[inline(never)]
fn trace_realloc(ptr: *const u8, size: usize, p: *const u8) {
    if let Some(mut out) = diag::trace() {
        out.str("realloc(").ptr(ptr).str(", ").dec(size as u64);
        out.str(") = ").ptr(p).str("\n").flush();
    }
}

#[cold]
#[inline(never)]
fn trace_free(ptr: *const u8) {
    if let Some(mut out) = diag::trace() {
        out.str("free(").ptr(ptr).str(")\n").flush();
    }
}

#[cold]
#[inline(never)]
fn trace_posix_memalign(align: usize, size: usize, ret: c_int, p: *const u8) {
    if let Some(mut out) = traced("posix_memalign", &[align, size]) {
        out.str(") = ")
            .dec(ret as u64)
            .str(" (")
            .ptr(p)
            .str(")\n")
            .flush();
    }
}

/// # Safety
/// The C malloc contract.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    let p = engine::allocate(size, 0, false, unwind::here());
    trace("malloc", &[size], p);
    p.cast()
}

/// # Safety
/// The C calloc contract.
#[no_mangle]
pub unsafe extern "C" fn calloc(nmemb: size_t, size: size_t) -> *mut c_void {
    let p = match nmemb.checked_mul(size) {
        Some(total) => engine::allocate(total, 0, true, unwind::here()),
        None => {
            // SAFETY: errno slot of the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            core::ptr::null_mut()
        }
    };
    trace("calloc", &[nmemb, size], p);
    p.cast()
}

/// # Safety
/// The C realloc contract: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    let p = engine::reallocate(ptr.cast(), size, unwind::here());
    if diag::tracing() {
        trace_realloc(ptr.cast(), size, p);
    }
    p.cast()
}

/// # Safety
/// The C reallocarray contract.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, nmemb: size_t, size: size_t) -> *mut c_void {
    match nmemb.checked_mul(size) {
        // SAFETY: forwarded under the same contract.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            // SAFETY: errno slot of the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            core::ptr::null_mut()
        }
    }
}

/// # Safety
/// The C free contract: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    engine::release(ptr.cast(), unwind::here());
    if diag::tracing() {
        trace_free(ptr.cast());
    }
}

/// # Safety
/// The C memalign contract.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let p = aligned(align, size, unwind::here());
    trace("memalign", &[align, size], p);
    p.cast()
}

/// # Safety
/// The C11 aligned_alloc contract; glibc 2.36 treats it exactly as memalign.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    let p = aligned(align, size, unwind::here());
    trace("aligned_alloc", &[align, size], p);
    p.cast()
}

/// # Safety
/// The POSIX contract: `memptr` is writable; it is left untouched on failure.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(memptr: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    let word = core::mem::size_of::<*mut c_void>();
    let ret = if align == 0 || !align.is_multiple_of(word) || !(align / word).is_power_of_two() {
        libc::EINVAL
    } else {
        // errno as glibc leaves it: untouched on success, ENOMEM (set by the allocation) when
        // the memory cannot be had.
        let p = aligned(align, size, unwind::here());
        if p.is_null() {
            libc::ENOMEM
        } else {
            // SAFETY: the caller passes a writable pointer slot.
            unsafe { *memptr = p.cast() };
            0
        }
    };
    if diag::tracing() {
        let p = if ret == 0 {
            // SAFETY: read back only on success, when we wrote it.
            unsafe { *memptr }
        } else {
            core::ptr::null_mut()
        };
        trace_posix_memalign(align, size, ret, p.cast());
    }
    ret
}

/// # Safety
/// The C valloc contract.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    let p = aligned(page_size(), size, unwind::here());
    trace("valloc", &[size], p);
    p.cast()
}

/// # Safety
/// The C pvalloc contract: the size is rounded up to whole pages.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let page = page_size();
    let p = match size.checked_add(page - 1) {
        Some(s) => aligned(page, s & !(page - 1), unwind::here()),
        None => {
            // SAFETY: errno slot of the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            core::ptr::null_mut()
        }
    };
    trace("pvalloc", &[size], p);
    p.cast()
}

/// # Safety
/// `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> size_t {
    engine::usable_size(ptr.cast())
}
