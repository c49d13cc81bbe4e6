//! Return addresses of this process as the shared frame record (`analysis::frame`), named the
//! one way both sides name them (`analysis::symbolize`): from each loaded object's file, the
//! object found in the loader's table of loaded objects; and the allocation function a stack's
//! first frame called (`analysis::allocfn`); for suppressions, a stack's return addresses named
//! one at a time as matching reads them (`Lazy`), since the first name in an object reads that
//! object's debug info whole. It allocates (on libdmem's own heap), so it runs only at exit or on
//! the way to an abort, with the reentrancy guard held and never from inside the loader; it asks
//! the loader (`dl_iterate_phdr`, which takes the loader's lock) only until the exit report has
//! taken the table of loaded objects (`name_without_the_loader`).

#[cfg(not(test))]
use crate::analysis::allocfn::{Alloc, Callees};
use crate::analysis::frame::Frame;
#[cfg(not(test))]
use crate::analysis::suppressions::{Frames, Head, Recorded};
use crate::analysis::symbolize::{build_id, in_debug_tree, Debug};
use core::sync::atomic::{AtomicPtr, Ordering};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// A loaded object as the loader lists it: its path (empty for the program), the address its
/// ELF header is mapped at, its load bias, and the address ranges of its segments.
struct Object {
    path: Vec<u8>,
    header: usize,
    bias: usize,
    ranges: Vec<(usize, usize)>,
}

/// The loaded objects, taken by `name_without_the_loader`; null until then.
static OBJECTS: AtomicPtr<Vec<Object>> = AtomicPtr::new(core::ptr::null_mut());

/// The loaded objects now, from the loader (`dl_iterate_phdr`, which takes its lock).
fn list_objects() -> Vec<Object> {
    let mut objects: Vec<Object> = Vec::new();
    crate::unwind::each_object(&mut |path, bias, phdrs| {
        let loads = phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
        let ranges = loads
            .clone()
            .map(|p| (bias + p.p_vaddr as usize, bias + (p.p_vaddr + p.p_memsz) as usize))
            .collect();
        // The segment that maps the file from its start holds the ELF header.
        let header = loads
            .clone()
            .find(|p| p.p_offset == 0)
            .map_or(bias, |p| bias + p.p_vaddr as usize);
        objects.push(Object {
            path: path.to_vec(),
            header,
            bias,
            ranges,
        });
        false
    });
    objects
}

/// Takes what naming frames needs from the loader, while its lock can be taken: the exit report
/// names frames after it has stopped every other thread for good, and one of them may hold that
/// lock, which `dl_iterate_phdr` takes. The loaded objects' paths and segments are kept (once per
/// process).
pub fn name_without_the_loader() {
    if !OBJECTS.load(Ordering::Acquire).is_null() {
        return;
    }
    OBJECTS.store(Box::into_raw(Box::new(list_objects())), Ordering::Release);
}

/// The loaded object that holds `at` as (path as the loader knows it, empty for the program;
/// its ELF header's address; its load bias), from the table `name_without_the_loader` took:
/// None before it ran, Some(None) when no object holds `at`.
pub fn object_at(at: usize) -> Option<Option<(&'static [u8], usize, usize)>> {
    let objects = OBJECTS.load(Ordering::Acquire);
    if objects.is_null() {
        return None;
    }
    // SAFETY: the table is leaked, never freed, once published.
    let objects: &'static [Object] = unsafe { &*objects };
    Some(find(objects, at).map(|o| (&o.path[..], o.header, o.bias)))
}

fn find(objects: &[Object], at: usize) -> Option<&Object> {
    objects
        .iter()
        .find(|o| o.ranges.iter().any(|&(s, e)| s <= at && at < e))
}

/// Where an address's object is: its path (as the kernel names it) and where it was loaded.
struct Loaded {
    path: Option<Rc<Path>>,
    /// The ELF header's address, which also keys the caches below.
    base: u64,
    bias: u64,
}

/// What naming has found of each loaded object, by the address of its ELF header: its path as
/// the kernel's list of mappings (and valgrind) name it, not as the loader does (it knows
/// libraries by the path it found them at, `/lib/x86_64-linux-gnu/libc.so.6` through a symbolic
/// link, and itself by the program's interpreter, `/lib64/ld-linux-x86-64.so.2`); and its files
/// opened for naming.
#[derive(Default)]
pub struct Objects {
    paths: HashMap<u64, Option<Rc<Path>>>,
    debug: HashMap<u64, Option<Rc<Debug>>>,
}

fn loaded(at: usize, objects: &mut Objects) -> Option<Loaded> {
    let (named, base, bias) = match object_at(at) {
        // Once the exit report took the table of loaded objects, the loader is not asked: a
        // thread it stopped may hold the loader's lock.
        Some(None) => return None,
        Some(Some((path, header, bias))) => (
            (!path.is_empty()).then(|| String::from_utf8_lossy(path).into_owned()),
            header,
            bias,
        ),
        None => {
            let now = list_objects();
            let o = find(&now, at)?;
            (
                (!o.path.is_empty()).then(|| String::from_utf8_lossy(&o.path).into_owned()),
                o.header,
                o.bias,
            )
        }
    };
    // The loader names the program by how it was started (or not at all): its path is what
    // the kernel says it runs.
    let path = objects
        .paths
        .entry(base as u64)
        .or_insert_with(|| {
            canonical(at).or_else(|| match named {
                Some(p) if p.starts_with('/') => Some(Rc::from(Path::new(&p))),
                _ => std::fs::read_link("/proc/self/exe")
                    .ok()
                    .map(|p| Rc::from(p.as_path())),
            })
        })
        .clone();
    Some(Loaded {
        path,
        base: base as u64,
        bias: bias as u64,
    })
}

/// The path of the file mapped at `at`, as the kernel names it: a link in `map_files` read with
/// one `readlink`. Not `realpath`, which calls malloc: this runs in reports from a fatal signal,
/// which must never reach the real allocator.
fn canonical(at: usize) -> Option<Rc<Path>> {
    let (start, end) = crate::procmaps::mapping_containing(at)?;
    ["thread-self", "self"].iter().find_map(|who| {
        std::fs::read_link(format!("/proc/{who}/map_files/{start:x}-{end:x}"))
            .ok()
            .map(|p| Rc::from(p.as_path()))
    })
}

/// The frames of return address `pc`: the inlined functions innermost first, then the function
/// they were inlined into, named from the object's file as the launcher names them from a core
/// (`analysis::symbolize`), its detached debug file found by build id in this machine's debug
/// tree when it has no DWARF of its own.
pub fn frames(pc: usize, objects: &mut Objects) -> Vec<Frame> {
    // A return address points after the call; the call itself is one byte earlier.
    let at = pc.wrapping_sub(1);
    let Some(obj) = loaded(at, objects) else {
        return vec![Frame::bare(pc as u64, None)];
    };
    let debug = objects
        .debug
        .entry(obj.base)
        .or_insert_with(|| {
            let file = obj.path.as_deref()?;
            let detached = || in_debug_tree(Path::new("/"), &build_id(file)?);
            on_own_stack(|| Debug::open(Some(file), detached)).map(Rc::new)
        })
        .clone();
    match debug {
        Some(d) => d.frames(pc as u64, (at as u64).wrapping_sub(obj.bias), obj.path),
        None => vec![Frame::bare(pc as u64, obj.path)],
    }
}

/// Bytes of the stack `on_own_stack` maps; reserved, not committed, so only what is touched costs
/// memory.
const OWN_STACK: usize = 8 << 20;

unsafe extern "C" {
    fn getcontext(ucp: *mut libc::ucontext_t) -> libc::c_int;
    fn makecontext(ucp: *mut libc::ucontext_t, func: extern "C" fn(), argc: libc::c_int, ...);
    fn swapcontext(oucp: *mut libc::ucontext_t, ucp: *const libc::ucontext_t) -> libc::c_int;
}

/// A call `on_own_stack` makes on the other stack, and what it returned.
struct Call<F, R> {
    f: Option<F>,
    r: Option<R>,
}

/// The other stack's first frame: runs the call whose address is split in `lo` and `hi`
/// (makecontext passes int arguments), then returns to the context makecontext linked.
extern "C" fn run_call<F: FnOnce() -> R, R>(lo: u32, hi: u32) {
    let call = ((hi as usize) << 32 | lo as usize) as *mut Call<F, R>;
    // SAFETY: `on_own_stack` passes the address of its `Call`, alive until this returns.
    let call = unsafe { &mut *call };
    if let Some(f) = call.f.take() {
        call.r = Some(f());
    }
}

/// Runs `f` on a stack mapped for the call, then unmaps it. Loading an object's DWARF builds a
/// decompressor's state of some 40 KiB on the stack (Debian's debug files are compressed), and
/// the report may run on whatever stack the program left from: a coroutine's, a small thread's,
/// an alternate signal stack. The mapping is gone before the report goes on, so no reader of a
/// core later scans it. Where the mapping or the switch fails, `f` runs where it is.
fn on_own_stack<F: FnOnce() -> R, R>(f: F) -> R {
    // SAFETY: an anonymous private mapping; nothing else refers to it.
    let stack = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            OWN_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return f();
    }
    let mut call: Call<F, R> = Call { f: Some(f), r: None };
    let at = &raw mut call as usize;
    // SAFETY: zeroed ucontext_t values are filled by getcontext before use; the new context runs
    // on the mapping, returns to `back` through uc_link, and `call` outlives the switch.
    unsafe {
        let mut back: libc::ucontext_t = core::mem::zeroed();
        let mut run: libc::ucontext_t = core::mem::zeroed();
        if getcontext(&mut run) == 0 {
            run.uc_stack.ss_sp = stack;
            run.uc_stack.ss_size = OWN_STACK;
            run.uc_link = &mut back;
            let entry: extern "C" fn(u32, u32) = run_call::<F, R>;
            makecontext(
                &mut run,
                core::mem::transmute::<extern "C" fn(u32, u32), extern "C" fn()>(entry),
                2,
                at as u32,
                (at >> 32) as u32,
            );
            swapcontext(&mut back, &run);
        }
        libc::munmap(stack, OWN_STACK);
    }
    match (call.r, call.f) {
        (Some(r), _) => r,
        // The switch failed before the call ran: run it here.
        (None, Some(f)) => f(),
        (None, None) => unreachable!("the call ran and returned nothing"),
    }
}

/// Reads this process's memory without faulting on what is not mapped.
#[cfg(not(test))]
fn read_own(addr: u64, buf: &mut [u8]) -> bool {
    let start = addr as usize & !7;
    let end = (addr as usize + buf.len() + 7) & !7;
    let mut words: Vec<usize> = Vec::with_capacity((end - start) / 8);
    crate::leak::stopworld::read_words_checked(start, end, &mut |ws| words.extend_from_slice(ws));
    if words.len() * 8 != end - start {
        return false;
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let skip = addr as usize - start;
    buf.copy_from_slice(&bytes[skip..skip + buf.len()]);
    true
}

/// The allocation function the call returning to `first` (a stack's first frame) reached, and
/// that function's address when it was read.
#[cfg(not(test))]
pub fn alloc_of(callees: &mut Callees, objects: &mut Objects, first: usize) -> (Alloc, u64) {
    let Some(obj) = loaded(first.wrapping_sub(1), objects) else {
        return (Alloc::of(None), 0);
    };
    match callees.called(&mut read_own, first as u64, obj.base) {
        Some((name, at)) => (Alloc::of(Some(name)), at),
        None => (Alloc::of(None), 0),
    }
}

/// The path of the object that holds the function at `ip` (an allocation function read from the
/// code), as the launcher finds it in a core's mappings: by address, whoever's it is (libdmem's,
/// or libstdc++'s operator new that calls malloc); None when the call was not read.
#[cfg(not(test))]
fn object_of_function(ip: u64, objects: &mut Objects) -> Option<Rc<Path>> {
    if ip == 0 {
        return None;
    }
    loaded(ip as usize, objects).and_then(|o| o.path)
}

/// Each return address symbolised once, and each stack's allocation function read once, for
/// the exit report.
#[cfg(not(test))]
pub struct Symbols {
    pcs: std::collections::HashMap<usize, Rc<[Frame]>>,
    objects: Objects,
    callees: Callees,
}

#[cfg(not(test))]
impl Symbols {
    pub fn new() -> Symbols {
        Symbols {
            pcs: Default::default(),
            objects: Objects::default(),
            callees: Callees::default(),
        }
    }

    /// The frames of one return address.
    pub fn of(&mut self, pc: usize) -> Rc<[Frame]> {
        let objects = &mut self.objects;
        self.pcs
            .entry(pc)
            .or_insert_with(|| frames(pc, objects).into())
            .clone()
    }

    /// A recorded stack (zeros past its end) symbolised, inlined frames expanded, with the
    /// allocation function its first frame called.
    pub fn stack(&mut self, pcs: &[usize]) -> Recorded {
        let (used, head) = self.head(pcs);
        let frames = used.iter().flat_map(|&pc| self.of(pc).to_vec()).collect();
        Recorded {
            frames,
            alloc: head.alloc,
            alloc_ip: head.alloc_ip,
            alloc_object: head.alloc_object,
            truncated: head.truncated,
        }
    }

    /// A recorded stack as suppressions match it: what is known before any name (the
    /// allocation function, read from the code, not the debug info), and its return addresses
    /// to be named as matching asks (`suppressions::Frames`).
    pub fn unnamed<'s>(&'s mut self, pcs: &'s [usize]) -> (Unnamed, Lazy<'s>) {
        let (used, head) = self.head(pcs);
        let n = used.len();
        let lazy = Lazy {
            syms: self,
            pcs: &pcs[..n],
            objects: vec![None; n],
            frames: vec![None; n],
        };
        (head, lazy)
    }

    /// The return addresses in use (up to the first zero), and what is known of the stack
    /// without naming them.
    fn head<'p>(&mut self, pcs: &'p [usize]) -> (&'p [usize], Unnamed) {
        let used = &pcs[..pcs.iter().position(|&pc| pc == 0).unwrap_or(pcs.len())];
        let (alloc, alloc_ip) = match used.first() {
            Some(&first) => alloc_of(&mut self.callees, &mut self.objects, first),
            None => (Alloc::of(None), 0),
        };
        let alloc_object = object_of_function(alloc_ip, &mut self.objects);
        let head = Unnamed {
            alloc,
            alloc_ip,
            alloc_object,
            truncated: used.len() == pcs.len(),
        };
        (used, head)
    }
}

/// What is known of a recorded stack before its return addresses are named.
#[cfg(not(test))]
pub struct Unnamed {
    pub alloc: Alloc,
    /// The allocation function's address, 0 when the call was not read.
    pub alloc_ip: u64,
    pub alloc_object: Option<Rc<Path>>,
    pub truncated: bool,
}

#[cfg(not(test))]
impl Unnamed {
    pub fn head(&self) -> Head<'_> {
        Head {
            alloc: self.alloc,
            alloc_object: self.alloc_object.as_deref(),
            truncated: self.truncated,
        }
    }
}

/// A recorded stack's return addresses, each one's object and frames looked up when first
/// asked for: the object from the table of loaded objects, the frames through `Symbols::of`,
/// which reads the object's debug info the first time it names an address in it.
#[cfg(not(test))]
pub struct Lazy<'s> {
    syms: &'s mut Symbols,
    pcs: &'s [usize],
    objects: Vec<Option<Option<Rc<Path>>>>,
    frames: Vec<Option<Rc<[Frame]>>>,
}

#[cfg(not(test))]
impl Frames for Lazy<'_> {
    fn len(&self) -> usize {
        self.pcs.len()
    }

    fn object(&mut self, i: usize) -> Option<&Path> {
        let (pc, objects) = (self.pcs[i], &mut self.syms.objects);
        // The frames' object is the same lookup (see `frames`).
        self.objects[i]
            .get_or_insert_with(|| loaded(pc.wrapping_sub(1), objects).and_then(|o| o.path))
            .as_deref()
    }

    fn frames(&mut self, i: usize) -> &[Frame] {
        let (pc, syms) = (self.pcs[i], &mut *self.syms);
        self.frames[i].get_or_insert_with(|| syms.of(pc))
    }
}
