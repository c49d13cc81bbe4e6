//! The exit report's roots, by the rule of `analysis::roots` (what is a root and what is left
//! out, and why), with the facts learnt from inside the process: the loaded objects' writable
//! segments and TLS sizes from `dl_iterate_phdr`, libc's data around `main_arena`, each
//! thread's stack pointer, thread pointer and registers from the stop, the memory that holds
//! them from /proc/self/maps.

use super::live::Live;
use super::memory::OwnMemory;
use super::stopworld::{Seen, World};
use crate::analysis::arena;
use crate::analysis::blocks::Blocks;
use crate::analysis::carried::InFlight;
use crate::analysis::descriptor::TLS_AREA_BYTES;
use crate::analysis::maps::Mapping;
use crate::analysis::roots::{extra_roots, mark_heaps, static_tls, thread_ranges, ThreadFacts};
use crate::header::HEADER_SIZE;
use crate::{bootstrap, procmaps, thread, unwind};

/// What the loaded objects contribute to the roots, read with `dl_iterate_phdr` before anything
/// is locked or stopped: it takes the loader's lock, which a stopped thread may hold.
#[derive(Default)]
pub(super) struct Objects {
    /// Writable segments to scan: every object's but libdmem's and the backend's.
    pub(super) data: Vec<(usize, usize)>,
    /// libdmem's own writable segments: its lists, descriptor and bootstrap arena.
    pub(super) own: Vec<(usize, usize)>,
    /// libc's writable segments; `main_arena` is cut out of them, whichever allocator is the
    /// backend (it is glibc's state, as the launcher reads it from a core).
    pub(super) libc_data: Vec<(usize, usize)>,
    /// Whether glibc's malloc is the backend.
    pub(super) glibc_backend: bool,
    /// The static TLS the objects take (`analysis::roots::static_tls`).
    pub(super) static_tls: usize,
    /// libdmem's own memory (`own_memory`), filled in once the report's buffers are made.
    pub(super) own_memory: Vec<(usize, usize)>,
    /// The address the backend's `malloc` lives at, to recognise its object.
    pub(super) malloc: usize,
}

pub(super) fn objects() -> Objects {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid dl_phdr_info whose dlpi_phdr array has dlpi_phnum
        // entries, for the callback's duration; `data` is the Objects passed below.
        unsafe {
            let info = &*info;
            let objs = &mut *(data as *mut Objects);
            let base = info.dlpi_addr as usize;
            let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let seg = |ph: &libc::Elf64_Phdr| {
                let start = base + ph.p_vaddr as usize;
                (start, start + ph.p_memsz as usize)
            };
            let tls = phdrs.iter().filter(|ph| ph.p_type == libc::PT_TLS);
            objs.static_tls += static_tls(tls.map(|ph| ph.p_memsz as usize));
            let loads = phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD);
            if loads.clone().any(|ph| unwind::is_own(seg(ph).0)) {
                let writable = loads.filter(|ph| ph.p_flags & libc::PF_W != 0);
                objs.own.extend(writable.map(seg));
                return 0;
            }
            let backend = loads.clone().any(|ph| {
                let (s, e) = seg(ph);
                s <= objs.malloc && objs.malloc < e
            });
            let name = if info.dlpi_name.is_null() {
                &b""[..]
            } else {
                core::ffi::CStr::from_ptr(info.dlpi_name).to_bytes()
            };
            let is_libc = name.ends_with(b"/libc.so.6") || name == b"libc.so.6";
            objs.glibc_backend |= backend && is_libc;
            for ph in loads.filter(|ph| ph.p_flags & libc::PF_W != 0) {
                if is_libc {
                    objs.libc_data.push(seg(ph));
                } else if !backend {
                    objs.data.push(seg(ph));
                }
                // Any other backend (jemalloc, tcmalloc, mimalloc): all its writable data is the
                // allocator's state, left out whole.
            }
        }
        0
    }
    let mut objs = Objects {
        malloc: bootstrap::real().map_or(0, |r| r.malloc as usize),
        ..Objects::default()
    };
    // SAFETY: `visit` matches the callback type and only appends to the Objects behind `data`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut objs as *mut Objects).cast()) };
    objs
}

/// What the mark saw of the threads, for the report's notes.
#[derive(Default)]
pub(super) struct ThreadNotes {
    /// Threads that did not stop, and whether their stack could be scanned.
    pub(super) not_stopped: Vec<(u32, bool)>,
    pub(super) missed: usize,
}

/// Adds every root that depends on the threads: stacks, TLS windows, registers, allocations in
/// flight. Runs while the other threads are stopped, so it must not allocate: `roots`,
/// `checked` and `notes.not_stopped` come with room enough.
pub(super) fn thread_roots(
    world: &World,
    own_sp: usize,
    objs: &Objects,
    blocks: &Blocks,
    roots: &mut Vec<(usize, usize)>,
    checked: &mut Vec<(usize, usize)>,
    notes: &mut ThreadNotes,
) {
    let facts = |sp: usize, tp: usize| {
        let stack = procmaps::mapping_containing(sp);
        let tp_memory = match stack {
            _ if tp == 0 => None,
            Some((lo, hi)) if lo <= tp && tp < hi => stack,
            _ => procmaps::mapping_containing(tp),
        };
        ThreadFacts {
            sp,
            entered: false,
            sp_in_block: blocks.find(sp).is_some(),
            stack,
            tp,
            tp_memory,
            static_tls: objs.static_tls,
            own_area: crate::tls::area_at(tp)
                .filter(|_| tp != 0)
                .map(|a| (a as usize, a as usize + TLS_AREA_BYTES)),
            own_memory: &objs.own_memory,
        }
    };
    // The calling thread entered the exit path: its stack from the report's `Entry` up (which
    // holds its registers).
    // SAFETY: pthread_self only reads the thread register.
    let tp_self = unsafe { libc::pthread_self() } as usize;
    let own = thread_ranges(&ThreadFacts {
        entered: true,
        ..facts(own_sp, tp_self)
    });
    roots.extend(own.stack.into_iter().chain(own.tls).flatten());

    for seen in world.threads() {
        match seen {
            Seen::Stopped { regs, sp, tp, carry } => {
                roots.push(regs);
                let r = thread_ranges(&facts(sp, tp));
                roots.extend(r.stack.into_iter().chain(r.tls).flatten());
                if let Some(start) = carried(blocks, tp) {
                    roots.push(carry.keep(&[start]));
                }
            }
            Seen::NotStopped { tid, sp } => {
                // Its thread pointer is not known: its stack alone.
                let stack = sp.map(|sp| thread_ranges(&facts(sp, 0)).stack);
                for part in stack.into_iter().flatten().flatten() {
                    // It may still run and even exit, unmapping its stack: read with checks.
                    roots.push(part);
                    checked.push(part);
                }
                notes
                    .not_stopped
                    .push((tid, stack.is_some_and(|s| s[0].is_some())));
            }
        }
    }
    notes.missed = world.missed;
    checked.sort_unstable();
}

/// The block a stopped thread's allocation in flight holds by its header alone, as its start
/// pointer: from the record the thread's area keeps (see `analysis::carried`).
fn carried(blocks: &Blocks, tp: usize) -> Option<usize> {
    let rec = InFlight::from_words(thread::inflight_at(tp)?)?;
    rec.carried(HEADER_SIZE as u64, |a| blocks.starting_at(a as usize).is_some())
        .map(|a| a as usize)
}

/// libdmem's own memory, told by its own records rather than by the mapping it falls in: its
/// writable segments, the free history's rings and this report's buffers of block addresses.
/// (The kernel merges anonymous pages mapped right after libdmem's data onto its mapping, and
/// the loader keeps its records of libraries loaded later there; the report's buffers may share
/// a mapping with the main thread's TLS.) Made before the stop.
pub(super) fn own_memory(objs: &Objects, blocks: &Blocks, live: &[Live]) -> Vec<(usize, usize)> {
    let mut own = objs.own.clone();
    crate::history::mapped(&mut |s, e| own.push((s, e)));
    let at = live.as_ptr() as usize;
    own.push((at, at + core::mem::size_of_val(live)));
    own.extend(blocks.buffers());
    own
}

/// Writable memory of the program's own that holds no block, memcheck's roots beyond the
/// objects' data (see `analysis::roots`), less the objects' segments (roots already, or the
/// allocator's state) and libdmem's own memory (`own_memory`). Made before the stop; the parts that
/// hold a stopped thread's stack pointer are dropped after it.
pub(super) fn own_extra_roots(
    objs: &Objects,
    blocks: &Blocks,
    live: &[Live],
    maps: &[Mapping],
    arena: Option<(usize, usize)>,
) -> Vec<(usize, usize)> {
    // A report from a fatal signal keeps to the objects' data, stacks and TLS: its emergency
    // heap and the interrupted code's state are not told apart from the program's memory yet.
    if crate::own_heap::in_emergency() {
        return Vec::new();
    }
    let glibc = objs.glibc_backend;
    // glibc's main heap is `[heap]`, and wherever else main_arena's top or the blocks' chunks
    // say it lies (where brk fails, glibc maps more of it elsewhere).
    let mut maps = maps.to_vec();
    if glibc {
        let top = arena.and_then(|a| arena::top(&OwnMemory, a));
        let heaps = arena::main_heap(&OwnMemory, &maps, top, &mut chunks(live));
        mark_heaps(&mut maps, &heaps);
    }
    let mut parts = Vec::new();
    for i in 0..maps.len() {
        extra_roots(&maps, i, blocks, &[], &OwnMemory, glibc, &mut |s, e| {
            parts.push((s, e))
        });
    }
    for &hole in objs.data.iter().chain(&objs.libc_data).chain(&objs.own_memory) {
        let mut cut = Vec::with_capacity(parts.len() + 1);
        for (s, e) in parts {
            if hole.1 <= s || e <= hole.0 {
                cut.push((s, e));
                continue;
            }
            if s < hole.0 {
                cut.push((s, hole.0));
            }
            if hole.1 < e {
                cut.push((hole.1, e));
            }
        }
        parts = cut;
    }
    parts
}

/// Each block's chunk memory (its header, where malloc's answer starts for a block not aligned)
/// and the bytes libdmem asked for, in address order.
fn chunks(live: &[Live]) -> impl Iterator<Item = (usize, usize)> + '_ {
    live.iter().map(|b| (b.start - HEADER_SIZE, HEADER_SIZE + b.size))
}

/// Whether glibc's main heap holds some of the blocks (a few are asked), without allocating.
pub(super) fn in_main_heap(live: &[Live]) -> bool {
    chunks(live)
        .take(256)
        .any(|(at, need)| arena::in_main_heap(&OwnMemory, at, need) == Some(true))
}
