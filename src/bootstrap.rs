//! Start-up: finding the next allocator, and living on a static arena until we have.
//!
//! `dlsym` itself allocates (glibc's dlerror state is calloc'ed) before we know where the real
//! functions are, so while resolution is under way every allocation is served from a static
//! arena. Arena blocks carry no header; they are recognised by address forever after and never
//! handed to the real free. Another thread that allocates while one thread resolves also uses the
//! arena rather than waiting, so no lock order between us and the loader's lock can deadlock.

use crate::corrupt::{self, Damage};
use crate::header::{self, Header};
use crate::{options, sink, unwind};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use libc::{c_int, c_void, size_t};

type MallocFn = unsafe extern "C" fn(size_t) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int;
type UsableFn = unsafe extern "C" fn(*mut c_void) -> size_t;

/// The next definitions of the functions we build on. Only this small set is used: every entry
/// point we export is expressed through them, so a backend (jemalloc, tcmalloc, mimalloc) that
/// lacks, say, `pvalloc` never sees a block from one allocator freed by another.
pub struct Real {
    pub malloc: MallocFn,
    pub calloc: CallocFn,
    pub realloc: ReallocFn,
    pub free: FreeFn,
    pub posix_memalign: PosixMemalignFn,
    pub usable_size: Option<UsableFn>,
}

const UNINIT: u8 = 0;
const RESOLVING: u8 = 1;
const READY: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);

struct RealCell(UnsafeCell<Option<Real>>);
// SAFETY: written once by the thread that wins UNINIT -> RESOLVING, before it publishes READY
// with Release ordering; read only after an Acquire load has seen READY.
unsafe impl Sync for RealCell {}
static REAL: RealCell = RealCell(UnsafeCell::new(None));

/// Gives the block of a claimed header back to the backend.
#[inline(always)]
pub fn dispose(real: &Real, hdr: *mut Header) {
    // SAFETY: the caller won the claim on `hdr` (which took it off its list), so it is ours
    // alone; afterwards nothing refers to the block.
    unsafe {
        let Some(base) = header::base_of(hdr, (*hdr).align_log2()) else {
            corrupt::abort(hdr.cast(), Damage::BaseWord)
        };
        (real.free)(base.cast());
    }
}

/// Gives back the blocks other threads handed over, once they are off their list: those the
/// list operations collect for the allocation path (`engine.rs`) and an exiting thread's list
/// (`lists.rs`).
#[inline(always)]
pub fn give_back(drained: impl Iterator<Item = *mut Header>) {
    let mut drained = drained.peekable();
    if drained.peek().is_none() {
        return;
    }
    let Some(real) = real() else { return };
    for hdr in drained {
        dispose(real, hdr);
    }
}

/// The real allocator, resolving it on first use. None while resolution is under way (on this
/// or another thread): the caller must then use the arena.
#[inline]
pub fn real() -> Option<&'static Real> {
    if STATE.load(Ordering::Acquire) == READY {
        // SAFETY: READY is stored only after REAL was written (see RealCell).
        return unsafe { (*REAL.0.get()).as_ref() };
    }
    init_slow()
}

#[cold]
fn init_slow() -> Option<&'static Real> {
    if STATE
        .compare_exchange(UNINIT, RESOLVING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let resolved = resolve();
    // Before the first header is written and the first errno saved, which wait for READY below.
    header::choose_key();
    crate::tls::learn_errno();
    // SAFETY: we won the transition to RESOLVING, so we are the only writer, and no reader looks
    // before READY is published below.
    unsafe { *REAL.0.get() = Some(resolved) };
    // Standard error first, so a warning about the options reaches it.
    sink::init_stderr();
    options::parse();
    sink::init_files(options::get().files());
    // While allocations still come from the arena (see there).
    #[cfg(not(test))]
    sink::catch_the_main_threads_exit();
    unwind::init();
    STATE.store(READY, Ordering::Release);
    // SAFETY: just written and published.
    unsafe { (*REAL.0.get()).as_ref() }
}

/// dlsym takes the loader's lock. It runs once, on the first allocation, which the library's
/// constructor forces before `main` if nothing came earlier; the lock is recursive, so a first
/// allocation made by the loader itself (or inside a `dl_iterate_phdr` callback) takes it again
/// on the same thread, and a thread that allocates while another resolves is served from the
/// arena instead of waiting (see `real`).
fn lookup(name: &core::ffi::CStr) -> *mut c_void {
    // SAFETY: RTLD_NEXT with a NUL-terminated name is dlsym's documented use; it may call our
    // calloc, which the arena serves while STATE is RESOLVING.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

fn resolve() -> Real {
    let need = |name: &core::ffi::CStr| {
        let p = lookup(name);
        if p.is_null() {
            sink::stderr()
                .str("dmem: cannot find the next definition of ")
                .bytes(name.to_bytes())
                .str(" (is the program statically linked?); aborting\n")
                .flush();
            // SAFETY: abort never returns; without an allocator underneath there is no way on.
            unsafe { libc::abort() };
        }
        p
    };
    // SAFETY: each pointer is the next definition of the C function of that name, whose
    // signature is the one given by the type it is transmuted to.
    unsafe {
        Real {
            malloc: core::mem::transmute::<*mut c_void, MallocFn>(need(c"malloc")),
            calloc: core::mem::transmute::<*mut c_void, CallocFn>(need(c"calloc")),
            realloc: core::mem::transmute::<*mut c_void, ReallocFn>(need(c"realloc")),
            free: core::mem::transmute::<*mut c_void, FreeFn>(need(c"free")),
            posix_memalign: core::mem::transmute::<*mut c_void, PosixMemalignFn>(need(c"posix_memalign")),
            usable_size: {
                let p = lookup(c"malloc_usable_size");
                (!p.is_null()).then(|| core::mem::transmute::<*mut c_void, UsableFn>(p))
            },
        }
    }
}

/// Size of the bootstrap arena. glibc 2.36's dlsym needs a few hundred bytes; the rest is margin
/// for loaders and allocators that do more at that moment.
const ARENA_SIZE: usize = 256 * 1024;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_SIZE]>);
// SAFETY: disjoint pieces are handed out through an atomic bump pointer; each piece is then
// owned by whoever received it.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_SIZE]));
static ARENA_USED: AtomicUsize = AtomicUsize::new(0);

/// The arena's address range, for `contains` and for the layout descriptor.
pub const ARENA_RANGE: (*const u8, *const u8) = {
    let start = ARENA.0.get() as *const u8;
    (start, start.wrapping_add(ARENA_SIZE))
};

/// Every arena block has this prefix holding its size (for realloc and malloc_usable_size).
const ARENA_PREFIX: usize = 16;

#[inline(always)]
pub fn arena_contains(p: *const u8) -> bool {
    // One compare: below the start wraps around to a large distance.
    (p as usize).wrapping_sub(ARENA_RANGE.0 as usize) < ARENA_SIZE
}

/// A zeroed block from the arena (it is .bss and never reused), or null when it is exhausted.
pub fn arena_alloc(size: usize, align: usize) -> *mut u8 {
    let align = align.max(16);
    let start = ARENA_RANGE.0 as usize;
    let mut used = ARENA_USED.load(Ordering::Relaxed);
    loop {
        let user = (start + used + ARENA_PREFIX).next_multiple_of(align);
        let Some(end) = user.checked_add(size) else {
            return core::ptr::null_mut();
        };
        if end > start + ARENA_SIZE {
            return core::ptr::null_mut();
        }
        match ARENA_USED.compare_exchange_weak(used, end - start, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                let user = user as *mut u8;
                // SAFETY: [user - 16, user + size) lies inside the arena and was reserved by
                // the exchange above for this call alone; the prefix is 8-byte aligned.
                unsafe { user.sub(ARENA_PREFIX).cast::<usize>().write(size) };
                return user;
            }
            Err(now) => used = now,
        }
    }
}

/// The size an arena block was allocated with.
pub fn arena_size(p: *const u8) -> usize {
    // SAFETY: `p` is an arena block (checked by the caller with `arena_contains`), so the prefix
    // written by `arena_alloc` sits right before it.
    unsafe { p.sub(ARENA_PREFIX).cast::<usize>().read() }
}
