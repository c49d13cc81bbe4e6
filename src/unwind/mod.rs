//! Capturing the allocating stack as raw return addresses.
//!
//! Only addresses are recorded; names are found later, by gdb from the core or at exit. The
//! walk starts in the exported allocation function (see `here`); any leading frames that still lie
//! in our own text are dropped, so the first recorded address is the return address into the
//! caller of the allocation function.
//!
//! Two unwinders, chosen with `unwinder=`: `fast`, the cached walker over the unwind tables in
//! `fast.rs` (rules in `rules.rs` from the tables read by `objects.rs` and `tables.rs`), and `backtrace`, the platform's `_Unwind_Backtrace`, which gives the same
//! frames at many times the cost and remains the fallback where the fast one cannot go.

pub mod callers;
#[cfg(target_arch = "x86_64")]
mod fast;
#[cfg(target_arch = "x86_64")]
mod objects;
#[cfg(target_arch = "x86_64")]
mod rules;
#[cfg(target_arch = "x86_64")]
mod shapes;
#[cfg(target_arch = "x86_64")]
mod stacks;
#[cfg(target_arch = "x86_64")]
mod tables;
#[cfg(target_arch = "x86_64")]
mod thread_tables;

use crate::header::NFRAMES;
#[cfg(target_arch = "x86_64")]
use crate::options::Unwinder;
use crate::stack_hint::Hint;
use core::sync::atomic::{AtomicUsize, Ordering};

static OWN_LO: AtomicUsize = AtomicUsize::new(0);
static OWN_HI: AtomicUsize = AtomicUsize::new(0);

/// Records the address range of libdmem's own loaded segments, found from the address of a
/// function of ours, and readies the cached walker. Called once at start-up, from the first
/// allocation; `dl_iterate_phdr` does not allocate.
pub fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        objects::init();
        thread_tables::init(fast::forget_table);
    }
    let probe = init as *const () as usize;
    each_object(&mut |_, bias, phdrs| {
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
            lo = lo.min(bias + ph.p_vaddr as usize);
            hi = hi.max(bias + (ph.p_vaddr + ph.p_memsz) as usize);
        }
        let ours = probe >= lo && probe < hi;
        if ours {
            OWN_LO.store(lo, Ordering::Relaxed);
            OWN_HI.store(hi, Ordering::Relaxed);
        }
        ours
    });
}

/// What `each_object` calls with each loaded object's path (empty for the main program), load
/// bias and program headers; true stops the walk.
pub type ObjectVisit<'a> = dyn FnMut(&[u8], usize, &[libc::Elf64_Phdr]) -> bool + 'a;

/// Calls `f` with each loaded object, through `dl_iterate_phdr`, until it returns true. It takes
/// the loader's lock and does not allocate.
pub fn each_object(f: &mut ObjectVisit) {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid dl_phdr_info whose dlpi_phdr array has dlpi_phnum
        // entries and whose name is NUL-terminated, for the duration of this callback; `data` is
        // the closure passed below.
        unsafe {
            let f = &mut *(data as *mut &mut ObjectVisit);
            let info = &*info;
            let name = if info.dlpi_name.is_null() {
                &b""[..]
            } else {
                core::ffi::CStr::from_ptr(info.dlpi_name).to_bytes()
            };
            let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
                &[]
            } else {
                core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum))
            };
            libc::c_int::from(f(name, info.dlpi_addr as usize, phdrs))
        }
    }
    let mut f = f;
    // SAFETY: `visit` matches the callback type and uses `data` only as the closure it is given
    // here, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(visit),
            (&mut f as *mut &mut dyn FnMut(&[u8], usize, &[libc::Elf64_Phdr]) -> bool).cast(),
        );
    }
}

/// True when `pc` lies inside libdmem itself.
pub fn is_own(pc: usize) -> bool {
    pc >= OWN_LO.load(Ordering::Relaxed) && pc < OWN_HI.load(Ordering::Relaxed)
}

/// Where a walk starts; see `here`.
#[cfg(target_arch = "x86_64")]
pub use fast::Origin;

/// Where a walk starts; only the cached walker uses it.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy)]
pub struct Origin;

/// The calling function's registers, taken by each exported allocation function so that the walk
/// starts in its frame rather than in libdmem's inner ones. The function that takes them must not
/// return, nor end in a tail call, before `capture` runs.
#[inline(always)]
pub fn here() -> Origin {
    #[cfg(target_arch = "x86_64")]
    return fast::here();
    #[cfg(not(target_arch = "x86_64"))]
    Origin
}

/// Fills `out` with up to NFRAMES return addresses, innermost first, zeroing the rest, and
/// returns what the per-stack counts need of the stack: its key, and, from the cached walker's
/// stack shapes, where its counts went last (`stack_hint::Hint`). The caller holds the
/// reentrancy guard, since either unwinder may allocate on first use; `cur` is the calling
/// thread's area, which holds the walker's caches.
#[inline(always)]
pub fn capture(cur: crate::thread::Current, from: Origin, out: &mut [usize; NFRAMES]) -> Hint {
    // The cached walker is for x86_64; elsewhere `unwinder=fast` means the platform unwinder.
    #[cfg(target_arch = "x86_64")]
    if crate::options::get().unwinder == Unwinder::Fast {
        let hint = fast::capture(cur.area(), from, out, is_own);
        if hint.key != 0 {
            return hint;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (cur, from);
    capture_backtrace(out)
}

/// The platform unwinder (`_Unwind_Backtrace`, through the `backtrace` crate): selectable with
/// `unwinder=backtrace`, and the fallback when the bounds of the stack a walk starts on
/// cannot be found (a process without `/proc`).
#[inline(never)]
fn capture_backtrace(out: &mut [usize; NFRAMES]) -> Hint {
    *out = [0; NFRAMES];
    let mut n = 0;
    // SAFETY: `trace_unsynchronized` is unsafe only because it must not run concurrently with
    // itself on one thread; the reentrancy guard held by our caller rules that out.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            if n == 0 && is_own(ip) {
                return true;
            }
            if ip == 0 {
                return false;
            }
            out[n] = ip;
            n += 1;
            n < NFRAMES
        });
    }
    Hint::bare(crate::stack_hint::key(out))
}

/// Notes that the program is unmapping `[start, end)`, so no walk reads there through the
/// bounds of a stack cached earlier.
pub fn note_unmap(start: usize, end: usize) {
    #[cfg(target_arch = "x86_64")]
    stacks::note_unmap(start, end);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, end);
}

/// Forgets the fast walker's cached rules: called after every dlclose, since another object
/// may be mapped at the unloaded one's addresses.
pub fn invalidate() {
    #[cfg(target_arch = "x86_64")]
    rules::invalidate();
}
