//! The roots of a leak scan over a core or a stopped process, and the loaded objects they come
//! from: the rule of `analysis::roots` (what is a root and what is left out, and why), with the
//! facts read from the outside: the loaded objects from the mappings, each thread's registers
//! and thread pointer from the core's notes or ptrace, the thread that entered the exit path
//! from libdmem's record of it (see `src/exit_entry.rs`), libdmem's own memory from its
//! descriptor.

use crate::analysis::arena;
use crate::analysis::descriptor::{self, TLS_AREA_BYTES};
use crate::analysis::maps::{self, Mapping};
use crate::analysis::roots as extra;
use crate::model::heap::{Heap, Within};
use crate::source::elf::ElfObject;
use crate::source::history;
use crate::source::image::Image;
use crate::source::mappings::Mappings;
use crate::source::memory::{ImageWords, Memory};
use crate::source::threads::{Thread, POINTER_REGS};
use std::path::{Path, PathBuf};

/// The allocators libdmem may forward to, by the start of their library's file name. A loaded
/// one is the backend; else glibc is.
const ALLOCATOR_LIBS: [&str; 3] = ["libjemalloc", "libtcmalloc", "libmimalloc"];

/// A mapped ELF object and where it was loaded.
pub struct Loaded {
    /// The file of its build to read its symbols from; None when none was found.
    pub file: Option<PathBuf>,
    pub name: String,
    pub elf: ElfObject,
    pub bias: u64,
}

impl Loaded {
    /// Its writable segments in the process, as the loader laid them out.
    pub fn writable(&self) -> Vec<(u64, u64)> {
        self.elf
            .loads
            .iter()
            .filter(|s| s.writable && s.memsz > 0)
            .map(|s| {
                (
                    self.bias.wrapping_add(s.vaddr),
                    self.bias.wrapping_add(s.vaddr + s.memsz),
                )
            })
            .collect()
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.elf.loads.iter().any(|s| {
            (self.bias.wrapping_add(s.vaddr)..self.bias.wrapping_add(s.vaddr + s.memsz)).contains(&addr)
        })
    }
}

/// The ELF objects among the mapped files, with their load bias, in the order of their first
/// mapping; files that are not ELF programs or libraries (locale archives, fonts) are left out.
pub fn loaded(maps: &Mappings) -> Vec<Loaded> {
    maps.files()
        .into_iter()
        .filter_map(|path| {
            // The file of the target's build; where none was found, the layout its own copy
            // of the headers gives (its data are roots all the same), with no symbols.
            let file = maps.local_file(path);
            let elf = match file {
                Some(f) => ElfObject::open_as(path, f).ok()?,
                None => maps.local.get(path)?.headers.clone()?,
            };
            let bias = maps.bias(&elf)?;
            Some(Loaded {
                file: file.map(Path::to_path_buf),
                name: file_name(path),
                elf,
                bias,
            })
        })
        .collect()
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What one root is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Data,
    Stack,
    Tls,
    /// A register's value, not memory.
    Register(u64),
}

#[derive(Clone, Debug)]
pub struct Root {
    pub kind: Kind,
    /// `writable data of leak_list`, `stack of thread 4242`, `register rax of thread 4242`.
    pub what: String,
    pub start: u64,
    pub end: u64,
}

impl Root {
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Data => "data",
            Kind::Stack => "stack",
            Kind::Tls => "tls",
            Kind::Register(_) => "register",
        }
    }
}

/// A range left out of the roots, and why.
#[derive(Clone, Debug)]
pub struct Excluded {
    pub start: u64,
    pub end: u64,
    pub what: String,
}

pub struct Roots {
    pub roots: Vec<Root>,
    pub excluded: Vec<Excluded>,
    /// What the user should know about them (main_arena not found...).
    pub notes: Vec<String>,
}

/// The allocator's own state to leave out of the roots, a note when glibc's main_arena was
/// not found where it matters, and where main_arena is when it was found.
fn allocator_state(
    objects: &[Loaded],
    mem: &dyn Memory,
    main_heap_blocks: bool,
) -> (Vec<Excluded>, Vec<String>, Option<(usize, usize)>) {
    let mut out = Vec::new();
    let mut at = None;
    let mut notes = Vec::new();
    let backend: Vec<&Loaded> = objects
        .iter()
        .filter(|o| ALLOCATOR_LIBS.iter().any(|p| o.name.starts_with(p)))
        .collect();
    for o in &backend {
        for (s, e) in o.writable() {
            out.push(Excluded {
                start: s,
                end: e,
                what: format!("writable data of {} (the allocator's own state)", o.name),
            });
        }
    }
    for o in objects.iter().filter(|o| o.name.starts_with("libc.so")) {
        let segs: Vec<(usize, usize)> = o
            .writable()
            .iter()
            .map(|&(s, e)| (s as usize, e as usize))
            .collect();
        match arena::main_arena(&ImageWords(mem), &segs) {
            Some((s, e)) => {
                at = Some((s, e));
                out.push(Excluded {
                    start: s as u64,
                    end: e as u64,
                    what: format!("main_arena of {} (the allocator's own state)", o.name),
                })
            }
            // Without blocks in glibc's main heap there is nothing its bookkeeping could
            // point to, so nothing to tell.
            None if backend.is_empty() && main_heap_blocks => notes.push(format!(
                "glibc's main_arena was not found in the data of {}, so it was scanned as a root: a \
                 block only the allocator's bookkeeping points to counts as in use",
                o.name
            )),
            None => {}
        }
    }
    (out, notes, at)
}

/// The parts of `[start, end)` outside every hole.
fn without(start: u64, end: u64, holes: &[Excluded]) -> Vec<(u64, u64)> {
    let mut parts = vec![(start, end)];
    for h in holes {
        let mut next = Vec::new();
        for (s, e) in parts {
            let mut cut = Vec::new();
            arena::subtract(
                (s as usize, e as usize),
                (h.start as usize, h.end as usize),
                &mut cut,
            );
            next.extend(cut.into_iter().map(|(a, b)| (a as u64, b as u64)));
        }
        parts = next;
    }
    parts
}

/// The record of where the program entered the exit path (see `descriptor::field::EXIT_ENTRY`):
/// the thread, its stack pointer there and its callee-saved registers; None when no thread
/// entered it (a running process, a core of a crash) or the library keeps no record.
struct ExitEntry {
    tid: u32,
    sp: u64,
    regs: [u64; descriptor::EXIT_ENTRY_REGS],
}

/// The callee-saved registers the record holds, by name.
const EXIT_ENTRY_NAMES: [&str; descriptor::EXIT_ENTRY_REGS] = ["rbx", "rbp", "r12", "r13", "r14", "r15"];

fn exit_entry(image: &Image) -> Option<ExitEntry> {
    let at = image.layout.exit_entry?;
    let word = |i: u64| image.mem.u64_at(at + 8 * i).ok();
    let tid = u32::try_from(word(0)?).ok().filter(|&t| t != 0)?;
    let mut regs = [0; descriptor::EXIT_ENTRY_REGS];
    for (i, r) in regs.iter_mut().enumerate() {
        *r = word(2 + i as u64)?;
    }
    Some(ExitEntry {
        tid,
        sp: word(1)?,
        regs,
    })
}

/// The roots of `image`, whose threads must be known (a core's notes, or a stopped process).
pub fn gather(image: &Image, objects: &[Loaded], heap: &Heap) -> Roots {
    let mem = &*image.mem;
    let regions = mem.regions();
    let (mut excluded, notes, main_heap) = allocator_and_main_heap(objects, mem, &regions, heap);
    let allocator = excluded.len();
    let mut roots = data_roots(image, objects, &mut excluded);
    excluded.extend(history_rings(image));
    // libdmem's own memory: its data and the free history's rings.
    let own: Vec<(usize, usize)> = excluded[allocator..]
        .iter()
        .map(|x| (x.start as usize, x.end as usize))
        .collect();
    let exit = exit_entry(image);
    let tls = tls_size(objects);
    let own = Own {
        // Where each thread's area of libdmem state lies from its thread pointer.
        tls_area: image
            .layout
            .inflight
            .and_then(|(offset_at, _)| mem.u64_at(offset_at).ok())
            .filter(|&o| o != 0),
        memory: &own,
    };
    for t in &image.threads {
        let entered = exit.as_ref().filter(|x| x.tid == t.tid);
        thread_roots(mem, t, entered, tls, &own, heap, &mut roots);
        if entered.is_none() {
            roots.extend(carried_roots(image, t, heap));
        }
    }
    own_memory_roots(image, objects, heap, &excluded, &main_heap, &mut roots);
    let roots = dumped(mem, &regions, roots);
    Roots {
        roots,
        excluded,
        notes,
    }
}

/// The allocator's own state to leave out (see `allocator_state`), its notes, and glibc's main
/// heap. The main heap comes from the lists alone first: whether it holds blocks decides
/// whether a main_arena not found matters; with main_arena's top chunk, it comes from that.
fn allocator_and_main_heap(
    objects: &[Loaded],
    mem: &dyn Memory,
    regions: &[Mapping],
    heap: &Heap,
) -> (Vec<Excluded>, Vec<String>, Vec<(usize, usize)>) {
    let chunks = || {
        heap.blocks.iter().filter(|b| b.align_log2 == 0).map(|b| {
            (
                (b.addr - heap.header_size) as usize,
                (heap.header_size + b.size) as usize,
            )
        })
    };
    let words = ImageWords(mem);
    let from_lists = arena::main_heap(&words, regions, None, &mut chunks());
    let (excluded, notes, main_arena) = allocator_state(objects, mem, !from_lists.is_empty());
    let top = main_arena.and_then(|a| arena::top(&words, a));
    let main_heap = match top {
        Some(_) => arena::main_heap(&words, regions, top, &mut chunks()),
        None => from_lists,
    };
    (excluded, notes, main_heap)
}

/// The writable data of every loaded object, less what is left out; libdmem's own (its list
/// heads point at headers, never into blocks) is added to what is left out instead.
fn data_roots(image: &Image, objects: &[Loaded], excluded: &mut Vec<Excluded>) -> Vec<Root> {
    let mut roots = Vec::new();
    for o in objects {
        if o.contains(image.layout.addr) {
            excluded.extend(o.writable().into_iter().map(|(s, e)| Excluded {
                start: s,
                end: e,
                what: format!("writable data of {} (its own lists)", o.name),
            }));
            continue;
        }
        for (s, e) in o.writable() {
            for (a, b) in without(s, e, excluded) {
                roots.push(Root {
                    kind: Kind::Data,
                    what: format!("writable data of {}", o.name),
                    start: a,
                    end: b,
                });
            }
        }
    }
    roots
}

/// libdmem's other memory: the free history's rings hold addresses of blocks freed and
/// allocated.
fn history_rings(image: &Image) -> impl Iterator<Item = Excluded> {
    history::ring_ranges(&*image.mem, image.layout.history.as_ref())
        .into_iter()
        .map(|(start, end)| Excluded {
            start,
            end,
            what: "the free history's ring (libdmem's own)".into(),
        })
}

/// libdmem's own memory, for the threads' roots: where each thread's area lies from its thread
/// pointer, and the rest.
struct Own<'a> {
    tls_area: Option<u64>,
    memory: &'a [(usize, usize)],
}

/// The static TLS the loaded objects take (see `analysis::roots::static_tls`).
fn tls_size(objects: &[Loaded]) -> usize {
    extra::static_tls(objects.iter().map(|o| o.elf.tls_memsz as usize))
}

/// One thread's roots: its stack, its static TLS and thread descriptor, its registers, by the
/// rule of `analysis::roots`. The thread that entered the exit path is scanned with the
/// program's callee-saved registers it recorded there: its own registers are libdmem's.
fn thread_roots(
    mem: &dyn Memory,
    t: &Thread,
    entered: Option<&ExitEntry>,
    tls: usize,
    own: &Own,
    heap: &Heap,
    roots: &mut Vec<Root>,
) {
    let sp = entered.map_or(t.sp(), |x| x.sp);
    let fs = t.fs_base();
    let extent = |a: u64| {
        (a != 0)
            .then(|| mem.extent(a))
            .flatten()
            .map(|(lo, hi)| (lo as usize, hi as usize))
    };
    let ranges = extra::thread_ranges(&extra::ThreadFacts {
        sp: sp as usize,
        entered: entered.is_some(),
        sp_in_block: matches!(heap.find(sp), Some((_, Within::Block))),
        stack: extent(sp),
        tp: fs as usize,
        tp_memory: extent(fs),
        static_tls: tls,
        own_area: own.tls_area.filter(|_| fs != 0).map(|o| {
            let at = fs.wrapping_add(o) as usize;
            (at, at + TLS_AREA_BYTES)
        }),
        own_memory: own.memory,
    });
    let named = [
        (ranges.stack, Kind::Stack, "stack"),
        (ranges.tls, Kind::Tls, "TLS"),
    ];
    for (parts, kind, name) in named {
        for (start, end) in parts.into_iter().flatten() {
            roots.push(Root {
                kind: kind.clone(),
                what: format!("{name} of thread {}", t.tid),
                start: start as u64,
                end: end as u64,
            });
        }
    }
    roots.extend(register_roots(t, entered));
}

/// The block a thread's allocation in flight holds by its header alone (see
/// `analysis::carried`), as a start pointer, like a register's value.
fn carried_roots(image: &Image, t: &Thread, heap: &Heap) -> Option<Root> {
    let rec = image.layout.inflight(&*image.mem, t.fs_base())?;
    let block_at = |a: u64| matches!(heap.find(a), Some((i, Within::Block)) if heap.blocks[i].addr == a);
    let start = rec.carried(heap.header_size, block_at)?;
    Some(Root {
        kind: Kind::Register(start),
        what: format!(
            "thread {}'s {} in progress, which holds the block by its header",
            t.tid,
            rec.entry()
        ),
        start: 0,
        end: 0,
    })
}

/// A thread's registers that hold something: the pointer registers, or for the thread that
/// entered the exit path the callee-saved ones it recorded there.
fn register_roots(t: &Thread, entered: Option<&ExitEntry>) -> Vec<Root> {
    let regs: Vec<(&str, u64, &str)> = match entered {
        Some(x) => EXIT_ENTRY_NAMES
            .iter()
            .zip(x.regs)
            .map(|(&n, v)| (n, v, " where it entered the exit path"))
            .collect(),
        None => POINTER_REGS
            .iter()
            .map(|&n| (n, t.reg(n).unwrap_or(0), ""))
            .collect(),
    };
    regs.into_iter()
        .filter(|&(_, v, _)| v != 0)
        .map(|(name, v, when)| Root {
            kind: Kind::Register(v),
            what: format!("register {name} of thread {}{when}", t.tid),
            start: 0,
            end: 0,
        })
        .collect()
}

/// `roots` less what lies in a mapping the core did not dump: the kernel leaves out a private
/// mapping nothing was ever written to (an object's `.bss` never touched, its `.data` as the
/// file has it), which holds no pointer to a block. What lies in no mapping at all stays, so
/// that the scan says it could not read it.
fn dumped(mem: &dyn Memory, regions: &[Mapping], roots: Vec<Root>) -> Vec<Root> {
    let mut out = Vec::with_capacity(roots.len());
    for r in roots {
        if matches!(r.kind, Kind::Register(_)) {
            out.push(r);
            continue;
        }
        let mut at = r.start;
        while at < r.end {
            let (stop, keep) = match mem.extent(at) {
                Some((_, hi)) => (hi.min(r.end), true),
                None => match maps::find(regions, at as usize) {
                    Some(m) => ((m.end as u64).min(r.end), false),
                    None => {
                        let next = regions.iter().map(|m| m.start as u64).find(|&s| s > at);
                        (next.unwrap_or(r.end).min(r.end), true)
                    }
                },
            };
            if keep {
                out.push(Root {
                    start: at,
                    end: stop,
                    ..r.clone()
                });
            }
            at = stop;
        }
    }
    out
}

/// Writable memory of the program's own that holds no block (see analysis::roots), less what
/// is a root or left out already.
fn own_memory_roots(
    image: &Image,
    objects: &[Loaded],
    heap: &Heap,
    excluded: &[Excluded],
    main_heap: &[(usize, usize)],
    roots: &mut Vec<Root>,
) {
    let mem = &*image.mem;
    let blocks = heap.analysis_blocks();
    let sps: Vec<usize> = image.threads.iter().map(|t| t.sp() as usize).collect();
    let mut regions = mem.regions();
    // A core does not name glibc's brk heap; its gaps between blocks are glibc's free chunks
    // and libdmem's headers.
    extra::mark_heaps(&mut regions, main_heap);
    let taken: Vec<Excluded> = roots
        .iter()
        .filter(|r| !matches!(r.kind, Kind::Register(_)))
        .map(|r| Excluded {
            start: r.start,
            end: r.end,
            what: String::new(),
        })
        .chain(excluded.iter().cloned())
        .collect();
    let words = ImageWords(mem);
    let glibc = !objects
        .iter()
        .any(|o| ALLOCATOR_LIBS.iter().any(|p| o.name.starts_with(p)));
    for i in 0..regions.len() {
        let mut parts = Vec::new();
        extra::extra_roots(&regions, i, blocks, &sps, &words, glibc, &mut |s, e| {
            parts.push((s, e))
        });
        for (s, e) in parts {
            for (a, b) in without(s as u64, e as u64, &taken) {
                roots.push(Root {
                    kind: Kind::Data,
                    what: format!("writable memory at {a:#x}"),
                    start: a,
                    end: b,
                });
            }
        }
    }
}
