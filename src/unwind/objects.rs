//! The loaded object that holds a return address, and where its unwind tables are: glibc's
//! lock-free `_dl_find_object`, or `dl_iterate_phdr` where glibc is older.

use super::rules::Rule;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `struct dl_find_object` on x86_64 (glibc 2.35 and later).
#[repr(C)]
pub(super) struct DlFindObject {
    flags: u64,
    pub(super) map_start: *mut c_void,
    pub(super) map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

pub(super) type FindObject = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

/// `_dl_find_object`, looked up at start-up (see `init`) so the library still loads on an older
/// glibc: 0 while unknown, 1 when absent, else its address.
pub(super) static FIND_OBJECT: AtomicUsize = AtomicUsize::new(0);

/// Looks up what the walker needs from the loader while the library initialises, on the first
/// allocation. Later, `dlsym` would take the loader's lock from inside malloc: a thread that a
/// library constructor starts and joins, during a `dlopen` that holds that lock, would then wait
/// for it forever.
pub(super) fn init() {
    let _ = find_object_fn();
}

pub(super) fn find_object_fn() -> Option<FindObject> {
    let mut f = FIND_OBJECT.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name. It runs once, from `init`
        // during the library's initialisation (where the caller may allocate: dlsym's own calls
        // take the bootstrap path then), or under the reentrancy guard if that was skipped.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
        f = if p.is_null() { 1 } else { p as usize };
        FIND_OBJECT.store(f, Ordering::Relaxed);
    }
    // SAFETY: a nonzero value other than 1 is the address of glibc's `_dl_find_object`, whose
    // signature `FindObject` matches.
    (f != 1).then(|| unsafe { core::mem::transmute::<usize, FindObject>(f) })
}

/// A loaded object's program headers, as the loader has them.
pub(super) struct Object<'a> {
    /// What the object's addresses are offset by (the loader's l_addr).
    bias: usize,
    phdrs: &'a [libc::Elf64_Phdr],
}

impl Object<'_> {
    /// The end of the file-backed part of the loaded segment that holds `addr`: the bytes up to
    /// there are mapped and readable, which the unwind tables, read-only data, always are.
    pub(super) fn segment_end(&self, addr: usize) -> Option<usize> {
        self.phdrs
            .iter()
            .filter(|ph| ph.p_type == libc::PT_LOAD)
            .find_map(|ph| {
                let lo = self.bias.wrapping_add(ph.p_vaddr as usize);
                let hi = lo.wrapping_add(ph.p_filesz as usize);
                (addr >= lo && addr < hi).then_some(hi)
            })
    }

    /// The address of `.eh_frame_hdr`, if the object has one.
    pub(super) fn eh_frame_hdr(&self) -> Option<usize> {
        let ph = self.phdrs.iter().find(|ph| ph.p_type == libc::PT_GNU_EH_FRAME)?;
        Some(self.bias.wrapping_add(ph.p_vaddr as usize))
    }
}

/// Runs `f` on the loaded object that contains `pc`; None when no object holds `pc`.
///
/// The object stays mapped while `f` runs: with `_dl_find_object` because `pc` is a return
/// address on the calling thread's own stack, so its code is still executing and cannot have
/// been closed; with the `dl_iterate_phdr` fallback because the loader's lock is held.
pub(super) fn with_object(pc: usize, f: impl FnOnce(&Object) -> Rule) -> Option<Rule> {
    if let Some(find) = find_object_fn() {
        let mut r = core::mem::MaybeUninit::<DlFindObject>::uninit();
        // SAFETY: `find` is `_dl_find_object`, which fills `r` when it returns 0; it takes no
        // lock and does not allocate.
        if unsafe { find(pc as *mut c_void, r.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: initialised by the successful call above.
        let r = unsafe { r.assume_init() };
        // `_dl_find_object` gives the mapping but not the program headers; they are in the
        // object's first page, after its ELF header, in every object the usual linkers make.
        if let Some(obj) = object_from_header(r.map_start as usize, r.map_end as usize) {
            return Some(f(&obj));
        }
    }
    with_object_iterate(pc, f)
}

/// The program headers of the object mapped from `start` (to `end`), read from its ELF header;
/// None when the first page does not hold them.
pub(super) fn object_from_header(start: usize, end: usize) -> Option<Object<'static>> {
    pub(super) const PAGE: usize = 4096;
    let ehdr_size = core::mem::size_of::<libc::Elf64_Ehdr>();
    let phdr_size = core::mem::size_of::<libc::Elf64_Phdr>();
    if !start.is_multiple_of(PAGE) || end < start + PAGE {
        return None;
    }
    // SAFETY: the loader maps every object from a page boundary, at least a page of it, readable
    // (it is the start of the first loaded segment), and the object stays mapped (see
    // `with_object`); the header fits in that page.
    let ehdr = unsafe { &*(start as *const libc::Elf64_Ehdr) };
    let phoff = ehdr.e_phoff as usize;
    let phnum = usize::from(ehdr.e_phnum);
    if ehdr.e_ident[..4] != *b"\x7fELF"
        || usize::from(ehdr.e_phentsize) != phdr_size
        || phoff < ehdr_size
        || !phoff.is_multiple_of(core::mem::align_of::<libc::Elf64_Phdr>())
        || phoff + phnum * phdr_size > PAGE
    {
        return None;
    }
    // SAFETY: the headers lie inside the same first page (checked above), properly aligned.
    let phdrs = unsafe { core::slice::from_raw_parts((start + phoff) as *const libc::Elf64_Phdr, phnum) };
    // The first loaded segment is the one mapped at `start`: the bias follows from its address.
    let first = phdrs.iter().find(|ph| ph.p_type == libc::PT_LOAD)?;
    let bias = start.wrapping_sub(first.p_vaddr as usize & !(PAGE - 1));
    Some(Object { bias, phdrs })
}

/// The `dl_iterate_phdr` fallback for glibc before 2.35 and for objects whose headers are not
/// in their first page: slower (it takes the loader's lock) but used only on a cache miss.
///
/// Why that lock cannot deadlock here: glibc's `dl_load_write_lock` is recursive, so a program
/// that allocates from inside its own `dl_iterate_phdr` callback takes it again on the same
/// thread; another thread holds it only while it walks or changes the list of objects, and a
/// callback of that walk that allocates waits at most for one of our list locks, which no thread
/// holds while it walks a stack.
pub(super) fn with_object_iterate<F: FnOnce(&Object) -> Rule>(pc: usize, f: F) -> Option<Rule> {
    let mut f = Some(f);
    let mut found = None;
    super::each_object(&mut |_, bias, phdrs| {
        let inside = phdrs.iter().any(|ph| {
            let lo = bias.wrapping_add(ph.p_vaddr as usize);
            ph.p_type == libc::PT_LOAD && pc >= lo && pc < lo.wrapping_add(ph.p_memsz as usize)
        });
        if inside {
            if let Some(f) = f.take() {
                found = Some(f(&Object { bias, phdrs }));
            }
        }
        inside
    });
    found
}
