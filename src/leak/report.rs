//! The leak report printed at exit (`leak-report`), in valgrind's four classes.
//!
//! Roots are the ones the launcher reads from a core (`src/bin/dmem/model/roots.rs`): every thread's saved
//! registers and its stack from its stack pointer (less the 128-byte red zone) to the top of the
//! mapping that holds it, thread-local storage, and the writable segments of every loaded object
//! except the allocator's own state (glibc's `main_arena`, or the whole writable data of a
//! preloaded backend) and libdmem itself (whose list heads point at headers, never into blocks).
//!
//! The order matters, because other threads are stopped while the mark runs (see `stopworld`):
//! what needs the loader's lock (`dl_iterate_phdr`) or allocates is done first, then every list
//! lock is taken, so no block can be freed or added, then the threads are stopped, the mark runs
//! without allocating, the threads are released and only then are the results grouped,
//! symbolised and printed. Everything runs once, at exit, on libdmem's own heap.

use super::stopworld::{self, Seen, World};
use crate::analysis::arena::{self, Words};
use crate::analysis::maps::Mapping;
use crate::analysis::reach::{self, Blocks, Class, Heuristic, Marker, Source};
use crate::analysis::roots::extra_roots;
use crate::diag;
use crate::header::{self, Header, NFRAMES};
use crate::lists::{self, Broken, LISTS};
use crate::out::Out;
use crate::{bootstrap, options, procmaps, sink, thread, unwind};
use core::fmt::Write;
use std::collections::HashMap;

/// The x86-64 ABI lets a function use 128 bytes below its stack pointer without moving it.
const RED_ZONE: usize = 128;

struct Live {
    start: usize,
    size: usize,
    frames: [usize; NFRAMES],
}

/// Copies every live block out of the lists, sorted by address, and says where a list broken by
/// the program stopped the copy. The caller holds every list lock, so the copy is consistent and
/// stays true until the locks are released.
fn snapshot(maps: &[Mapping]) -> (Vec<Live>, Option<lists::Break>) {
    let n: u64 = LISTS
        .iter()
        // SAFETY: every list lock is held (see above), so the counters are stable.
        .map(|l| unsafe { *l.live_blocks.get() })
        .sum();
    let mut out = Vec::with_capacity(n as usize);
    let broken = lists::walk_locked(&|s, e| procmaps::readable(maps, s, e), &mut |hr| {
        out.push(Live {
            start: header::to_user(hr as *const Header as *mut Header) as usize,
            size: hr.size(),
            frames: hr.frames,
        })
    });
    out.sort_unstable_by_key(|b| b.start);
    (out, broken)
}

/// What the loaded objects contribute to the roots, read with `dl_iterate_phdr` before anything
/// is locked or stopped: it takes the loader's lock, which a stopped thread may hold.
#[derive(Default)]
struct Objects {
    /// Writable segments to scan: every object's but libdmem's and the backend's.
    data: Vec<(usize, usize)>,
    /// libc's writable segments when glibc is the backend; `main_arena` is cut out of them.
    libc_data: Vec<(usize, usize)>,
    /// The calling thread's thread-local blocks, one per module that has one.
    tls: Vec<(usize, usize)>,
    /// The address the backend's `malloc` lives at, to recognise its object.
    malloc: usize,
}

fn objects() -> Objects {
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

/// This process's memory as the shared analysis reads it: with `process_vm_readv`, so an address
/// that is not mapped (a bin's pair of words that is no bin points anywhere) reads as nothing
/// instead of faulting.
struct OwnMemory;

impl Words for OwnMemory {
    fn read_words(&self, addr: usize, buf: &mut [usize]) -> usize {
        let mut n = 0;
        stopworld::read_words_checked(addr, addr + 8 * buf.len(), &mut |ws| {
            buf[n..n + ws.len()].copy_from_slice(ws);
            n += ws.len();
        });
        n
    }
}

/// Where the exit report was entered from, which decides where the calling thread's stack is
/// scanned from: the report's own frames, and the dead slots of the frames that led to it,
/// hold block addresses the program no longer has, so they must not be taken for references.
pub struct Entry {
    /// The calling thread's callee-saved registers, taken in the caller's frame; scanned as part
    /// of the stack when the scan starts at this struct.
    #[allow(dead_code)]
    regs: [usize; 6],
    /// Where the stack scan starts instead, when the caller knows: the stack pointer of the
    /// program's code that called our way out. Registers are then not roots, as in valgrind's
    /// check after the process's last system call.
    from: usize,
}

impl Entry {
    /// Must be inlined into the caller, so the registers are the caller's; the stack is scanned
    /// from this struct up.
    #[inline(always)]
    pub fn capture() -> Entry {
        #[allow(unused_mut)]
        let mut regs = [0usize; 6];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only copies registers into locals; touches no memory and no flags.
        unsafe {
            core::arch::asm!(
                "mov {0}, rbx", "mov {1}, rbp", "mov {2}, r12", "mov {3}, r13", "mov {4}, r14",
                "mov {5}, r15",
                out(reg) regs[0], out(reg) regs[1], out(reg) regs[2], out(reg) regs[3],
                out(reg) regs[4], out(reg) regs[5], options(nomem, nostack, preserves_flags),
            );
        }
        Entry { regs, from: 0 }
    }

    /// The stack is scanned from `sp`, the stack pointer of the program's call into libdmem.
    pub fn at(sp: usize) -> Entry {
        Entry {
            regs: [0; 6],
            from: sp,
        }
    }
}

/// What the mark saw of the threads, for the report's notes.
#[derive(Default)]
struct ThreadNotes {
    /// Threads that did not stop, and whether their stack could be scanned.
    not_stopped: Vec<(u32, bool)>,
    missed: usize,
}

/// Adds every root that depends on the threads: stacks, registers and thread-local blocks.
/// Runs while the other threads are stopped, so it must not allocate: `roots`, `checked` and
/// `notes.not_stopped` come with room enough.
fn thread_roots(
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
    if let Some((_, top)) = procmaps::mapping_containing(own_sp) {
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
            Seen::Stopped { regs, sp, tp } => {
                roots.push(regs);
                let Some((lo, top)) = procmaps::mapping_containing(sp) else {
                    continue;
                };
                let stack = (sp.saturating_sub(RED_ZONE).max(lo), top);
                roots.push(stack);
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
                let stack = sp.and_then(|sp| {
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

/// Writable memory of the program's own that holds no block, memcheck's roots beyond the
/// objects' data (see `analysis::roots`), less the objects' segments (roots already, or the
/// allocator's state) and this report's own buffers of block addresses. Made before the stop;
/// the parts that hold a stopped thread's stack pointer are dropped after it.
fn own_extra_roots(objs: &Objects, blocks: &Blocks, live: &[Live], maps: &[Mapping]) -> Vec<(usize, usize)> {
    // A report from a fatal signal keeps to the objects' data, stacks and TLS: its emergency
    // heap and the interrupted code's state are not told apart from the program's memory yet.
    if crate::own_heap::in_emergency() {
        return Vec::new();
    }
    let glibc = !objs.libc_data.is_empty();
    let mut parts = Vec::new();
    for i in 0..maps.len() {
        if unwind::is_own(maps[i].start) {
            continue;
        }
        extra_roots(maps, i, blocks, &[], &OwnMemory, glibc, &mut |s, e| {
            parts.push((s, e))
        });
    }
    let buffer = |p: *const u8, bytes: usize| (p as usize, p as usize + bytes);
    let mut holes: Vec<(usize, usize)> = objs.data.iter().chain(&objs.libc_data).copied().collect();
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

/// Calls `emit` with the aligned words in `[start, end)` of this process's memory.
fn scan_words(start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
    let a = (start + 7) & !7;
    if a + 8 > end {
        return;
    }
    // SAFETY: roots are mapped segments of loaded objects, thread-local blocks and the stacks
    // of stopped threads (a running thread's stack goes through `read_words_checked`), and
    // block ranges are live blocks held in place by the list locks; all are readable, nothing
    // writes them while the other threads are stopped, and the start is 8-byte aligned.
    emit(unsafe { core::slice::from_raw_parts(a as *const usize, (end - a) / 8) });
}

/// Runs the report and returns how many blocks leaked (definitely, indirectly or possibly
/// lost). Never inlined: its locals (block addresses) must die with its frame, below the stack
/// that `abort-shutdown` scrubs.
#[inline(never)]
pub fn leak_report(entry: &Entry) -> usize {
    let own_sp = match entry.from {
        0 => core::hint::black_box(entry) as *const Entry as usize,
        sp => sp,
    };
    let _guard = thread::Guard::enter();

    // Everything that allocates or takes the loader's lock, before the stop.
    let mut world = World::prepare();
    let objs = objects();
    lists::lock_all();
    // The process's mappings, sorted (the kernel lists them in order), read with the lists
    // locked so that every block on them is in one; empty in a report from a fatal signal, whose
    // heap must not grow for them.
    let maps = if crate::own_heap::in_emergency() {
        Vec::new()
    } else {
        procmaps::all()
    };
    let (live, broken) = snapshot(&maps);
    let mut blocks = Blocks::with_capacity(live.len());
    for b in &live {
        blocks.push(b.start, b.start + b.size);
    }
    blocks.index();
    let mut marker = Marker::new(live.len());
    let mut extra = own_extra_roots(&objs, &blocks, &live, &maps);
    let room = world.capacity();
    let mut roots = Vec::with_capacity(
        objs.data.len() + 2 * objs.libc_data.len() + objs.tls.len() * (room + 2) + 3 * room + 2 + extra.len(),
    );
    let mut checked = Vec::with_capacity(room);
    let mut notes = ThreadNotes {
        not_stopped: Vec::with_capacity(room),
        missed: 0,
    };

    world.stop();
    roots.extend_from_slice(&objs.data);
    let arena = arena::main_arena(&OwnMemory, &objs.libc_data);
    for &seg in &objs.libc_data {
        match arena {
            Some(cut) => arena::subtract(seg, cut, &mut roots),
            None => roots.push(seg),
        }
    }
    thread_roots(
        &world,
        own_sp,
        &objs,
        &blocks,
        &mut roots,
        &mut checked,
        &mut notes,
    );
    // Stacks are scanned from their stack pointer up only: the memory below is no root.
    extra.retain(|&(s, e)| {
        let holds = |sp: usize| s <= sp && sp < e;
        let stack = world.threads().any(|t| match t {
            Seen::Stopped { sp, .. } | Seen::NotStopped { sp: Some(sp), .. } => holds(sp),
            _ => false,
        });
        !stack && !holds(own_sp)
    });
    roots.extend_from_slice(&extra);
    let heuristics = options::get().leak_heuristics;
    marker.classify(
        &blocks,
        &roots,
        &[],
        heuristics,
        &mut OwnScan {
            checked: &checked,
            maps: &maps,
        },
    );
    world.release();
    lists::unlock_all();

    let show = options::get().leak_show;
    let classes: Vec<Class> = (0..live.len()).map(|i| marker.class(i)).collect();
    let heuristic: Vec<Option<Heuristic>> = (0..live.len()).map(|i| marker.heuristic(i)).collect();
    let glibc = !objs.libc_data.is_empty();
    write_report(
        &live,
        &classes,
        &heuristic,
        show,
        &notes,
        broken,
        glibc && arena.is_none(),
    )
}

/// This process's memory as the classification reads it, while the other threads are stopped.
struct OwnScan<'a> {
    /// Ranges (sorted) that may not be readable whole: stacks of threads that could not be
    /// stopped, read through the kernel.
    checked: &'a [(usize, usize)],
    /// The mappings, sorted, for memcheck's test of a vtable.
    maps: &'a [Mapping],
}

impl Source for OwnScan<'_> {
    fn scan(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
        let i = self.checked.partition_point(|&(s, _)| s <= start);
        if i > 0 && end <= self.checked[i - 1].1 {
            stopworld::read_words_checked(start, end, emit);
        } else {
            scan_words(start, end, emit);
        }
    }

    /// Only words of live blocks are asked for, which the list locks keep mapped.
    fn word(&mut self, addr: usize) -> Option<usize> {
        let mut w = None;
        scan_words(addr, addr + 8, &mut |ws| w = ws.first().copied());
        w
    }

    /// Words of readable file-backed mappings only, by `is_vtable`'s rule.
    fn is_vtable(&mut self, addr: usize) -> bool {
        let maps = self.maps;
        reach::is_vtable(maps, addr, &mut |a| self.word(a))
    }
}

/// Groups the blocks by class and stack, prints the report and returns the count of leaked
/// blocks.
fn write_report(
    live: &[Live],
    classes: &[Class],
    heuristic: &[Option<Heuristic>],
    show: u8,
    notes: &ThreadNotes,
    broken: Option<lists::Break>,
    no_arena: bool,
) -> usize {
    #[derive(Default)]
    struct Group {
        blocks: usize,
        bytes: usize,
        example: usize,
    }
    let mut totals: HashMap<Class, (usize, usize)> = HashMap::new();
    let mut groups: HashMap<(Class, [usize; NFRAMES]), Group> = HashMap::new();
    for (b, &c) in live.iter().zip(classes) {
        let t = totals.entry(c).or_default();
        t.0 += 1;
        t.1 += b.size;
        if show & c.bit() == 0 {
            continue;
        }
        let g = groups.entry((c, b.frames)).or_default();
        g.blocks += 1;
        g.bytes += b.size;
        if g.example == 0 {
            g.example = b.start;
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|a, b| (a.0 .0, b.1.bytes, a.0 .1).cmp(&(b.0 .0, a.1.bytes, b.0 .1)));

    let mut out = open_output();
    let _ = write!(out, "dmem: leak summary:");
    for (i, c) in Class::ALL.iter().enumerate() {
        let (n, bytes) = totals.get(c).copied().unwrap_or_default();
        let _ = write!(
            out,
            "{} {}: {bytes} bytes in {}",
            if i > 0 { ";" } else { "" },
            c.name(),
            blocks(n)
        );
    }
    let _ = writeln!(out);
    let mut via = [(0usize, 0usize); 4];
    for (b, h) in live.iter().zip(heuristic) {
        if let Some(h) = h {
            via[*h as usize].0 += 1;
            via[*h as usize].1 += b.size;
        }
    }
    if via.iter().any(|v| v.0 > 0) {
        let _ = write!(out, "dmem: of which still reachable via heuristic:");
        let mut first = true;
        for (h, &(n, bytes)) in Heuristic::ALL.iter().zip(&via).filter(|(_, v)| v.0 > 0) {
            let sep = if first { "" } else { ";" };
            first = false;
            let _ = write!(out, "{sep} {}: {bytes} bytes in {}", h.name(), blocks(n));
        }
        let _ = writeln!(out);
    }
    for &(tid, scanned) in &notes.not_stopped {
        if scanned {
            let _ = writeln!(
                out,
                "dmem: thread {tid} could not be stopped; its stack is scanned as it is"
            );
        } else {
            let _ = writeln!(
                out,
                "dmem: thread {tid} could not be stopped and shows no stack pointer; its stack is not scanned"
            );
        }
    }
    if notes.missed > 0 {
        let _ = writeln!(
            out,
            "dmem: {} started during the mark and were neither stopped nor scanned",
            plural(notes.missed, "thread")
        );
    }
    if let Some(b) = broken {
        let why = match b.why {
            Broken::Unreadable => "which is not readable".to_string(),
            Broken::BadMagic(m) => format!("whose magic is {m:#x}"),
            Broken::PrevMismatch => "whose prev does not lead back".to_string(),
            Broken::TooLong => "past the list's count of blocks (a cycle)".to_string(),
        };
        let from = match b.from {
            0 => format!("the head of list {}", b.list),
            h => format!("header {h:#x} on list {}", b.list),
        };
        let _ = writeln!(
            out,
            "dmem: the heap was overwritten: {from} leads to {:#x}, {why}; the blocks past it{} are not in this report",
            b.to,
            match b.lists {
                1 => String::new(),
                n => format!(" and past breaks in {} more", plural(n - 1, "list")),
            }
        );
    }
    if no_arena {
        let _ = writeln!(
            out,
            "dmem: glibc's main_arena was not found in libc's data, so it is scanned like the rest"
        );
    }
    let hidden: Vec<&str> = Class::ALL
        .iter()
        .filter(|c| show & c.bit() == 0 && totals.contains_key(c))
        .map(|c| c.name())
        .collect();
    if !hidden.is_empty() {
        let _ = writeln!(
            out,
            "dmem: not listed: {} (leak-show=all lists every class)",
            hidden.join(", ")
        );
    }
    for ((class, frames), g) in &groups {
        let _ = writeln!(
            out,
            "\n{} bytes in {} {} {}, e.g. {:#x}, allocated at:",
            g.bytes,
            blocks(g.blocks),
            if g.blocks == 1 { "is" } else { "are" },
            class.name(),
            g.example
        );
        for (i, &pc) in frames.iter().take_while(|&&pc| pc != 0).enumerate() {
            let _ = write!(out, "    #{i} {pc:#x} ");
            diag::describe_pc(&mut out, pc);
            let _ = writeln!(out);
        }
    }
    out.flush();
    live.iter().zip(classes).filter(|(_, c)| c.is_leak()).count()
}

fn blocks(n: usize) -> String {
    plural(n, "block")
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The report's destination: `report-file=PATH` when given, else standard error (see `sink.rs`).
fn open_output() -> Out {
    Out::to_fd(sink::report_fd().unwrap_or(-1))
}
