//! The exit report's roots: what the loaded objects contribute (writable segments, libc's data
//! around `main_arena`, thread-local blocks), what the threads contribute (stacks from their
//! stack pointers, saved registers), and the program's own writable memory by the rule of
//! `analysis::roots`.

use super::live::Live;
use super::memory::OwnMemory;
use super::stopworld::{Seen, World};
use crate::analysis::arena;
use crate::analysis::carried::InFlight;
use crate::analysis::maps::Mapping;
use crate::analysis::reach::Blocks;
use crate::analysis::roots::{extra_roots, mark_heaps};
use crate::header::HEADER_SIZE;
use crate::{bootstrap, procmaps, thread, unwind};

/// The x86-64 ABI lets a function use 128 bytes below its stack pointer without moving it.
pub(super) const RED_ZONE: usize = 128;

/// What the loaded objects contribute to the roots, read with `dl_iterate_phdr` before anything
/// is locked or stopped: it takes the loader's lock, which a stopped thread may hold.
#[derive(Default)]
pub(super) struct Objects {
    /// Writable segments to scan: every object's but libdmem's and the backend's.
    pub(super) data: Vec<(usize, usize)>,
    /// libdmem's own writable segments: its lists, descriptor and bootstrap arena.
    pub(super) own: Vec<(usize, usize)>,
    /// libc's writable segments when glibc is the backend; `main_arena` is cut out of them.
    pub(super) libc_data: Vec<(usize, usize)>,
    /// The calling thread's thread-local blocks, one per module that has one.
    pub(super) tls: Vec<(usize, usize)>,
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
            for ph in loads.filter(|ph| ph.p_flags & libc::PF_W != 0) {
                if !backend {
                    objs.data.push(seg(ph));
                } else if is_libc {
                    objs.libc_data.push(seg(ph));
                }
                // Any other backend (jemalloc, tcmalloc, mimalloc): all its writable data is the
                // allocator's state, left out whole.
            }
            for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_TLS) {
                if !info.dlpi_tls_data.is_null() {
                    let tls = info.dlpi_tls_data as usize;
                    objs.tls.push((tls, tls + ph.p_memsz as usize));
                }
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

/// Adds every root that depends on the threads: stacks, registers and thread-local blocks.
/// Runs while the other threads are stopped, so it must not allocate: `roots`, `checked` and
/// `notes.not_stopped` come with room enough.
pub(super) fn thread_roots(
    world: &World,
    own_sp: usize,
    objs: &Objects,
    blocks: &Blocks,
    roots: &mut Vec<(usize, usize)>,
    checked: &mut Vec<(usize, usize)>,
    notes: &mut ThreadNotes,
) {
    // The calling thread: its stack from the report's `Entry` up (which holds its registers),
    // and, through dl_iterate_phdr, every thread-local block of its own, static or dynamic.
    // A thread running on a stack the program malloc'ed (a coroutine's, through makecontext)
    // has no stack of its own to scan: the mapping around its stack pointer is the heap, and
    // the coroutine's stack is a block like any other, whose frames count once it is reached.
    let on_heap = |sp: usize| blocks.find(sp).is_some();
    if let Some((_, top)) = procmaps::mapping_containing(own_sp).filter(|_| !on_heap(own_sp)) {
        roots.push((own_sp, top));
    }
    roots.extend_from_slice(&objs.tls);

    // Static TLS sits at a fixed distance below the thread pointer, the same for every thread
    // (glibc's `l_tls_offset`), so the calling thread's blocks give each module's distance. A
    // block inside a live heap block is a dynamic one (malloc'ed by the loader on first use),
    // which the dtv reaches, not the thread pointer.
    // SAFETY: pthread_self only reads the thread register.
    let tp_self = unsafe { libc::pthread_self() } as usize;
    let static_tls = || {
        objs.tls.iter().filter_map(move |&(s, e)| {
            let off = tp_self.checked_sub(s)?;
            (off < 16 << 20 && blocks.find(s).is_none()).then_some((off, e - s))
        })
    };

    for seen in world.threads() {
        match seen {
            Seen::Stopped { regs, sp, tp, carry } => {
                roots.push(regs);
                let Some((lo, top)) = procmaps::mapping_containing(sp) else {
                    continue;
                };
                let stack = if on_heap(sp) {
                    (sp, sp)
                } else {
                    (sp.saturating_sub(RED_ZONE).max(lo), top)
                };
                roots.push(stack);
                if let Some(start) = carried(blocks, tp) {
                    roots.push(carry.keep(&[start]));
                }
                // A thread's static TLS lies right below its descriptor, which glibc places at
                // the top of the thread's stack mapping, so the stack scan above covers it. The
                // main thread's block is elsewhere (the loader allocated it at start-up): it is
                // added from its thread pointer.
                for (off, size) in static_tls() {
                    let Some(start) = tp.checked_sub(off) else {
                        continue;
                    };
                    if start < stack.0 || start + size > stack.1 {
                        roots.push((start, start + size));
                    }
                }
            }
            Seen::NotStopped { tid, sp } => {
                let stack = sp.filter(|&sp| !on_heap(sp)).and_then(|sp| {
                    let (lo, top) = procmaps::mapping_containing(sp)?;
                    Some((sp.saturating_sub(RED_ZONE).max(lo), top))
                });
                if let Some(stack) = stack {
                    // It may still run and even exit, unmapping its stack: read with checks.
                    roots.push(stack);
                    checked.push(stack);
                }
                notes.not_stopped.push((tid, stack.is_some()));
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

/// Writable memory of the program's own that holds no block, memcheck's roots beyond the
/// objects' data (see `analysis::roots`), less the objects' segments (roots already, or the
/// allocator's state) and libdmem's own memory, told by its own records rather than by the
/// mapping it falls in: its writable segments, the free history's rings and this report's
/// buffers of block addresses. (The kernel merges anonymous pages mapped right after libdmem's
/// data onto its mapping, and the loader keeps its records of libraries loaded later there.)
/// Made before the stop; the parts that hold a stopped thread's stack pointer are dropped
/// after it.
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
    let glibc = !objs.libc_data.is_empty();
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
    let buffer = |p: *const u8, bytes: usize| (p as usize, p as usize + bytes);
    let mut holes: Vec<(usize, usize)> = objs
        .data
        .iter()
        .chain(&objs.libc_data)
        .chain(&objs.own)
        .copied()
        .collect();
    crate::history::mapped(&mut |s, e| holes.push((s, e)));
    holes.push(buffer(live.as_ptr().cast(), core::mem::size_of_val(live)));
    holes.extend(blocks.buffers());
    for hole in holes {
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
